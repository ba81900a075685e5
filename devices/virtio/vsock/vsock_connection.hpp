// One vsock stream between a guest port and a host Unix socket: its
// state machine (§5.10.6.4-§5.10.6.6), the credit accounting of both
// directions (§5.10.6.3) and the bytes the host socket has not taken yet.
// It reads and writes its socket but owns no event registration: the
// device (vsock.cpp) watches the fd with the events interest() asks for.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "base/unique_fd.hpp"
#include "devices/virtio/queue/chain_io.hpp"
#include "devices/virtio/vsock/vsock_packet.hpp"

namespace sbx::virtio::vsock {

// Our buf_alloc per connection (§5.10.6.3): guest data the host socket has
// not taken yet is held up to this, and the guest may not send more.
inline constexpr std::uint32_t kConnectionBufAlloc = 256 * 1024;
// The guest is sent a CREDIT_UPDATE once its view of our free space falls
// below this and the host has consumed at least kCreditUpdateMinBytes
// (or everything) since the guest last heard from us.
inline constexpr std::uint32_t kCreditLowWater = kConnectionBufAlloc / 2;
inline constexpr std::uint32_t kCreditUpdateMinBytes = 16 * 1024;

// Guest bytes waiting for the host socket: contiguous, so one send()
// drains as much as the socket takes. Its memory is released when empty.
class ByteQueue {
public:
    [[nodiscard]] std::size_t size() const { return data_.size() - head_; }
    [[nodiscard]] bool empty() const { return size() == 0; }
    [[nodiscard]] std::span<const std::uint8_t> front() const { return std::span(data_).subspan(head_); }
    void append(std::span<const std::uint8_t> bytes);
    void consume(std::size_t n);

private:
    std::vector<std::uint8_t> data_;
    std::size_t head_ = 0;
};

class Connection {
public:
    enum class State {
        Connecting,   // host-initiated: REQUEST sent, waiting for the guest's RESPONSE
        Established,  // data may flow
    };
    // What the device does with the connection after an event.
    enum class Verdict {
        Keep,
        Reset,   // abort: RST to the guest, close the host socket, forget it
        Forget,  // the guest reset it: close the host socket, forget it
    };

    // A host client asked for guest port `guest_port` (CONNECT line).
    static Connection from_host(UniqueFd socket, std::uint32_t local_port, std::uint32_t guest_port);
    // The guest's REQUEST was connected to a host listener.
    static Connection from_guest(UniqueFd socket, const PacketHeader& request);

    [[nodiscard]] std::uint32_t host_port() const { return host_port_; }
    [[nodiscard]] std::uint32_t guest_port() const { return guest_port_; }
    [[nodiscard]] int fd() const { return socket_.get(); }
    [[nodiscard]] State state() const { return state_; }

    // A packet from the guest for this connection, its header already
    // checked by the device and `payload` holding header.len bytes.
    [[nodiscard]] Verdict on_guest_packet(const PacketHeader& header, ChainReader& payload,
                                          std::vector<iovec>& scratch);
    // Readiness of the host socket (EPOLLIN/OUT/HUP/ERR).
    [[nodiscard]] Verdict on_host_event(std::uint32_t events);

    // Puts this connection's next packet for the guest into `chain`, whose
    // writable part holds at least a header: a pending control packet, or
    // data read from the host socket straight into the chain after the
    // header. Returns the bytes written, 0 when there was nothing to send.
    struct RxPacket {
        std::uint32_t written = 0;
        Verdict verdict = Verdict::Keep;
    };
    [[nodiscard]] RxPacket fill_rx(const DescriptorChain& chain, std::uint64_t guest_cid,
                                   std::vector<iovec>& scratch);

    // Whether fill_rx() has something to send.
    [[nodiscard]] bool wants_rx() const;
    // The epoll events to watch the host socket for; whether to watch it at
    // all (not after EPOLLHUP: reads then run to EOF on credit alone).
    [[nodiscard]] std::uint32_t interest() const;
    [[nodiscard]] bool wants_watch() const { return socket_.valid() && !host_hup_ && !closing_; }
    // Both directions are done and a final RST is queued: the host socket
    // can be closed; the connection is forgotten once the RST went out.
    [[nodiscard]] bool closing() const { return closing_; }
    void close_host_socket() { socket_.reset(); }
    [[nodiscard]] bool finished() const { return finished_; }

    [[nodiscard]] std::size_t buffered_to_host() const { return to_host_.size() + reply_.size(); }
    // What the guest may still send us / we may still send the guest.
    [[nodiscard]] std::uint32_t guest_credit_left() const { return kConnectionBufAlloc - (rx_cnt_ - fwd_cnt_); }
    [[nodiscard]] std::uint32_t peer_credit() const;

    // Set by the device: how the host socket is registered, and whether the
    // connection sits in the device's RX round-robin.
    bool watching = false;
    std::uint32_t watched_events = 0;
    bool queued_for_rx = false;

private:
    Connection(UniqueFd socket, State state, std::uint32_t host_port, std::uint32_t guest_port);

    // Control packets waiting for an RX buffer, in the order sent.
    enum Pending : std::uint32_t {
        kPendingRequest = 1,
        kPendingResponse = 2,
        kPendingCreditUpdate = 4,
        kPendingCreditRequest = 8,
        kPendingShutdown = 16,
        kPendingRst = 32,
    };

    [[nodiscard]] bool can_read_host() const;
    [[nodiscard]] Result<void> write_guest_data(ChainReader& payload, std::uint32_t len, std::vector<iovec>& scratch);
    [[nodiscard]] Result<void> flush_to_host();
    [[nodiscard]] Verdict on_shutdown(std::uint32_t flags);
    void maybe_queue_credit_update();
    void check_done();
    [[nodiscard]] PacketHeader header_for_guest(std::uint64_t guest_cid, Op op) const;

    UniqueFd socket_;
    State state_;
    std::uint32_t host_port_;
    std::uint32_t guest_port_;
    std::uint32_t pending_ = 0;

    // Host → guest: what the guest told us (§5.10.6.3) and what we sent.
    std::uint32_t peer_buf_alloc_ = 0;
    std::uint32_t peer_fwd_cnt_ = 0;
    std::uint32_t tx_cnt_ = 0;
    bool credit_requested_ = false;
    // Guest → host: bytes received, bytes the host socket took, and the
    // fwd_cnt the guest last saw.
    std::uint32_t rx_cnt_ = 0;
    std::uint32_t fwd_cnt_ = 0;
    std::uint32_t last_fwd_cnt_sent_ = 0;

    std::string reply_;  // the unsent rest of "OK <port>\n"
    ByteQueue to_host_;

    bool host_readable_ = false;  // EPOLLIN seen and not yet read to EAGAIN
    bool host_eof_ = false;       // read() returned 0
    bool host_hup_ = false;       // EPOLLHUP: the peer closed (or both sides shut down)
    bool host_write_shut_ = false;
    bool shutdown_sent_ = false;
    bool guest_shut_send_ = false;
    bool guest_shut_rcv_ = false;
    bool closing_ = false;
    bool finished_ = false;
};

}  // namespace sbx::virtio::vsock
