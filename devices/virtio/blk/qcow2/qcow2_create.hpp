// Creating qcow2 v3 images in O(1): a header cluster, one refcount table
// cluster, one refcount block and an all-zero L1 table, whatever the disk
// size. sbxd makes a sandbox's disk this way, an overlay on a shared base.
#pragma once

#include <cstdint>
#include <string>

#include "base/result.hpp"
#include "devices/virtio/blk/qcow2/qcow2_format.hpp"

namespace sbx::qcow2 {

struct OverlayOptions {
    std::uint32_t cluster_bits = kDefaultClusterBits;
};

// Creates `path` (which must not exist) as an empty qcow2 image whose
// unwritten clusters read from `backing_path` (stored as given; a relative
// name is relative to the overlay's directory, as QEMU reads it), of
// `backing_format` Raw or Qcow2. `size` 0 takes the backing disk's size.
// An empty `backing_path` makes a plain image of `size` bytes. The backing
// file is opened to check it, never read further or written. The new file
// is fdatasync'ed; on failure nothing is left behind.
[[nodiscard]] Result<void> create_overlay(const std::string& path, const std::string& backing_path,
                                          BackingFormat backing_format, std::uint64_t size,
                                          const OverlayOptions& options = {});

}  // namespace sbx::qcow2
