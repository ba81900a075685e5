#include "vmm/memory/guest_memory.hpp"

#include <fcntl.h>

#include <algorithm>

namespace sbx {

namespace {
constexpr std::uint64_t kPageSize = 4096;
}

Result<GuestMemory> GuestMemory::create(std::span<const MemoryRegionSpec> specs) {
    return create(specs, [](const MemoryRegionSpec& spec, std::size_t) {
        return unbacked(MmapRegion::guest_ram(spec.size));
    });
}

Result<GuestMemory::MappedRegion> GuestMemory::unbacked(Result<MmapRegion> mapping) {
    if (!mapping) {
        return mapping.error();
    }
    return MappedRegion{std::move(*mapping)};
}

Result<GuestMemory::MappedRegion> GuestMemory::private_file(Result<MmapRegion> mapping, int fd,
                                                            std::uint64_t offset) {
    if (!mapping) {
        return mapping.error();
    }
    UniqueFd dup(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
    if (!dup) {
        return sys_error("cannot duplicate the descriptor of the file guest memory maps");
    }
    return MappedRegion{std::move(*mapping), MappedFile{std::move(dup), offset}};
}

Result<GuestMemory> GuestMemory::create(std::span<const MemoryRegionSpec> specs, const MapRegion& map_region) {
    std::vector<MemoryRegionSpec> sorted(specs.begin(), specs.end());
    std::sort(sorted.begin(), sorted.end(),
              [](const auto& a, const auto& b) { return a.start < b.start; });
    std::vector<Region> regions;
    std::uint64_t previous_end = 0;
    for (const auto& spec : sorted) {
        if (spec.size == 0 || spec.size % kPageSize != 0 || spec.start.value % kPageSize != 0) {
            return make_error("memory region at {:#x} size {:#x} is empty or not page-aligned",
                              spec.start.value, spec.size);
        }
        GuestAddress end;
        if (!spec.start.checked_add(spec.size, end)) {
            return make_error("memory region at {:#x} wraps the address space", spec.start.value);
        }
        if (!regions.empty() && spec.start.value < previous_end) {
            return make_error("memory region at {:#x} overlaps the previous one", spec.start.value);
        }
        auto mapping = map_region(spec, regions.size());
        if (!mapping) {
            return mapping.error().context("guest memory");
        }
        if (mapping->mapping.size() != spec.size) {
            return make_error("guest memory: region at {:#x} mapped {} bytes, not {}", spec.start.value,
                              mapping->mapping.size(), spec.size);
        }
        regions.push_back(Region{spec.start, std::move(mapping->mapping), std::move(mapping->file)});
        previous_end = end.value;
    }
    if (regions.empty()) {
        return make_error("guest memory needs at least one region");
    }
    return GuestMemory(std::move(regions));
}

std::uint64_t GuestMemory::total_size() const {
    std::uint64_t total = 0;
    for (const auto& r : regions_) {
        total += r.size();
    }
    return total;
}

std::uint64_t GuestMemory::end() const { return regions_.empty() ? 0 : regions_.back().end(); }

const GuestMemory::Region* GuestMemory::find(GuestAddress addr) const {
    // Last region whose start is <= addr.
    auto it = std::upper_bound(regions_.begin(), regions_.end(), addr,
                               [](GuestAddress a, const Region& r) { return a < r.start; });
    if (it == regions_.begin()) {
        return nullptr;
    }
    --it;
    return addr.value < it->end() ? &*it : nullptr;
}

Result<std::span<std::uint8_t>> GuestMemory::slice(GuestAddress addr, std::uint64_t len) const {
    const Region* r = find(addr);
    if (r == nullptr) {
        return make_error("guest address {:#x} is not backed by memory", addr.value);
    }
    std::uint64_t offset = addr.value - r->start.value;
    if (len > r->size() - offset) {
        return make_error("guest range {:#x}+{:#x} runs past the end of its memory region",
                          addr.value, len);
    }
    return std::span<std::uint8_t>(r->mapping.data() + offset, static_cast<std::size_t>(len));
}

bool GuestMemory::contains(GuestAddress addr, std::uint64_t len) const {
    // Walk region by region so a range spanning adjacent regions counts.
    while (len > 0) {
        const Region* r = find(addr);
        if (r == nullptr) {
            return false;
        }
        std::uint64_t chunk = std::min(len, r->end() - addr.value);
        len -= chunk;
        addr = addr + chunk;
    }
    return true;
}

// Calls fn(host pointer, offset into the access, length) for each piece of
// [addr, addr+len) in turn, one piece per region it crosses. The caller has
// checked contains(addr, len).
template <typename Fn>
void GuestMemory::for_each_piece(GuestAddress addr, std::uint64_t len, Fn&& fn) const {
    std::uint64_t done = 0;
    while (done < len) {
        const Region* r = find(addr + done);
        std::uint64_t offset = addr.value + done - r->start.value;
        std::uint64_t piece = std::min(len - done, r->size() - offset);
        fn(r->mapping.data() + offset, static_cast<std::size_t>(done), static_cast<std::size_t>(piece));
        done += piece;
    }
}

Result<void> GuestMemory::read(GuestAddress addr, std::span<std::uint8_t> out) const {
    if (!contains(addr, out.size())) {
        return make_error("guest read of {} bytes at {:#x} is out of bounds", out.size(), addr.value);
    }
    for_each_piece(addr, out.size(), [&](std::uint8_t* host, std::size_t at, std::size_t n) {
        std::memcpy(out.data() + at, host, n);
    });
    return ok();
}

Result<void> GuestMemory::write(GuestAddress addr, std::span<const std::uint8_t> in) const {
    if (!contains(addr, in.size())) {
        return make_error("guest write of {} bytes at {:#x} is out of bounds", in.size(), addr.value);
    }
    for_each_piece(addr, in.size(), [&](std::uint8_t* host, std::size_t at, std::size_t n) {
        std::memcpy(host, in.data() + at, n);
    });
    return ok();
}

Result<void> GuestMemory::fill(GuestAddress addr, std::uint64_t len, std::uint8_t byte) const {
    if (!contains(addr, len)) {
        return make_error("guest fill of {} bytes at {:#x} is out of bounds", len, addr.value);
    }
    for_each_piece(addr, len, [&](std::uint8_t* host, std::size_t, std::size_t n) { std::memset(host, byte, n); });
    return ok();
}

}  // namespace sbx
