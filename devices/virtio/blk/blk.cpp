#include "devices/virtio/blk/blk.hpp"

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "base/log.hpp"
#include "devices/virtio/queue/chain_io.hpp"

namespace sbx::virtio {
namespace {

static_assert(offsetof(blk::ConfigSpace, seg_max) == 12);
static_assert(offsetof(blk::ConfigSpace, blk_size) == 20);
static_assert(offsetof(blk::ConfigSpace, max_discard_sectors) == 36);
static_assert(offsetof(blk::ConfigSpace, max_write_zeroes_sectors) == 48);
static_assert(offsetof(blk::ConfigSpace, write_zeroes_may_unmap) == 56);
static_assert(sizeof(blk::ConfigSpace) >= blk::kConfigSpaceBytes);

// Waits for the backend are taken in slices, so a stop is seen soon.
constexpr std::chrono::milliseconds kWaitSlice{50};
// A device torn down with requests still running leaves them to the kernel
// after this long.
constexpr std::chrono::milliseconds kTeardownWait{2000};

// The image's size in bytes: st_size for a file, the device size for a
// block device.
Result<std::uint64_t> image_bytes(int fd, const struct stat& st) {
    if (S_ISREG(st.st_mode)) {
        return static_cast<std::uint64_t>(st.st_size);
    }
    off_t end = ::lseek(fd, 0, SEEK_END);
    if (end < 0) {
        return sys_error("cannot find its size");
    }
    return static_cast<std::uint64_t>(end);
}

}  // namespace

// Buffered I/O, not O_DIRECT (Firecracker's default too). Sandboxes boot by
// the dozen from the same base image, and the host page cache serves them
// all after the first; O_DIRECT would also refuse tmpfs images and guest
// buffers or offsets not aligned to the host file system's logical block
// (the guest sees 512-byte sectors, hosts often use 4 KiB). Durability is
// the guest's to ask for: VIRTIO_BLK_F_FLUSH is offered and a flush is an
// fdatasync of the image, so a guest that flushes loses nothing it flushed.
Result<std::unique_ptr<Block>> Block::open(const BlockConfig& config, std::string name) {
    const std::string prefix = fmt::format("virtio-blk {}", name);
    std::string serial = config.serial.empty() ? name : config.serial;
    if (serial.size() > blk::kIdBytes) {
        return make_error("{}: serial \"{}\" for {} is longer than {} bytes", prefix, serial, config.path,
                          blk::kIdBytes);
    }
    auto file = UniqueFd::open(config.path, config.read_only ? O_RDONLY : O_RDWR);
    if (!file) {
        return file.error().context(prefix);
    }
    struct stat st {};
    if (::fstat(file->get(), &st) != 0) {
        return sys_error("{}: cannot stat {}", prefix, config.path);
    }
    if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
        return make_error("{}: {} is not a regular file or block device", prefix, config.path);
    }
    auto bytes = image_bytes(file->get(), st);
    if (!bytes) {
        return bytes.error().context(fmt::format("{}: {}", prefix, config.path));
    }
    auto ring = IoRing::create(kQueueSize, file->get());
    if (!ring) {
        return ring.error().context(fmt::format("{}: {}", prefix, config.path));
    }
    std::unique_ptr<Block> block(new Block(std::move(name), std::move(serial), config.path, std::move(*file),
                                           std::move(*ring), config.read_only));
    block->capacity_ = *bytes / blk::kSectorSize;
    block->discard_alignment_ = std::max<std::uint32_t>(1, static_cast<std::uint32_t>(st.st_blksize) / 512);
    if (auto r = block->open_qcow2(config.allow_backing); !r) {
        return r.error().context(prefix);
    }
    if (*bytes % blk::kSectorSize != 0 && !block->qcow2_) {
        log::warn("{}: {} is {} bytes, not a whole number of sectors; the last {} bytes are not visible",
                  prefix, config.path, *bytes, *bytes % blk::kSectorSize);
    }
    if (!config.read_only && S_ISREG(st.st_mode) && !block->qcow2_) {
        block->probe_fallocate(*bytes);
    }
    block->fill_config_space();
    return block;
}

