// A libext2fs io_manager (ext2_io.h, struct struct_io_manager) whose
// reads go to a qcow2 chain or raw disk (qcow2::DiskReader), read-only.
//
// libext2fs opens a channel by name only (io_manager::open(name, flags,
// channel)), so the name carries the address of the DiskChannel that owns
// the manager table and the disk: no global state. The DiskChannel must
// outlive the ext2_filsys opened on it.
#pragma once

#include <ext2fs/ext2fs.h>

#include <memory>
#include <optional>
#include <string>

#include "base/result.hpp"
#include "devices/virtio/blk/qcow2/qcow2_image.hpp"

namespace sbx::diskfs {

class DiskChannel {
public:
    explicit DiskChannel(std::unique_ptr<qcow2::DiskReader> disk);
    DiskChannel(const DiskChannel&) = delete;
    DiskChannel& operator=(const DiskChannel&) = delete;
    DiskChannel(DiskChannel&&) = delete;
    DiskChannel& operator=(DiskChannel&&) = delete;
    ~DiskChannel() = default;

    // For ext2fs_open2(name(), ..., manager(), ...).
    [[nodiscard]] io_manager manager() { return &manager_; }
    [[nodiscard]] const std::string& name() const { return name_; }

    [[nodiscard]] qcow2::DiskReader& disk() { return *disk_; }
    // The disk's own error behind the last failed read (EXT2_ET_SHORT_READ
    // or EIO to libext2fs), cleared by take.
    [[nodiscard]] std::optional<Error> take_error() { return std::exchange(last_error_, std::nullopt); }

    // The io_manager's read: bytes at `offset`, inside the disk.
    errcode_t read(unsigned long long offset, std::size_t length, void* data);

private:
    std::unique_ptr<qcow2::DiskReader> disk_;
    struct_io_manager manager_{};
    std::string name_;
    std::optional<Error> last_error_;
};

}  // namespace sbx::diskfs
