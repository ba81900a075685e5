// Guest physical memory: a set of non-overlapping regions backed by host
// mappings, with every access checked against the regions' bounds.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <type_traits>
#include <vector>

#include "base/mmap_region.hpp"
#include "base/result.hpp"
#include "base/unique_fd.hpp"

namespace sbx {

// A guest physical address. A distinct type so it cannot be mixed up with a
// host pointer or a length.
struct GuestAddress {
    std::uint64_t value = 0;

    constexpr GuestAddress() = default;
    constexpr explicit GuestAddress(std::uint64_t v) : value(v) {}
    constexpr auto operator<=>(const GuestAddress&) const = default;
    // Returns false when the sum would wrap past 2^64.
    [[nodiscard]] constexpr bool checked_add(std::uint64_t offset, GuestAddress& out) const {
        if (value > UINT64_MAX - offset) {
            return false;
        }
        out = GuestAddress(value + offset);
        return true;
    }
    [[nodiscard]] constexpr GuestAddress operator+(std::uint64_t offset) const {
        return GuestAddress(value + offset);
    }
};

struct MemoryRegionSpec {
    GuestAddress start;
    std::uint64_t size = 0;
};

class GuestMemory {
public:
    // The file a region maps MAP_PRIVATE (a raw snapshot, in a restore that
    // shares it copy-on-write): the pages the VMM has not written still
    // read its bytes from `offset` on, so a snapshot of this memory can take
    // them from the file instead of faulting them in (snapshot/format/writer.hpp).
    // Anonymous memory has none: `fd` is not valid.
    struct MappedFile {
        UniqueFd fd;  // a duplicate of the descriptor that was mapped
        std::uint64_t offset = 0;
    };

    // What MapRegion makes for a region: its mapping and, if it is a
    // private mapping of a file, that file.
    struct MappedRegion {
        MmapRegion mapping;
        MappedFile file{};
    };

    struct Region {
        GuestAddress start;
        MmapRegion mapping;
        MappedFile file{};

        [[nodiscard]] std::uint64_t size() const { return mapping.size(); }
        [[nodiscard]] std::uint64_t end() const { return start.value + mapping.size(); }
    };

    // Maps anonymous memory for each region. Regions must be non-empty,
    // page-aligned and must not overlap.
    static Result<GuestMemory> create(std::span<const MemoryRegionSpec> specs);
    // The same checks, with each region's mapping made by `map_region`
    // (called in address order with the region's index): a restore maps a
    // snapshot file copy-on-write instead of anonymous memory.
    using MapRegion = std::function<Result<MappedRegion>(const MemoryRegionSpec& spec, std::size_t index)>;
    // A MapRegion result for memory with no file behind it (anonymous).
    static Result<MappedRegion> unbacked(Result<MmapRegion> mapping);
    // One for a MAP_PRIVATE mapping of `fd` at `offset`: keeps a duplicate of fd.
    static Result<MappedRegion> private_file(Result<MmapRegion> mapping, int fd, std::uint64_t offset);
    static Result<GuestMemory> create(std::span<const MemoryRegionSpec> specs, const MapRegion& map_region);

    [[nodiscard]] const std::vector<Region>& regions() const { return regions_; }
    [[nodiscard]] std::uint64_t total_size() const;
    // The highest guest address that is backed plus one.
    [[nodiscard]] std::uint64_t end() const;

    // A host view of [addr, addr+len) when it lies entirely inside one region.
    [[nodiscard]] Result<std::span<std::uint8_t>> slice(GuestAddress addr, std::uint64_t len) const;
    [[nodiscard]] bool contains(GuestAddress addr, std::uint64_t len) const;

    // Copies that may span several adjacent regions.
    [[nodiscard]] Result<void> read(GuestAddress addr, std::span<std::uint8_t> out) const;
    [[nodiscard]] Result<void> write(GuestAddress addr, std::span<const std::uint8_t> in) const;
    [[nodiscard]] Result<void> fill(GuestAddress addr, std::uint64_t len, std::uint8_t byte) const;

    template <typename T>
    [[nodiscard]] Result<T> read_obj(GuestAddress addr) const {
        static_assert(std::is_trivially_copyable_v<T>);
        T value{};
        auto r = read(addr, std::span(reinterpret_cast<std::uint8_t*>(&value), sizeof(T)));
        if (!r) {
            return r.error();
        }
        return value;
    }

    template <typename T>
    [[nodiscard]] Result<void> write_obj(GuestAddress addr, const T& value) const {
        static_assert(std::is_trivially_copyable_v<T>);
        return write(addr, std::span(reinterpret_cast<const std::uint8_t*>(&value), sizeof(T)));
    }

private:
    explicit GuestMemory(std::vector<Region> regions) : regions_(std::move(regions)) {}
    [[nodiscard]] const Region* find(GuestAddress addr) const;
    template <typename Fn>
    void for_each_piece(GuestAddress addr, std::uint64_t len, Fn&& fn) const;

    std::vector<Region> regions_;  // sorted by start
};

}  // namespace sbx