Block::Block(std::string name, std::string serial, std::string path, UniqueFd file, IoRing ring,
             bool read_only)
    : name_(std::move(name)),
      serial_(std::move(serial)),
      path_(std::move(path)),
      file_(std::move(file)),
      ring_(std::move(ring)),
      read_only_(read_only) {}

// The VM is gone or going: what the kernel still runs after a short wait
// is left to the ring's teardown (closing it cancels the rest).
Block::~Block() {
    cancel_in_flight(kTeardownWait, /*stoppable=*/false);
}

// DISCARD and WRITE_ZEROES are offered only where the file system can
// deallocate (PUNCH_HOLE) or zero (ZERO_RANGE) in place. Probed just past
// the end with KEEP_SIZE, which leaves the image's bytes and size as they
// are (ZERO_RANGE may keep one preallocated block past the end).
void Block::probe_fallocate(std::uint64_t bytes) {
    const auto end = static_cast<off_t>(bytes);
    can_punch_hole_ = ::fallocate(file_.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, end, 4096) == 0;
    can_zero_range_ = ::fallocate(file_.get(), FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, end, 4096) == 0;
}

void Block::fill_config_space() {
    features_ = blk::kFeatureSegMax | blk::kFeatureBlkSize | blk::kFeatureFlush;
    blk::ConfigSpace& c = config_space_;
    c = {};
    c.capacity = capacity_;
    // Header and status take one descriptor each, as in Linux's and QEMU's
    // seg_max convention.
    c.seg_max = kQueueSize - 2;
    c.blk_size = blk::kSectorSize;
    if (read_only_) {
        features_ |= blk::kFeatureRo;
        return;
    }
    if (can_punch_hole_) {
        features_ |= blk::kFeatureDiscard;
        c.max_discard_sectors = blk::kMaxRangeSectors;
        c.max_discard_seg = 1;
        c.discard_sector_alignment = discard_alignment_;
    }
    if (can_zero_range_) {
        features_ |= blk::kFeatureWriteZeroes;
        c.max_write_zeroes_sectors = blk::kMaxRangeSectors;
        c.max_write_zeroes_seg = 1;
        c.write_zeroes_may_unmap = can_punch_hole_ ? 1 : 0;
    }
}

void Block::read_config(std::uint64_t offset, std::span<std::uint8_t> data) const {
    read_config_bytes(
        std::span(reinterpret_cast<const std::uint8_t*>(&config_space_), blk::kConfigSpaceBytes), offset,
        data);
}

Result<void> Block::activate(const ActiveContext& context) {
    context_ = context;
    queue_ = !context.queues.empty() && context.queues[0].active() ? &context.queues[0] : nullptr;
    free_slots_.clear();
    for (std::uint16_t i = kQueueSize; i > 0; --i) {
        free_slots_.push_back(static_cast<std::uint16_t>(i - 1));
    }
    ring_.clear_event();
    return context.events->add(ring_.event_fd(), EPOLLIN, [this](std::uint32_t) { return run_batch(false); });
}

Result<void> Block::process_queue(std::size_t /*index*/) {
    return run_batch(true);
}

// One pass of the device thread: pop what the driver made available (when
// notified, or when an earlier pass stalled), one io_uring_submit for all
// of it, answer every completion waiting, and interrupt the driver at most
// once (§2.7.7.2).
Result<void> Block::run_batch(bool pop_new) {
    if (queue_ == nullptr) {
        return ok();
    }
    ring_.clear_event();  // before reaping: a completion posted later re-arms it
    bool pop = pop_new || stalled_;
    Result<void> result;
    while (result) {
        if (pop) {
            stalled_ = false;
            result = drain_available();
        }
        if (ring_.unsubmitted() > 0) {
            ++counters_.submits;
            if (auto r = ring_.submit(); !r && result) {
                result = r.error();
            }
        }
        // Buffered I/O on cached pages often completes inside the submit.
        const unsigned before = in_flight_;
        const std::uint64_t shorts_before = counters_.short_transfers;
        if (auto r = reap_completions(); !r && result) {
            result = r.error();
        }
        // Short transfers went back into the ring: submit them (once per
        // reap, so a kernel that refuses for now is not spun on). Completions
        // freed slots: pop what stalled for the lack of them.
        const bool continued = counters_.short_transfers != shorts_before;
        const bool freed = stalled_ && in_flight_ != before;
        if (!continued && !freed) {
            break;
        }
        pop = freed;
    }
    if (signal_pending_ && queue_->needs_notification()) {
        context_.interrupt->signal_used();
    }
    signal_pending_ = false;
    return result;
}

