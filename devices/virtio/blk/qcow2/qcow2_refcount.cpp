// Refcounts (qcow2.txt "Host cluster management"): the refcount table
// names refcount blocks, each a cluster of 16-bit big-endian counts, one
// per host cluster. Allocation appends; a release is deferred to flush().
#include <fcntl.h>
#include <linux/falloc.h>

#include "devices/virtio/blk/qcow2/qcow2_image.hpp"

namespace sbx::qcow2 {

Result<std::uint16_t> Image::refcount(std::uint64_t host_offset) {
    const std::uint64_t cluster = host_offset >> header_.cluster_bits;
    const std::uint64_t index = cluster / header_.refblock_entries();
    if (index >= refcount_table_.size() || refcount_table_[index] == 0) {
        return std::uint16_t{0};
    }
    auto t = table(refblock_cache_, refcount_table_[index]);
    if (!t) {
        return t.error();
    }
    return load_be16(&(*t)->bytes[(cluster % header_.refblock_entries()) * 2]);
}

Result<void> Image::set_refcount(std::uint64_t host_offset, std::uint16_t value) {
    const std::uint64_t cluster = host_offset >> header_.cluster_bits;
    const std::uint64_t index = cluster / header_.refblock_entries();
    if (index >= refcount_table_.size() || refcount_table_[index] == 0) {
        return make_coded_error(kCodeCorrupt, "no refcount block covers cluster {:#x}", host_offset);
    }
    const std::uint64_t block = refcount_table_[index];
    auto t = table(refblock_cache_, block);
    if (!t) {
        return t.error();
    }
    const std::uint64_t at = (cluster % header_.refblock_entries()) * 2;
    store_be16(&(*t)->bytes[at], value);
    return pwrite_all(block + at, std::span(&(*t)->bytes[at], 2));
}

Result<std::uint64_t> Image::allocate_cluster() {
    const std::uint64_t cluster = cluster_size();
    while (true) {
        const std::uint64_t host = next_free_;
        const std::uint64_t index = (host >> header_.cluster_bits) / header_.refblock_entries();
        if (index >= refcount_table_.size()) {
            // Growing the refcount table is not implemented: one table
            // cluster of 64 KiB clusters covers 16 TiB of image.
            return make_coded_error(kCodeFull, "qcow2 image {}: the refcount table covers no more clusters",
                                    path_);
        }
        if (refcount_table_[index] == 0) {
            // A new refcount block in the first cluster it covers, counting
            // itself; written before the refcount table names it.
            std::vector<std::uint8_t> block(cluster, 0);
            store_be16(&block[((host >> header_.cluster_bits) % header_.refblock_entries()) * 2], 1);
            if (auto r = pwrite_all(host, block); !r) {
                return r.error();
            }
            std::uint8_t entry[8];
            store_be64(entry, host);
            if (auto r = pwrite_all(header_.refcount_table_offset + index * 8, entry); !r) {
                return r.error();
            }
            refcount_table_[index] = host;
            next_free_ += cluster;
            continue;
        }
        auto count = refcount(host);
        if (!count) {
            return count.error();
        }
        next_free_ += cluster;
        if (*count != 0) {
            continue;  // counted though past the end of the file: leave it be
        }
        if (auto r = set_refcount(host, 1); !r) {
            return r.error();
        }
        return host;
    }
}

void Image::release_later(std::uint64_t host_offset) {
    pending_releases_.push_back(host_offset);
}

// Runs after an fdatasync: the L2 entries that dropped these clusters are
// durable, so a count reaching 0 can never describe a cluster in use.
Result<void> Image::release_pending() {
    std::vector<std::uint64_t> releases = std::move(pending_releases_);
    pending_releases_.clear();
    for (std::size_t i = 0; i < releases.size(); ++i) {
        auto count = refcount(releases[i]);
        if (!count) {
            pending_releases_.assign(releases.begin() + static_cast<std::ptrdiff_t>(i), releases.end());
            return count.error();
        }
        if (*count == 0) {
            continue;
        }
        if (auto r = set_refcount(releases[i], static_cast<std::uint16_t>(*count - 1)); !r) {
            pending_releases_.assign(releases.begin() + static_cast<std::ptrdiff_t>(i), releases.end());
            return r;
        }
        if (*count == 1) {
            // Give the space back; the cluster stays in the file's size.
            (void)::fallocate(file_.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                              static_cast<off_t>(releases[i]), static_cast<off_t>(cluster_size()));
        }
    }
    return ok();
}

}  // namespace sbx::qcow2
