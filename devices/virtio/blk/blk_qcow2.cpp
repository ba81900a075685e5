// virtio-blk requests on a qcow2 image. A read or write whose range is one
// contiguous range of one file (clusters allocated back to back, or, for a
// read, the backing file's bytes) goes to io_uring like a raw request; the
// rest (copy-on-write, allocation, zero clusters, ranges across clusters
// apart) is served synchronously on the device thread through qcow2::Image,
// with pread/pwrite on the page cache. Metadata is always synchronous, and
// a flush is a synchronous fdatasync (then the deferred refcount releases);
// moving those onto the ring is the next step.
#include <fcntl.h>
#include <sys/uio.h>

#include "base/log.hpp"
#include "devices/virtio/blk/blk.hpp"
#include "devices/virtio/queue/chain_io.hpp"

namespace sbx::virtio {

// Opens the image as qcow2 when it starts with the magic; the disk is then
// its virtual size, and discard and write-zeroes edit its metadata.
Result<void> Block::open_qcow2(bool allow_backing) {
    auto magic = qcow2::has_qcow2_magic(file_.get());
    if (!magic) {
        return magic.error().context(path_);
    }
    if (!*magic) {
        return ok();
    }
    UniqueFd own(::fcntl(file_.get(), F_DUPFD_CLOEXEC, 0));
    if (!own) {
        return sys_error("cannot duplicate the descriptor of {}", path_);
    }
    auto image = qcow2::Image::open(std::move(own), path_, !read_only_,
                                    allow_backing ? qcow2::BackingFiles::Follow : qcow2::BackingFiles::Refuse);
    if (!image) {
        return image.error();
    }
    qcow2_ = std::move(*image);
    capacity_ = qcow2_->size() / blk::kSectorSize;
    can_punch_hole_ = !read_only_;
    can_zero_range_ = !read_only_;
    discard_alignment_ = static_cast<std::uint32_t>(qcow2_->cluster_size() / blk::kSectorSize);
    return ok();
}

std::optional<qcow2::Extent> Block::qcow2_extent(bool is_read, std::uint64_t offset, std::uint64_t len) {
    auto extent = is_read ? qcow2_->read_extent(offset, len) : qcow2_->write_extent(offset, len);
    if (!extent) {
        return std::nullopt;  // the synchronous path reports the error
    }
    return *extent;
}

// A failure answers VIRTIO_BLK_S_IOERR for this request only; the message
// names the disk and the offset.
std::uint8_t Block::qcow2_transfer(bool is_read, std::uint64_t offset, std::uint64_t len, ChainReader& reader,
                                   ChainWriter& writer) {
    // Through a bounce buffer of up to 1 MiB: the guest's buffers are often
    // 4 KiB pages, and the library works best on whole clusters (one
    // allocation run, not a copy-on-write per page).
    constexpr std::uint64_t kBounceBytes = 1 << 20;
    for (std::uint64_t done = 0; done < len;) {
        const std::uint64_t n = std::min(len - done, kBounceBytes);
        qcow2_bounce_.resize(std::max<std::size_t>(qcow2_bounce_.size(), n));
        const std::span chunk(qcow2_bounce_.data(), n);
        Result<void> r;
        if (is_read) {
            r = qcow2_->read(offset + done, chunk);
            if (r) {
                writer.write(chunk);
            }
        } else {
            reader.read(chunk);
            r = qcow2_->write(offset + done, chunk);
        }
        if (!r) {
            log::warn("{}: {} at {}: {}", name(), is_read ? "read" : "write", offset + done,
                      r.error().to_string());
            return blk::kStatusIoErr;
        }
        done += n;
    }
    return blk::kStatusOk;
}

std::uint8_t Block::qcow2_flush() {
    if (auto r = qcow2_->flush(); !r) {
        log::warn("{}: flush: {}", name(), r.error().to_string());
        return blk::kStatusIoErr;
    }
    return blk::kStatusOk;
}

// Both leave whole clusters reading as zeroes; write-zeroes also zeroes
// the partial clusters at the ends, a discard leaves them.
std::uint8_t Block::qcow2_zero(bool discard, bool unmap, std::uint64_t offset, std::uint64_t len) {
    auto r = discard ? qcow2_->discard(offset, len) : qcow2_->write_zeroes(offset, len, unmap);
    if (!r) {
        log::warn("{}: {} at {}: {}", name(), discard ? "discard" : "write-zeroes", offset,
                  r.error().to_string());
        return blk::kStatusIoErr;
    }
    return blk::kStatusOk;
}

}  // namespace sbx::virtio
