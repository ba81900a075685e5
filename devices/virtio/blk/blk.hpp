// virtio-blk (virtio 1.2 §5.2) over a raw image file, with io_uring: every
// chain available at a notification becomes one submission entry whose
// iovecs point straight into guest memory, one io_uring_submit per batch,
// completions reaped from the eventfd the ring signals. One request queue.
// An image starting with the qcow2 magic is served through qcow2::Image
// instead (blk_qcow2.cpp).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/io_ring.hpp"
#include "base/unique_fd.hpp"
#include "devices/virtio/blk/blk_request.hpp"
#include "devices/virtio/blk/qcow2/qcow2_image.hpp"
#include "devices/virtio/virtio_device.hpp"

namespace sbx::virtio {

struct BlockConfig {
    std::string path;  // raw image file (or block device), or a qcow2 v3 image
    bool read_only = false;
    std::string serial = {};  // GET_ID answer, at most 20 bytes; empty: the device name
    // A qcow2 image may name a backing file (qcow2::BackingFiles).
    bool allow_backing = false;
};

// Counters for tests and metrics; read under the device lock.
struct BlockCounters {
    std::uint64_t requests = 0;            // chains answered
    std::uint64_t submits = 0;             // io_uring_submit calls
    std::uint64_t completion_batches = 0;  // reaps that found completions
    std::uint64_t io_errors = 0;           // requests answered VIRTIO_BLK_S_IOERR
    std::uint64_t stalls = 0;              // times popping stopped for want of a free slot or entry
    std::uint64_t short_transfers = 0;     // reads/writes that moved less than asked, continued
};

class ChainReader;
class ChainWriter;

class Block final : public VirtioDevice {
public:
    // Opens the image (O_RDWR, or O_RDONLY when read_only; O_CLOEXEC), sets
    // up io_uring. `name` is the guest device name for logs and the default
    // serial ("vda"). Any failure is a one-line Error naming the path.
    static Result<std::unique_ptr<Block>> open(const BlockConfig& config, std::string name);
    ~Block() override;
    Block(const Block&) = delete;
    Block& operator=(const Block&) = delete;
    Block(Block&&) = delete;
    Block& operator=(Block&&) = delete;

    [[nodiscard]] DeviceType type() const override { return DeviceType::Block; }
    [[nodiscard]] std::string name() const override { return "virtio-blk " + name_; }
    [[nodiscard]] std::uint64_t features() const override { return features_; }
    [[nodiscard]] std::span<const std::uint16_t> queue_sizes() const override { return kQueueSizes; }
    void read_config(std::uint64_t offset, std::span<std::uint8_t> data) const override;

    [[nodiscard]] Result<void> activate(const ActiveContext& context) override;
    [[nodiscard]] Result<void> process_queue(std::size_t index) override;
    // Cancels every request in flight and waits for them to end (they
    // target guest memory), then forgets the queue; the image stays open.
    // The wait ends early once stop_waiting() was called.
    void reset() override;
    void stop_waiting() override { stop_waiting_ = true; }

    // Waits for every request in flight and answers it in the used ring.
    // Chains not popped yet (the device stalled on slots or submission
    // entries) are still in the available ring: nothing else is held.
    [[nodiscard]] Result<void> quiesce() override;
    // u16 version, u64 capacity in sectors, bool read-only: the disk the
    // guest saw, which the restored device's image must match.
    void save_state(ByteWriter& out) const override;
    [[nodiscard]] Result<void> restore_state(ByteReader& in) override;
    static constexpr std::uint16_t kStateVersion = 1;

    [[nodiscard]] std::uint64_t capacity_sectors() const { return capacity_; }
    [[nodiscard]] bool is_qcow2() const { return qcow2_ != nullptr; }
    [[nodiscard]] const BlockCounters& counters() const { return counters_; }
    // Requests handed to io_uring and not yet answered, and how many of
    // them the kernel has completed (waiting to be reaped).
    [[nodiscard]] unsigned in_flight() const { return in_flight_; }
    [[nodiscard]] unsigned completions_waiting() const { return ring_.completions_waiting(); }

