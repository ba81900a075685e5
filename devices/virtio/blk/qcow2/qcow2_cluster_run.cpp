// Writes of whole clusters in runs: a guest's 1 MiB write to a fresh
// overlay becomes one data pwrite, one refcount pwrite and one L2 pwrite
// rather than three per cluster. The order stays data, refcount, L2, L1
// (allocate_run counts the clusters before the data lands, which at worst
// leaks them).
#include <unistd.h>

#include "devices/virtio/blk/qcow2/qcow2_image.hpp"

namespace sbx::qcow2 {

Result<std::pair<std::uint64_t, std::uint64_t>> Image::allocate_run(std::uint64_t count) {
    auto first = allocate_cluster();  // makes the refcount block when missing
    if (!first) {
        return first.error();
    }
    const std::uint64_t entries = header_.refblock_entries();
    const std::uint64_t first_cluster = *first >> header_.cluster_bits;
    const std::uint64_t block = refcount_table_[first_cluster / entries];
    std::uint64_t got = 1;
    while (got < count && next_free_ == *first + got * cluster_size()) {
        const std::uint64_t cluster = first_cluster + got;
        if (cluster / entries != first_cluster / entries) {
            break;  // the next refcount block: left to the next run
        }
        auto t = table(refblock_cache_, block);
        if (!t) {
            return t.error();
        }
        std::uint8_t* at = &(*t)->bytes[(cluster % entries) * 2];
        if (load_be16(at) != 0) {
            break;
        }
        store_be16(at, 1);
        next_free_ += cluster_size();
        ++got;
    }
    if (got > 1) {
        auto t = table(refblock_cache_, block);
        if (!t) {
            return t.error();
        }
        const std::uint64_t from = ((first_cluster + 1) % entries) * 2;
        if (auto r = pwrite_all(block + from, std::span(&(*t)->bytes[from], (got - 1) * 2)); !r) {
            return r.error();
        }
    }
    return std::pair{*first, got};
}

Result<std::uint64_t> Image::write_cluster_run(std::uint64_t offset, std::span<const std::uint8_t> data) {
    const std::uint64_t cluster = cluster_size();
    const std::uint64_t l2_index = (offset >> header_.cluster_bits) & (header_.l2_entries() - 1);
    // Within one L2 table, so the entries are one contiguous pwrite.
    const std::uint64_t limit = std::min(data.size() / cluster, header_.l2_entries() - l2_index);
    auto first = l2_entry(offset);
    if (!first) {
        return first.error();
    }
    const auto in_place = [](std::uint64_t entry) {
        return (entry & kOffsetMask) != 0 && (entry & kFlagCopied) != 0 && (entry & kFlagZero) == 0;
    };
    std::uint64_t n = 1;
    std::vector<std::uint64_t> old{*first & kOffsetMask};
    for (; n < limit; ++n) {
        auto entry = l2_entry(offset + n * cluster);
        if (!entry) {
            return entry.error();
        }
        if (in_place(*first)) {
            if (!in_place(*entry) || (*entry & kOffsetMask) != (*first & kOffsetMask) + n * cluster) {
                break;
            }
        } else {
            if (in_place(*entry)) {
                break;
            }
            old.push_back(*entry & kOffsetMask);
        }
    }
    if (in_place(*first)) {
        if (auto r = pwrite_all(*first & kOffsetMask, data.first(n * cluster)); !r) {
            return r.error();
        }
        return n * cluster;
    }
    auto run = allocate_run(n);
    if (!run) {
        return run.error();
    }
    const auto [host, got] = *run;
    if (auto r = pwrite_all(host, data.first(got * cluster)); !r) {
        return r.error();
    }
    // The first entry may allocate the L2 table and write the L1 entry.
    if (auto r = set_l2_entry(offset, host | kFlagCopied); !r) {
        return r.error();
    }
    if (got > 1) {
        auto t = table(l2_cache_, l1_[offset >> (header_.cluster_bits * 2 - 3)] & kOffsetMask);
        if (!t) {
            return t.error();
        }
        std::uint8_t* entries = &(*t)->bytes[(l2_index + 1) * 8];
        for (std::uint64_t i = 1; i < got; ++i) {
            store_be64(entries + (i - 1) * 8, (host + i * cluster) | kFlagCopied);
        }
        if (auto r = pwrite_all((*t)->offset + (l2_index + 1) * 8, std::span(entries, (got - 1) * 8)); !r) {
            return r.error();
        }
    }
    for (std::uint64_t i = 0; i < got; ++i) {
        if (old[i] != 0) {
            release_later(old[i]);
        }
    }
    return got * cluster;
}

}  // namespace sbx::qcow2