// Pops every available chain with notifications suppressed, and checks
// again after enabling them (§2.7.10) so none is left behind.
Result<void> Block::drain_available() {
    while (true) {
        queue_->disable_notification();
        while (true) {
            if (free_slots_.empty()) {
                stalled_ = true;  // a driver reusing heads in flight; resumed on completion
                ++counters_.stalls;
                return ok();
            }
            auto popped = queue_->pop(chain_);
            if (!popped) {
                return popped.error();
            }
            if (!*popped) {
                break;
            }
            auto started = start_request();
            if (!started) {
                return started.error();
            }
            if (*started == Started::Stalled) {
                queue_->undo_pop();  // the submission ring is full: taken again later
                stalled_ = true;
                ++counters_.stalls;
                return ok();
            }
        }
        auto more = queue_->enable_notification();
        if (!more) {
            return more.error();
        }
        if (!*more) {
            return ok();
        }
    }
}

// Parses the request in chain_ (§5.2.6) and either answers it at once or
// hands it to io_uring. Requests the device refuses are answered with a
// status; only a chain that cannot carry an answer at all is an error.
Result<Block::Started> Block::start_request() {
    const std::uint16_t head = chain_.head();
    if (chain_.writable_bytes() == 0) {
        return make_error("request {} has no device-writable status byte", head);
    }
    // The parser keeps no empty segments, so this is the last writable byte.
    std::uint8_t* status = &chain_.writable().back().bytes.back();
    ChainReader reader(chain_);
    auto header = reader.read_obj<blk::RequestHeader>();
    if (!header) {
        return make_error("request {} has a {}-byte header, {} needed", head, chain_.readable_bytes(),
                          sizeof(blk::RequestHeader));
    }
    ChainWriter writer(chain_);
    const std::uint64_t in_bytes = chain_.writable_bytes() - 1;  // device-writable data before the status
    const std::uint64_t out_bytes = reader.remaining();          // device-readable data after the header
    auto answer = [&](std::uint8_t value, std::uint32_t written = 1) -> Result<Started> {
        if (auto r = complete_now(head, status, value, written); !r) {
            return r.error();
        }
        return Started::Done;
    };
    // Takes a free slot for an io_uring request prepared by prep(slot index,
    // slot); Stalled when the submission ring has no room.
    auto submit = [&](std::uint32_t expected, bool is_read, auto&& prep) -> Result<Started> {
        const std::uint16_t index = free_slots_.back();
        InFlight& slot = slots_[index];
        slot.head = head;
        slot.status = status;
        slot.expected = expected;
        slot.is_read = is_read;
        slot.done = 0;
        slot.iovecs.clear();
        if (prep(index, slot) == nullptr) {
            return Started::Stalled;
        }
        free_slots_.pop_back();
        ++in_flight_;
        return Started::Done;
    };

    blk::RequestShape shape{header->type, header->sector, in_bytes, out_bytes, std::nullopt};
    const bool zeroing = header->type == blk::kTypeDiscard || header->type == blk::kTypeWriteZeroes;
    if (zeroing && out_bytes == sizeof(blk::DiscardWriteZeroes)) {
        auto range = reader.read_obj<blk::DiscardWriteZeroes>();
        if (!range) {
            return range.error();
        }
        shape.range = *range;
    }
    const blk::Decision d = blk::decide(shape, {capacity_, read_only_, context_.features});
    switch (d.op) {
        case blk::Operation::Answer:
            return answer(d.status);
        case blk::Operation::Read:
        case blk::Operation::Write: {
            const bool is_read = d.op == blk::Operation::Read;
            std::uint64_t offset = d.offset;
            int fd = IoRing::kFixedFile;
            if (qcow2_) {
                // One contiguous range of one file goes to io_uring; the rest
                // is served by the library.
                const auto extent = qcow2_extent(is_read, offset, d.length);
                if (!extent) {
                    const std::uint8_t s = qcow2_transfer(is_read, offset, d.length, reader, writer);
                    return answer(s, s == blk::kStatusOk && is_read ? static_cast<std::uint32_t>(d.length) + 1 : 1);
                }
                offset = extent->offset;
                fd = extent->fd;
            }
            return submit(static_cast<std::uint32_t>(d.length), is_read, [&](std::uint16_t index, InFlight& slot) {
                slot.offset = offset;
                slot.fd = fd;
                if (is_read) {
                    writer.take_iovecs(d.length, slot.iovecs);
                    return ring_.readv(index, slot.iovecs.data(), static_cast<unsigned>(slot.iovecs.size()),
                                       offset, fd);
                }
                reader.take_iovecs(d.length, slot.iovecs);
                return ring_.writev(index, slot.iovecs.data(), static_cast<unsigned>(slot.iovecs.size()),
                                    offset, fd);
            });
        }
        case blk::Operation::Flush:
            if (qcow2_) {
                return answer(qcow2_flush());
            }
            // The driver flushes once the writes it covers have completed, so the
            // flush needs no ordering against requests still in flight.
            return submit(0, false, [&](std::uint16_t index, InFlight&) { return ring_.fdatasync(index); });
        case blk::Operation::GetId: {
            std::array<std::uint8_t, blk::kIdBytes> id{};  // NUL-padded when shorter (§5.2.6)
            std::memcpy(id.data(), serial_.data(), serial_.size());
            const std::size_t n = writer.write(std::span(id).first(d.length));
            return answer(blk::kStatusOk, static_cast<std::uint32_t>(n + 1));
        }
        case blk::Operation::Discard:
        case blk::Operation::WriteZeroes: {
            const bool discard = d.op == blk::Operation::Discard;
            if (qcow2_) {
                return answer(qcow2_zero(discard, d.unmap, d.offset, d.length));
            }
            // A hole reads as zeroes, so write-zeroes with unmap may punch one.
            const int mode = discard || (d.unmap && can_punch_hole_) ? FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
                                                                     : FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE;
            return submit(0, false, [&](std::uint16_t index, InFlight&) {
                return ring_.fallocate(index, mode, d.offset, d.length);
            });
        }
    }
    return answer(blk::kStatusUnsupp);
}

