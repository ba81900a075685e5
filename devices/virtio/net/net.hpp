// virtio-net (virtio 1.2 §5.1) over a Linux tap: one receive queue (0) and
// one transmit queue (1), the MAC and link status in configuration space,
// mergeable receive buffers, and checksum/TSO offloads passed through to the
// tap. Frames move between guest memory and the tap with readv/writev over
// the chains' own buffers: no copy and no allocation per frame.
//
// Flow control, all on the device thread:
// - Receive holds popped chains until they can take the largest frame the
//   tap may deliver (rx_frame_limit); while the guest has not posted enough,
//   the tap is not watched for input and the driver's next receive-queue
//   notification resumes it. A frame larger than the buffers the guest can
//   ever offer is dropped and counted, never truncated.
// - Transmit stops at EAGAIN from the tap and resumes on EPOLLOUT.
// - Each event handles at most kFramesPerEvent frames per direction: the
//   tap stays readable (level-triggered) and transmit re-arms itself through
//   an eventfd, so neither direction starves the other or other devices.
#pragma once

#include <sys/uio.h>

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/event_fd.hpp"
#include "base/unique_fd.hpp"
#include "base/mac_address.hpp"
#include "devices/virtio/net/tap.hpp"
#include "devices/virtio/virtio_device.hpp"

namespace sbx::virtio {

struct NetConfig {
    std::string tap;                // tap interface name (IFNAMSIZ-1 chars at most)
    std::optional<MacAddress> mac;  // guest MAC; when absent, a random locally administered unicast one
};

// What happened to frames; read under the device lock.
struct NetCounters {
    std::uint64_t tx_frames = 0;
    std::uint64_t tx_bytes = 0;    // frame bytes, headers excluded
    std::uint64_t tx_dropped = 0;  // the backend refused the frame (bad GSO header, too short, closed)
    std::uint64_t tx_waits = 0;    // times transmit waited for the backend (EAGAIN)
    std::uint64_t rx_frames = 0;
    std::uint64_t rx_bytes = 0;
    std::uint64_t rx_dropped_oversize = 0;   // larger than the buffers the guest offers
    std::uint64_t rx_dropped_malformed = 0;  // shorter than the header (only a non-tap backend can do that)
    std::uint64_t rx_waits = 0;              // times receive waited for the guest's buffers
};

// Feature bits (§5.1.3).
namespace net_feature {
inline constexpr std::uint64_t kCsum = 1ULL << 0;
inline constexpr std::uint64_t kGuestCsum = 1ULL << 1;
inline constexpr std::uint64_t kMac = 1ULL << 5;
inline constexpr std::uint64_t kGuestTso4 = 1ULL << 7;
inline constexpr std::uint64_t kGuestTso6 = 1ULL << 8;
inline constexpr std::uint64_t kGuestEcn = 1ULL << 9;
inline constexpr std::uint64_t kHostTso4 = 1ULL << 11;
inline constexpr std::uint64_t kHostTso6 = 1ULL << 12;
inline constexpr std::uint64_t kHostEcn = 1ULL << 13;
inline constexpr std::uint64_t kMrgRxbuf = 1ULL << 15;
inline constexpr std::uint64_t kStatus = 1ULL << 16;
}  // namespace net_feature

class Net final : public VirtioDevice {
public:
    static constexpr std::size_t kRxQueue = 0;
    static constexpr std::size_t kTxQueue = 1;
    static constexpr std::uint16_t kQueueSize = 256;
    static constexpr std::size_t kFramesPerEvent = 128;
    // The largest frame a tap delivers, header included (§5.1.6.3.1): with
    // TSO a 64 KiB IP packet, else a 1500-byte MTU; Ethernet and VLAN
    // headers on top.
    static constexpr std::size_t kMaxFrameWithTso = kNetHeaderSize + 14 + 4 + 65535;
    static constexpr std::size_t kMaxFrame = kNetHeaderSize + 14 + 4 + 1500;

    // Opens /dev/net/tun and attaches to tap `config.tap` (see open_tap in
    // tap.hpp): creates it when the process has CAP_NET_ADMIN, non-blocking,
    // close-on-exec, vnet header size 12. Errors name the tap and say what
    // to do.
    static Result<std::unique_ptr<Net>> open(const NetConfig& config);
    // For tests and embedders: a backend fd that carries one frame, header
    // first, per read and write — a tap set up elsewhere (IFF_TAP |
    // IFF_NO_PI | IFF_VNET_HDR) or one end of a SOCK_SEQPACKET/SOCK_DGRAM
    // socket pair. `config.tap` only names the device in logs here.
    static Result<std::unique_ptr<Net>> from_fd(UniqueFd fd, const NetConfig& config);