    static constexpr std::uint16_t kQueueSize = 256;

private:
    // A request handed to io_uring: what its completion needs.
    struct InFlight {
        std::uint16_t head = 0;
        std::uint8_t* status = nullptr;  // host view of the chain's status byte
        std::uint32_t expected = 0;      // result that means success (bytes, or 0)
        bool is_read = false;            // the result counts bytes written into the chain
        std::vector<iovec> iovecs;       // data buffers in guest memory (storage reused)
        // Reads and writes: where the transfer goes, and what of it is done
        // (a short transfer is submitted again from where it stopped).
        std::uint64_t offset = 0;
        int fd = IoRing::kFixedFile;
        std::uint32_t done = 0;
    };
    enum class Started { Done, Stalled };

    Block(std::string name, std::string serial, std::string path, UniqueFd file, IoRing ring, bool read_only);
    void probe_fallocate(std::uint64_t bytes);
    void fill_config_space();

    [[nodiscard]] Result<void> run_batch(bool pop_new);
    [[nodiscard]] Result<void> drain_available();
    [[nodiscard]] Result<Started> start_request();
    [[nodiscard]] Result<void> complete_now(std::uint16_t head, std::uint8_t* status, std::uint8_t value,
                                            std::uint32_t written);
    [[nodiscard]] Result<void> reap_completions();
    // Hands the rest of a short read or write to the ring again: false when
    // it has no room (the request then fails).
    [[nodiscard]] bool continue_transfer(std::uint16_t index, std::uint32_t moved);
    // Cancels the requests in flight and waits for them to end, without
    // answers, for at most `bound` (none: no limit); with `stoppable`, also
    // only until stop_waiting() is called.
    void cancel_in_flight(std::optional<std::chrono::milliseconds> bound, bool stoppable);

    // qcow2 requests (blk_qcow2.cpp): where a read or write can go to
    // io_uring as one transfer, else served synchronously: status bytes.
    [[nodiscard]] Result<void> open_qcow2(bool allow_backing);
    [[nodiscard]] std::optional<qcow2::Extent> qcow2_extent(bool is_read, std::uint64_t offset, std::uint64_t len);
    [[nodiscard]] std::uint8_t qcow2_transfer(bool is_read, std::uint64_t offset, std::uint64_t len,
                                              ChainReader& reader, ChainWriter& writer);
    [[nodiscard]] std::uint8_t qcow2_flush();
    [[nodiscard]] std::uint8_t qcow2_zero(bool discard, bool unmap, std::uint64_t offset, std::uint64_t len);

    static constexpr std::array<std::uint16_t, 1> kQueueSizes{kQueueSize};

    std::string name_;
    std::string serial_;
    std::string path_;
    UniqueFd file_;
    IoRing ring_;
    bool read_only_;
    std::uint64_t capacity_ = 0;  // in 512-byte sectors
    bool can_punch_hole_ = false;
    bool can_zero_range_ = false;
    std::uint32_t discard_alignment_ = 1;  // sectors
    std::uint64_t features_ = 0;
    blk::ConfigSpace config_space_{};
    std::unique_ptr<qcow2::Image> qcow2_;  // null: a raw image
    std::vector<std::uint8_t> qcow2_bounce_;  // data of requests the library serves

    // From activate() until reset().
    ActiveContext context_;
    Queue* queue_ = nullptr;
    DescriptorChain chain_;
    std::array<InFlight, kQueueSize> slots_;
    std::vector<std::uint16_t> free_slots_;
    unsigned in_flight_ = 0;  // slots whose entry is in the ring, submitted or not
    bool stalled_ = false;    // stopped popping: no free slot or submission entry
    bool signal_pending_ = false;
    BlockCounters counters_;
    std::atomic<bool> stop_waiting_{false};  // the VM is stopping: waits end
};

}  // namespace sbx::virtio