Result<void> Block::complete_now(std::uint16_t head, std::uint8_t* status, std::uint8_t value,
                                 std::uint32_t written) {
    *status = value;
    ++counters_.requests;
    if (value == blk::kStatusIoErr) {
        ++counters_.io_errors;
    }
    signal_pending_ = true;
    return queue_->add_used(head, written);
}

// A host failure (EIO, ENOSPC, a short transfer) fails that request only
// (VIRTIO_BLK_S_IOERR); the device carries on.
Result<void> Block::reap_completions() {
    Result<void> result;
    const unsigned reaped = ring_.reap([&](std::uint64_t user_data, int res) {
        const auto index = static_cast<std::uint16_t>(user_data);
        InFlight& slot = slots_[index];
        if (res > 0 && !slot.iovecs.empty() && slot.done + static_cast<std::uint32_t>(res) < slot.expected &&
            continue_transfer(index, static_cast<std::uint32_t>(res))) {
            ++counters_.short_transfers;
            return;
        }
        const std::uint32_t total = slot.done + (res > 0 ? static_cast<std::uint32_t>(res) : 0);
        const bool good = res >= 0 && total == slot.expected;
        const std::uint32_t data = slot.is_read ? std::min(total, slot.expected) : 0;
        if (auto r =
                complete_now(slot.head, slot.status, good ? blk::kStatusOk : blk::kStatusIoErr, data + 1);
            !r && result) {
            result = r.error();
        }
        free_slots_.push_back(index);
        --in_flight_;
    });
    if (reaped > 0) {
        ++counters_.completion_batches;
    }
    return result;
}

