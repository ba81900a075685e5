// virtio-vsock (virtio 1.2 §5.10), emulated in the VMM with Firecracker's
// "hybrid vsock" host side: guest stream sockets become host Unix
// sockets (vsock_host.hpp has the convention). Queues: rx 0, tx 1,
// event 2; configuration space: le64 guest_cid.
//
// Everything runs on the device thread with the device lock held: queue
// notifications and the host sockets' epoll handlers. All I/O is
// non-blocking and synchronous, so nothing touches guest memory once a
// call returns. Memory is bounded: per connection, guest data the host has
// not read is held up to our buf_alloc (256 KiB); host data is read only
// into the guest's RX buffers and only within the guest's credit;
// connections, pending handshakes and queued RSTs are capped.
//
// Guest faults: a TX chain too short for a header or for the len it
// announces, and an RX chain too small for a header, are errors (the
// device needs a reset). vhost_vsock and Firecracker drop such a packet and
// go on; here a chain no conforming driver builds is treated like any
// other malformed chain, and dropping a stream packet silently would
// corrupt the stream. A well-formed packet with a bad header is the
// peer's problem: a wrong src_cid or a dst_cid other than the host is
// dropped (as vhost does), other violations (len over 64 KiB, type other
// than stream, an unexpected op, data beyond the credit) reset that
// connection with an RST.
//
// Snapshots: host sockets cannot be saved, so the saved state has no
// connections. quiesce() has nothing to give back: an RX chain is used or
// given back within the call that popped it, and the event queue is only
// popped for an event. What the host side queued for the guest stays with
// the connections of the VM that was saved (which may resume). The restored
// device sends VIRTIO_VSOCK_EVENT_TRANSPORT_RESET on the event queue
// (§5.10.6.7, waiting for an event buffer if none is posted), so the guest
// drops its connections and re-reads its CID (Linux virtio_transport.c,
// virtio_vsock_event_handle), and peers reconnect.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/unique_fd.hpp"
#include "devices/virtio/virtio_device.hpp"
#include "devices/virtio/vsock/vsock_connection.hpp"

namespace sbx::virtio {

struct VsockConfig {
    std::uint64_t guest_cid = 3;  // must be >= 3
    std::string uds_path;         // host-side Unix socket the VMM listens on
    // Streams open at once (either side's); more are refused (RST/close).
    std::size_t max_connections = 1024;
    // Host clients that have not sent their CONNECT line yet; past this the
    // oldest is closed.
    std::size_t max_pending_handshakes = 64;
};

// Counters for tests and diagnostics.
struct VsockStats {
    std::size_t connections = 0;
    std::size_t pending_handshakes = 0;
    std::size_t buffered_to_host = 0;  // guest bytes held for slow host sockets
    std::size_t queued_resets = 0;     // RSTs waiting for RX buffers
};

class Vsock final : public VirtioDevice {
public:
    // Validates the cid, binds and listens on uds_path (SOCK_STREAM,
    // non-blocking, CLOEXEC). A path that exists and is not a stale socket,
    // or any bind error, is a one-line Error naming the path. Unlinks the
    // socket on destruction.
    static Result<std::unique_ptr<Vsock>> open(const VsockConfig& config);
    ~Vsock() override;
    Vsock(const Vsock&) = delete;
    Vsock& operator=(const Vsock&) = delete;
    Vsock(Vsock&&) = delete;
    Vsock& operator=(Vsock&&) = delete;

    [[nodiscard]] DeviceType type() const override { return DeviceType::Vsock; }
    [[nodiscard]] std::string name() const override;
    [[nodiscard]] std::uint64_t features() const override { return vsock::kFeatureStream; }
    [[nodiscard]] std::span<const std::uint16_t> queue_sizes() const override { return kQueueSizes; }
    void read_config(std::uint64_t offset, std::span<std::uint8_t> data) const override;

    [[nodiscard]] Result<void> activate(const ActiveContext& context) override;
    [[nodiscard]] Result<void> process_queue(std::size_t index) override;
    void reset() override;

