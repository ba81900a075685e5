// libFuzzer target: arbitrary bytes as a snapshot file (in a memfd), with
// the header and trailer checksums recomputed for even-sized inputs, through
// SnapshotReader::open_fd, section reads, read_chunk and, for small
// layouts, load_memory and verify_raw_memory. Nothing may crash, allocate
// from a hostile count or write outside the buffers given; every failure
// must carry one of the format's error codes.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

#include "base/unique_fd.hpp"
#include "snapshot/format/reader.hpp"

namespace {

using namespace sbx::snapshot;

constexpr std::uint64_t kMaxLoadBytes = 16ULL << 20;

std::uint64_t get_u64(const std::vector<std::uint8_t>& b, std::size_t at) {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < 8; ++i) {
        v |= static_cast<std::uint64_t>(b[at + i]) << (8 * i);
    }
    return v;
}

void put_u64(std::vector<std::uint8_t>& b, std::size_t at, std::uint64_t v) {
    for (std::size_t i = 0; i < 8; ++i) {
        b[at + i] = static_cast<std::uint8_t>(v >> (8 * i));
    }
}

// Recomputes the trailer and header checksums (docs/snapshot-format.md), so
// mutations get past them into the structural checks.
void fix_checksums(std::vector<std::uint8_t>& b) {
    if (b.size() < layout::kHeaderBytes) {
        return;
    }
    const std::uint64_t offset = get_u64(b, 88);
    const std::uint64_t bytes = get_u64(b, 96);
    if (offset <= b.size() && bytes <= b.size() - offset) {
        put_u64(b, 104, layout::checksum(std::span(b).subspan(offset, bytes)));
    }
    put_u64(b, 120, layout::checksum(std::span(b).first(120)));
}

void check_code(const sbx::Error& e) {
    if (error_code(e).empty()) {
        __builtin_trap();
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::vector<std::uint8_t> file(data, data + size);
    if (size % 2 == 0) {  // odd sizes keep their checksums, to reach the mismatch paths
        fix_checksums(file);
    }
    sbx::UniqueFd fd(::memfd_create("snapshot-fuzz", MFD_CLOEXEC));
    if (!fd || !sbx::write_all(fd.get(), file.data(), file.size())) {
        return 0;
    }
    auto reader = SnapshotReader::open_fd(std::move(fd));
    if (!reader) {
        check_code(reader.error());
        return 0;
    }
    for (const auto& name : reader->section_names()) {
        if (!reader->section(name)) {
            __builtin_trap();
        }
    }
    std::vector<std::uint8_t> buf;
    for (std::size_t i = 0; i < reader->chunk_count() && i < 64; ++i) {
        auto ref = reader->chunk(i);
        if (ref.length > reader->info().chunk_size) {
            continue;  // a zero range: up to 1 GiB
        }
        buf.assign(ref.length, 0);
        if (auto r = reader->read_chunk(i, buf); !r) {
            check_code(r.error());
        }
        auto at = reader->chunk_at(ref.guest_start);
        if (!at || *at != i) {
            __builtin_trap();
        }
    }
    std::uint64_t total = 0;
    auto regions = reader->memory_regions();
    for (const auto& r : regions) {
        total += r.length;
        if (total > kMaxLoadBytes) {
            return 0;
        }
    }
    std::vector<std::vector<std::uint8_t>> memory;
    std::vector<MemoryRegionView> views;
    for (const auto& r : regions) {
        memory.emplace_back(r.length);
        views.push_back({r.start, memory.back()});
    }
    if (auto loaded = reader->load_memory(views, 2, false); !loaded) {
        check_code(loaded.error());
    }
    if (reader->info().mode == MemoryMode::Raw) {
        if (auto verified = reader->verify_raw_memory(); !verified) {
            check_code(verified.error());
        }
    }
    return 0;
}
