#include "host-tools/sbxd/diskfs/disk_io.hpp"

#include <cerrno>
#include <charconv>
#include <cstring>
#include <new>
#include <span>

namespace sbx::diskfs {

namespace {

constexpr std::string_view kNamePrefix = "sbxdisk:";

DiskChannel* channel_of(io_channel channel) { return static_cast<DiskChannel*>(channel->private_data); }

// The channel's `block_size` blocks from `block`, or -count bytes when
// count is negative (ext2_io.h, read_blk).
errcode_t read_blocks(io_channel channel, unsigned long long block, int count, void* data) {
    const unsigned long long size = count < 0 ? static_cast<unsigned long long>(-static_cast<long long>(count))
                                              : static_cast<unsigned long long>(count) *
                                                    static_cast<unsigned long long>(channel->block_size);
    const unsigned long long bs = static_cast<unsigned long long>(channel->block_size);
    if (block > ~0ULL / bs) {
        return EXT2_ET_LLSEEK_FAILED;
    }
    return channel_of(channel)->read(block * bs, size, data);
}

errcode_t open_channel(const char* name, int flags, io_channel* out) {
    std::string_view text(name == nullptr ? "" : name);
    if ((flags & IO_FLAG_RW) != 0) {
        return EXT2_ET_RO_UNSUPP_FEATURE;
    }
    if (!text.starts_with(kNamePrefix)) {
        return EXT2_ET_BAD_DEVICE_NAME;
    }
    text.remove_prefix(kNamePrefix.size());
    std::uintptr_t address = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), address, 16);
    if (ec != std::errc() || end != text.data() + text.size() || address == 0) {
        return EXT2_ET_BAD_DEVICE_NAME;
    }
    auto* channel = new (std::nothrow) struct_io_channel{};
    char* copy = new (std::nothrow) char[std::strlen(name) + 1];
    if (channel == nullptr || copy == nullptr) {
        delete channel;
        delete[] copy;
        return EXT2_ET_NO_MEMORY;
    }
    std::strcpy(copy, name);
    auto* owner = reinterpret_cast<DiskChannel*>(address);
    channel->magic = EXT2_ET_MAGIC_IO_CHANNEL;
    channel->manager = owner->manager();
    channel->name = copy;
    channel->block_size = 1024;
    channel->refcount = 1;
    channel->private_data = owner;
    *out = channel;
    return 0;
}

errcode_t close_channel(io_channel channel) {
    delete[] channel->name;
    delete channel;
    return 0;
}

errcode_t set_blksize(io_channel channel, int blksize) {
    if (blksize <= 0) {
        return EXT2_ET_INVALID_ARGUMENT;
    }
    channel->block_size = blksize;
    return 0;
}

errcode_t read_blk(io_channel channel, unsigned long block, int count, void* data) {
    return read_blocks(channel, block, count, data);
}

errcode_t read_blk64(io_channel channel, unsigned long long block, int count, void* data) {
    return read_blocks(channel, block, count, data);
}

errcode_t write_blk(io_channel, unsigned long, int, const void*) { return EXT2_ET_RO_FILSYS; }
errcode_t write_blk64(io_channel, unsigned long long, int, const void*) { return EXT2_ET_RO_FILSYS; }
errcode_t write_byte(io_channel, unsigned long, int, const void*) { return EXT2_ET_RO_FILSYS; }
errcode_t flush(io_channel) { return 0; }
errcode_t set_option(io_channel, const char*, const char*) { return EXT2_ET_INVALID_ARGUMENT; }

}  // namespace

DiskChannel::DiskChannel(std::unique_ptr<qcow2::DiskReader> disk) : disk_(std::move(disk)) {
    manager_.magic = EXT2_ET_MAGIC_IO_MANAGER;
    manager_.name = "sbx qcow2 (read-only)";
    manager_.open = open_channel;
    manager_.close = close_channel;
    manager_.set_blksize = set_blksize;
    manager_.read_blk = read_blk;
    manager_.write_blk = write_blk;
    manager_.flush = flush;
    manager_.write_byte = write_byte;
    manager_.set_option = set_option;
    manager_.read_blk64 = read_blk64;
    manager_.write_blk64 = write_blk64;
    name_ = fmt::format("{}{:x}", kNamePrefix, reinterpret_cast<std::uintptr_t>(this));
}

errcode_t DiskChannel::read(unsigned long long offset, std::size_t length, void* data) {
    const std::uint64_t size = disk_->size();
    if (offset > size || length > size - offset) {
        last_error_ = make_coded_error("corrupt_disk", "a read of {} bytes at {} is past the disk's end ({} bytes)",
                                       length, offset, size);
        return EXT2_ET_SHORT_READ;
    }
    auto r = disk_->read(offset, std::span(static_cast<std::uint8_t*>(data), length));
    if (!r) {
        last_error_ = r.error();
        return EIO;
    }
    return 0;
}

}  // namespace sbx::diskfs