    // u16 version, u64 guest CID. The saved CID is only checked as a CID:
    // configuration space keeps this device's (a memory fork gives each VM
    // its own), and the guest re-reads it on the TRANSPORT_RESET.
    void save_state(ByteWriter& out) const override;
    [[nodiscard]] Result<void> restore_state(ByteReader& in) override;
    [[nodiscard]] Result<void> after_restore() override;
    static constexpr std::uint16_t kStateVersion = 1;

    [[nodiscard]] VsockStats stats() const;
    [[nodiscard]] const std::string& uds_path() const { return config_.uds_path; }

private:
    static constexpr std::array<std::uint16_t, 3> kQueueSizes{256, 256, 256};
    // RSTs for packets that have no connection (or whose connection was
    // aborted), waiting for RX buffers; more are dropped.
    static constexpr std::size_t kMaxQueuedResets = 2048;

    struct Handshake {
        UniqueFd socket;
    };
    using Key = std::uint64_t;  // host port << 32 | guest port
    static Key key_of(std::uint32_t host_port, std::uint32_t guest_port) {
        return (Key{host_port} << 32) | guest_port;
    }

    Vsock(VsockConfig config, UniqueFd listener);

    // Guest → host.
    [[nodiscard]] Result<void> process_tx();
    [[nodiscard]] Result<void> handle_tx_chain();
    void handle_guest_packet(const vsock::PacketHeader& header, ChainReader& payload);
    void connect_to_host(const vsock::PacketHeader& request);
    // Host → guest.
    [[nodiscard]] Result<void> process_rx();
    [[nodiscard]] bool fill_rx_chain(std::uint32_t& written);
    void queue_reset(std::uint32_t host_port, std::uint32_t guest_port);
    void queue_reset_reply(const vsock::PacketHeader& to);
    // Host sockets.
    [[nodiscard]] Result<void> on_listener(std::uint32_t events);
    [[nodiscard]] Result<void> on_handshake(int fd, std::uint32_t events);
    void drop_handshake(int fd);
    void resume_listener();
    [[nodiscard]] Result<void> on_host_socket(Key key, std::uint32_t events);
    [[nodiscard]] bool watch(Key key, vsock::Connection& connection);
    void unwatch(vsock::Connection& connection);
    // After any change to a connection: its epoll interest, its place in
    // the RX round-robin, its end.
    void apply(Key key, vsock::Connection::Verdict verdict);
    void refresh(Key key, vsock::Connection& connection);
    void forget(Key key);
    [[nodiscard]] std::uint32_t allocate_local_port(std::uint32_t guest_port);
    void signal_used();
    // Sends the pending TRANSPORT_RESET once the driver has posted an
    // event buffer.
    [[nodiscard]] Result<void> post_transport_reset();
    // Host CONNECTs wait while the driver has not taken the reset.
    [[nodiscard]] Result<void> await_reset_taken();
    [[nodiscard]] Result<void> check_reset_taken();
    static constexpr std::chrono::seconds kResetAckLimit{30};

    VsockConfig config_;
    UniqueFd listener_;
    std::array<std::uint8_t, 8> config_space_{};

    ActiveContext context_;
    bool active_ = false;
    std::unordered_map<Key, vsock::Connection> connections_;
    std::list<Handshake> handshakes_;  // oldest first
    std::deque<Key> rx_ready_;         // connections with something for the guest
    std::deque<vsock::PacketHeader> resets_;
    std::uint32_t next_local_port_;
    bool listener_paused_ = false;  // out of fds: accept() resumes when one closes
    bool rx_used_ = false;
    bool tx_used_ = false;
    bool transport_reset_pending_ = false;
    bool reset_unacked_ = false;  // posted; the driver has not handed the buffer back
    std::uint16_t reset_avail_idx_ = 0;
    std::chrono::steady_clock::time_point reset_posted_at_;
    UniqueFd ack_timer_;

    DescriptorChain rx_chain_;
    DescriptorChain tx_chain_;
    DescriptorChain event_chain_;
    std::vector<iovec> scratch_;
};

}  // namespace sbx::virtio