    [[nodiscard]] DeviceType type() const override { return DeviceType::Net; }
    [[nodiscard]] std::string name() const override { return name_; }
    [[nodiscard]] std::uint64_t features() const override;
    [[nodiscard]] std::span<const std::uint16_t> queue_sizes() const override { return queue_sizes_; }
    void read_config(std::uint64_t offset, std::span<std::uint8_t> data) const override;
    [[nodiscard]] Result<void> activate(const ActiveContext& context) override;
    [[nodiscard]] Result<void> process_queue(std::size_t index) override;
    void reset() override;

    // Gives the held receive chains back to the available ring (see
    // net.cpp); transmit holds nothing between calls.
    [[nodiscard]] Result<void> quiesce() override;
    // u16 version and the MAC the guest's driver read. Only informational
    // on restore: a memory fork gives the new VM its own MAC (config space
    // always shows this device's), and a differing one is logged.
    void save_state(ByteWriter& out) const override;
    [[nodiscard]] Result<void> restore_state(ByteReader& in) override;
    static constexpr std::uint16_t kStateVersion = 1;

    [[nodiscard]] const MacAddress& mac() const { return mac_; }
    [[nodiscard]] const NetCounters& counters() const { return counters_; }
    [[nodiscard]] bool is_tap() const { return backend_ == Backend::Tap; }

private:
    enum class Backend { Tap, Socket };
    Net(UniqueFd fd, Backend backend, std::string name, MacAddress mac, EventFd tx_resume);
    static Result<std::unique_ptr<Net>> create(UniqueFd fd, Backend backend, const NetConfig& config);

    [[nodiscard]] Result<void> on_backend_event(std::uint32_t events);
    [[nodiscard]] Result<void> process_tx();
    [[nodiscard]] Result<void> process_rx();
    // Pops receive chains until they can take rx_frame_limit_ bytes (one
    // chain without mergeable buffers); false when the guest has not posted
    // enough yet.
    [[nodiscard]] Result<bool> hold_rx_buffers(Queue& queue);
    // iovecs over the held chains for one frame, ending with a host byte
    // that catches a frame too large for them; returns the guest bytes
    // covered.
    std::size_t map_rx_buffers();
    [[nodiscard]] Result<void> deliver_rx_frame(Queue& queue, std::size_t length);
    [[nodiscard]] DescriptorChain& rx_slot(std::size_t n) { return rx_chains_[(rx_first_ + n) % kQueueSize]; }
    // Watches the backend for what the two directions wait for now.
    [[nodiscard]] Result<void> update_backend_events();
    void stop_watching_backend(const Error& why);
    void drain_backend() const;
    [[nodiscard]] ssize_t write_frame();

    UniqueFd fd_;
    Backend backend_;
    std::string name_;
    MacAddress mac_;
    std::array<std::uint8_t, 10> config_{};  // struct virtio_net_config up to max_virtqueue_pairs
    std::array<std::uint16_t, 2> queue_sizes_{kQueueSize, kQueueSize};
    EventFd tx_resume_;  // signalled when transmit stopped at kFramesPerEvent
    NetCounters counters_;

    // Valid from activate() to reset().
    ActiveContext context_;
    bool mergeable_ = false;
    std::size_t rx_frame_limit_ = kMaxFrame;
    bool backend_watched_ = false;
    std::uint32_t backend_events_ = 0;
    bool rx_waiting_ = false;  // for the guest's buffers: tap input not watched
    bool tx_blocked_ = false;  // on EAGAIN: waiting for EPOLLOUT
    bool logged_tx_drop_ = false;
    bool logged_rx_drop_ = false;

    // Receive chains popped and not yet used: a ring of kQueueSize slots
    // whose storage is reused.
    std::vector<DescriptorChain> rx_chains_;
    std::vector<std::uint32_t> rx_covered_;  // per slot: bytes mapped by map_rx_buffers
    std::size_t rx_first_ = 0;
    std::size_t rx_held_ = 0;
    std::uint64_t rx_capacity_ = 0;  // writable bytes of the held chains
    std::vector<iovec> rx_iov_;
    std::uint8_t rx_overflow_byte_ = 0;

    DescriptorChain tx_chain_;
    std::vector<iovec> tx_iov_;
};

}  // namespace sbx::virtio