// A regular file's read or write may move fewer bytes than asked (a signal,
// a page-cache race); the rest goes out again as the snapshot writer does.
bool Block::continue_transfer(std::uint16_t index, std::uint32_t moved) {
    InFlight& slot = slots_[index];
    slot.done += moved;
    skip_iovec_bytes(slot.iovecs, moved);
    const auto count = static_cast<unsigned>(slot.iovecs.size());
    const std::uint64_t at = slot.offset + slot.done;
    return (slot.is_read ? ring_.readv(index, slot.iovecs.data(), count, at, slot.fd)
                         : ring_.writev(index, slot.iovecs.data(), count, at, slot.fd)) != nullptr;
}

// Requests in flight write guest memory until they end, and the driver
// reuses those buffers as soon as its reset returns (Linux's virtio_mmio
// does not wait for the status to read back 0, §4.2.2.2): cancelled
// (queued ones end at once) and outwaited here, without answers.
void Block::cancel_in_flight(std::optional<std::chrono::milliseconds> bound, bool stoppable) {
    if (in_flight_ == 0) {
        return;
    }
    if (auto r = ring_.cancel_all(); !r) {
        log::warn("{}: {}", name(), r.error().to_string());
    }
    const auto start = std::chrono::steady_clock::now();
    while (in_flight_ > 0) {
        if ((stoppable && stop_waiting_) || (bound && std::chrono::steady_clock::now() - start >= *bound)) {
            log::warn("{}: {} requests still in flight, left to the kernel", name(), in_flight_);
            return;
        }
        if (auto r = ring_.submit_and_wait_one(kWaitSlice); !r && r.error().code != "interrupted") {
            log::error("{}: {}; {} requests may still be in flight", name(), r.error().to_string(),
                       in_flight_);
            return;
        }
        in_flight_ -= ring_.reap([](std::uint64_t, int) {});
    }
}

void Block::reset() {
    cancel_in_flight(std::nullopt, /*stoppable=*/true);
    context_ = {};
    queue_ = nullptr;
    free_slots_.clear();
    stalled_ = false;
    signal_pending_ = false;
    ring_.clear_event();
}

Result<void> Block::quiesce() {
    if (queue_ == nullptr) {
        return qcow2_ ? qcow2_->flush() : ok();
    }
    Result<void> result;
    while (in_flight_ > 0) {
        if (auto r = ring_.submit_and_wait_one(kWaitSlice); !r && r.error().code != "interrupted") {
            return r.error().context(fmt::format("{} requests still in flight", in_flight_));
        }
        if (auto r = reap_completions(); !r && result) {
            result = r.error();
        }
    }
    if (signal_pending_ && queue_->needs_notification()) {
        context_.interrupt->signal_used();
    }
    signal_pending_ = false;
    // A qcow2 image's state is on disk: durable before a snapshot.
    if (auto r = qcow2_ ? qcow2_->flush() : ok(); !r && result) {
        result = r.error();
    }
    return result;
}

void Block::save_state(ByteWriter& out) const {
    out.u16(kStateVersion);
    out.u64(capacity_);
    out.boolean(read_only_);
}

Result<void> Block::restore_state(ByteReader& in) {
    const std::uint16_t version = in.u16();
    const std::uint64_t capacity = in.u64();
    const bool read_only = in.boolean();
    if (auto r = in.finish("virtio-blk state"); !r) {
        return r;
    }
    if (version != kStateVersion) {
        return make_error("virtio-blk state version {} is not {}", version, kStateVersion);
    }
    // The guest's file systems were mounted on the disk it saw.
    if (capacity != capacity_) {
        return make_coded_error("config_mismatch", "the snapshot's disk has {} sectors, {} has {}", capacity, path_,
                                capacity_);
    }
    if (read_only != read_only_) {
        return make_coded_error("config_mismatch", "the snapshot's disk was {}, {} is opened {}",
                                read_only ? "read-only" : "writable", path_, read_only_ ? "read-only" : "writable");
    }
    return ok();
}

}  // namespace sbx::virtio
