#include "devices/virtio/blk/qcow2/qcow2_create.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <vector>

#include "base/unique_fd.hpp"
#include "devices/virtio/blk/qcow2/qcow2_image.hpp"

namespace sbx::qcow2 {

Result<void> create_overlay(const std::string& path, const std::string& backing_path,
                            BackingFormat backing_format, std::uint64_t size, const OverlayOptions& options) {
    auto fail = [&](const Error& e) { return e.context(fmt::format("creating qcow2 image {}", path)); };
    if (options.cluster_bits < kMinClusterBits || options.cluster_bits > kMaxClusterBits) {
        return fail(make_coded_error(kCodeUnsupported, "cluster_bits {}", options.cluster_bits));
    }
    Header h;
    h.cluster_bits = options.cluster_bits;
    if (!backing_path.empty()) {
        if (backing_format != BackingFormat::Raw && backing_format != BackingFormat::Qcow2) {
            return fail(make_coded_error(kCodeBacking, "the backing format must be raw or qcow2"));
        }
        if (backing_path.size() > kMaxBackingNameBytes) {
            return fail(make_coded_error(kCodeBacking, "the backing file name is longer than {} bytes",
                                         kMaxBackingNameBytes));
        }
        auto backing = open_backing(resolve_backing(path, backing_path), backing_format, 1);
        if (!backing) {
            return fail(backing.error());
        }
        if (size == 0) {
            size = (*backing)->size() & ~std::uint64_t{511};
        }
        h.backing_name = backing_path;
        h.backing_format = backing_format;
    }
    if (size == 0 || size % 512 != 0 || size > kMaxDiskBytes) {
        return fail(make_coded_error(
            kCodeUnsupported, "disk size {} is not a whole number of sectors in 1..{}", size, kMaxDiskBytes));
    }
    // Cluster 0 the header, 1 the refcount table, 2 its first refcount
    // block, then the L1 table; the block counts all of them once.
    const std::uint64_t cluster = h.cluster_size();
    h.size = size;
    h.l1_size = static_cast<std::uint32_t>(l1_entries_for(size, h.cluster_bits));
    const std::uint64_t l1_clusters =
        std::max<std::uint64_t>(1, (std::uint64_t{h.l1_size} * 8 + cluster - 1) / cluster);
    if (std::uint64_t{h.l1_size} * 8 > kMaxL1Bytes || 3 + l1_clusters > h.refblock_entries()) {
        return fail(make_coded_error(kCodeUnsupported,
                                     "a {}-byte disk needs too large an L1 table for {}-byte clusters", size,
                                     cluster));
    }
    h.refcount_table_offset = cluster;
    h.refcount_table_clusters = 1;
    h.l1_table_offset = 3 * cluster;
    const std::string header = encode_header(h);

    std::vector<std::uint8_t> start(3 * cluster, 0);
    std::copy(header.begin(), header.end(), start.begin());
    store_be64(&start[cluster], 2 * cluster);
    for (std::uint64_t i = 0; i < 3 + l1_clusters; ++i) {
        store_be16(&start[2 * cluster + i * 2], 1);
    }
    auto file = UniqueFd::open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (!file) {
        return fail(file.error());
    }
    auto result = [&]() -> Result<void> {
        if (auto r = write_all(file->get(), start.data(), start.size()); !r) {
            return r;
        }
        // The L1 table is all zeroes: a hole.
        if (::ftruncate(file->get(), static_cast<off_t>((3 + l1_clusters) * cluster)) != 0) {
            return sys_error("ftruncate");
        }
        if (::fdatasync(file->get()) != 0) {
            return sys_error("fdatasync");
        }
        return ok();
    }();
    if (!result) {
        ::unlink(path.c_str());
        return fail(result.error());
    }
    return ok();
}

}  // namespace sbx::qcow2
