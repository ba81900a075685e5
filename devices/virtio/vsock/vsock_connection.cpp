#include "devices/virtio/vsock/vsock_connection.hpp"

#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "devices/virtio/vsock/vsock_host.hpp"

namespace sbx::virtio::vsock {
namespace {

// sendmsg without SIGPIPE; -1 with errno EAGAIN when the socket is full.
ssize_t send_iov(int fd, std::span<iovec> iov) {
    msghdr msg{};
    msg.msg_iov = iov.data();
    msg.msg_iovlen = iov.size();
    ssize_t n = 0;
    do {
        n = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    return n;
}

ssize_t send_bytes(int fd, std::span<const std::uint8_t> bytes) {
    // iovec is not const-correct; sendmsg only reads.
    iovec iov{const_cast<std::uint8_t*>(bytes.data()), bytes.size()};  // NOLINT(cppcoreguidelines-pro-type-const-cast)
    return send_iov(fd, std::span(&iov, 1));
}

bool would_block(int err) { return err == EAGAIN || err == EWOULDBLOCK; }

}  // namespace

void ByteQueue::append(std::span<const std::uint8_t> bytes) {
    if (head_ > 0 && data_.size() + bytes.size() > data_.capacity()) {
        data_.erase(data_.begin(), data_.begin() + static_cast<std::ptrdiff_t>(head_));
        head_ = 0;
    }
    const std::size_t needed = data_.size() + bytes.size();
    if (needed > data_.capacity()) {
        // Grow geometrically but not past the per-connection bound.
        data_.reserve(std::max(needed, std::min<std::size_t>(2 * data_.capacity(), kConnectionBufAlloc)));
    }
    data_.insert(data_.end(), bytes.begin(), bytes.end());
}

void ByteQueue::consume(std::size_t n) {
    head_ += std::min(n, size());
    if (head_ == data_.size()) {
        std::vector<std::uint8_t>().swap(data_);
        head_ = 0;
    }
}

Connection::Connection(UniqueFd socket, State state, std::uint32_t host_port, std::uint32_t guest_port)
    : socket_(std::move(socket)), state_(state), host_port_(host_port), guest_port_(guest_port) {}

Connection Connection::from_host(UniqueFd socket, std::uint32_t local_port, std::uint32_t guest_port) {
    Connection c(std::move(socket), State::Connecting, local_port, guest_port);
    c.pending_ = kPendingRequest;
    return c;
}

Connection Connection::from_guest(UniqueFd socket, const PacketHeader& request) {
    Connection c(std::move(socket), State::Established, request.dst_port, request.src_port);
    c.peer_buf_alloc_ = request.buf_alloc;
    c.peer_fwd_cnt_ = request.fwd_cnt;
    c.pending_ = kPendingResponse;
    return c;
}

std::uint32_t Connection::peer_credit() const {
    // Wrapping u32 arithmetic, as the counters themselves (§5.10.6.3).
    const std::uint32_t in_flight = tx_cnt_ - peer_fwd_cnt_;
    return in_flight >= peer_buf_alloc_ ? 0 : peer_buf_alloc_ - in_flight;
}

bool Connection::can_read_host() const {
    return state_ == State::Established && socket_.valid() && !host_eof_ && !guest_shut_rcv_ && !closing_;
}

bool Connection::wants_rx() const {
    return pending_ != 0 || (can_read_host() && host_readable_ && peer_credit() > 0);
}

std::uint32_t Connection::interest() const {
    if (state_ != State::Established || !wants_watch()) {
        return 0;
    }
    std::uint32_t events = 0;
    // Host data is read only when the guest can take it (§5.10.6.3): no
    // credit, or already known readable and waiting for RX buffers, means
    // EPOLLIN is not watched and the bytes stay in the socket.
    if (can_read_host() && !host_readable_ && peer_credit() > 0) {
        events |= EPOLLIN;
    }
    if (buffered_to_host() > 0) {
        events |= EPOLLOUT;
    }
    return events;
}

Connection::Verdict Connection::on_guest_packet(const PacketHeader& header, ChainReader& payload,
                                                std::vector<iovec>& scratch) {
    const Op op = header.operation();
    if (closing_) {
        // Our final RST is queued; the guest may not have seen it yet.
        return op == Op::Rst ? Verdict::Forget : Verdict::Keep;
    }
    // Every packet carries the sender's credit (§5.10.6.3).
    peer_buf_alloc_ = header.buf_alloc;
    peer_fwd_cnt_ = header.fwd_cnt;
    credit_requested_ = false;

    switch (op) {
    case Op::Rst: return Verdict::Forget;
    case Op::Response:
        if (state_ != State::Connecting) {
            return Verdict::Reset;
        }
        state_ = State::Established;
        reply_ = ok_line(host_port_);
        if (!flush_to_host()) {
            return Verdict::Reset;
        }
        break;
    case Op::Shutdown:
        if (auto v = on_shutdown(header.flags); v != Verdict::Keep) {
            return v;
        }
        break;
    case Op::Rw:
        if (state_ != State::Established || guest_shut_send_) {
            return Verdict::Reset;
        }
        // A guest that sends beyond the credit we gave it is misbehaving:
        // holding more would be unbounded buffering.
        if (header.len > guest_credit_left()) {
            return Verdict::Reset;
        }
        if (!write_guest_data(payload, header.len, scratch)) {
            return Verdict::Reset;
        }
        break;
    case Op::CreditUpdate: break;
    case Op::CreditRequest: pending_ |= kPendingCreditUpdate; break;
    case Op::Request:  // a second REQUEST on a live connection
    case Op::Invalid:
    default: return Verdict::Reset;
    }
    maybe_queue_credit_update();
    check_done();
    return Verdict::Keep;
}

Connection::Verdict Connection::on_shutdown(std::uint32_t flags) {
    if (state_ != State::Established) {
        return Verdict::Reset;
    }
    if ((flags & kShutdownRcv) != 0) {
        guest_shut_rcv_ = true;  // host bytes stay unread in the socket
    }
    if ((flags & kShutdownSend) != 0 && !guest_shut_send_) {
        guest_shut_send_ = true;
        // shutdown(SHUT_WR) once the buffered guest bytes are written.
        if (!flush_to_host()) {
            return Verdict::Reset;
        }
    }
    return Verdict::Keep;
}

Result<void> Connection::write_guest_data(ChainReader& payload, std::uint32_t len, std::vector<iovec>& scratch) {
    if (len == 0) {
        return ok();
    }
    rx_cnt_ += len;
    if (!to_host_.empty() || !reply_.empty()) {
        // Already behind: keep the order, wait for EPOLLOUT.
        std::size_t left = len;
        scratch.clear();
        payload.take_iovecs(left, scratch);
        for (const iovec& v : scratch) {
            to_host_.append(std::span(static_cast<const std::uint8_t*>(v.iov_base), v.iov_len));
        }
        return ok();
    }
    // Straight from guest memory to the socket; only what it does not take
    // is copied.
    scratch.clear();
    payload.take_iovecs(len, scratch);
    ssize_t sent = send_iov(socket_.get(), scratch);
    if (sent < 0) {
        if (!would_block(errno)) {
            return sys_error("vsock host socket");
        }
        sent = 0;
    }
    fwd_cnt_ += static_cast<std::uint32_t>(sent);
    auto skip = static_cast<std::size_t>(sent);
    for (const iovec& v : scratch) {
        if (skip >= v.iov_len) {
            skip -= v.iov_len;
            continue;
        }
        auto bytes = std::span(static_cast<const std::uint8_t*>(v.iov_base), v.iov_len).subspan(skip);
        to_host_.append(bytes);
        skip = 0;
    }
    return ok();
}

Result<void> Connection::flush_to_host() {
    while (!reply_.empty()) {
        const ssize_t n = send_bytes(socket_.get(), std::span(reinterpret_cast<const std::uint8_t*>(reply_.data()),
                                                             reply_.size()));
        if (n < 0) {
            return would_block(errno) ? ok() : sys_error("vsock host socket");
        }
        reply_.erase(0, static_cast<std::size_t>(n));
    }
    while (!to_host_.empty()) {
        const ssize_t n = send_bytes(socket_.get(), to_host_.front());
        if (n < 0) {
            if (would_block(errno)) {
                break;
            }
            return sys_error("vsock host socket");
        }
        to_host_.consume(static_cast<std::size_t>(n));
        fwd_cnt_ += static_cast<std::uint32_t>(n);
    }
    if (to_host_.empty() && guest_shut_send_ && !host_write_shut_) {
        // The guest will send no more (§5.10.6.5): the host reads EOF.
        if (::shutdown(socket_.get(), SHUT_WR) != 0 && errno != ENOTCONN) {
            return sys_error("vsock host socket shutdown");
        }
        host_write_shut_ = true;
    }
    maybe_queue_credit_update();
    check_done();
    return ok();
}

Connection::Verdict Connection::on_host_event(std::uint32_t events) {
    if (closing_ || !socket_.valid()) {
        return Verdict::Keep;
    }
    if ((events & EPOLLERR) != 0) {
        return Verdict::Reset;
    }
    if ((events & EPOLLHUP) != 0) {
        // The host side is gone (or both sides shut down): what it wrote is
        // still read up to EOF, but nothing more can be written to it.
        if (state_ == State::Connecting || buffered_to_host() > 0) {
            return Verdict::Reset;
        }
        host_hup_ = true;
        host_readable_ = true;
    }
    if ((events & EPOLLIN) != 0) {
        host_readable_ = true;
    }
    if ((events & EPOLLOUT) != 0 && !flush_to_host()) {
        return Verdict::Reset;
    }
    return Verdict::Keep;
}

void Connection::maybe_queue_credit_update() {
    if (state_ != State::Established || guest_shut_send_ || closing_) {
        return;  // the guest will not send more: it needs no credit
    }
    const std::uint32_t unannounced = fwd_cnt_ - last_fwd_cnt_sent_;
    if (unannounced == 0) {
        return;
    }
    const std::uint32_t guest_view_used = std::min(rx_cnt_ - last_fwd_cnt_sent_, kConnectionBufAlloc);
    const std::uint32_t guest_view_free = kConnectionBufAlloc - guest_view_used;
    if (guest_view_free < kCreditLowWater && (unannounced >= kCreditUpdateMinBytes || fwd_cnt_ == rx_cnt_)) {
        pending_ |= kPendingCreditUpdate;
    }
}

void Connection::check_done() {
    if (closing_ || state_ != State::Established) {
        return;
    }
    const bool guest_to_host_done = guest_shut_send_ && host_write_shut_;
    const bool host_to_guest_done = guest_shut_rcv_ || (host_eof_ && shutdown_sent_);
    if (guest_to_host_done && host_to_guest_done) {
        // Both directions are closed: a final RST releases the guest's
        // socket (§5.10.6.6), and the host socket is closed by the device.
        closing_ = true;
        pending_ = kPendingRst;
    }
}

PacketHeader Connection::header_for_guest(std::uint64_t guest_cid, Op op) const {
    PacketHeader h;
    h.src_cid = kHostCid;
    h.dst_cid = guest_cid;
    h.src_port = host_port_;
    h.dst_port = guest_port_;
    h.type = kTypeStream;
    h.op = static_cast<std::uint16_t>(op);
    h.buf_alloc = kConnectionBufAlloc;
    h.fwd_cnt = fwd_cnt_;
    return h;
}

Connection::RxPacket Connection::fill_rx(const DescriptorChain& chain, std::uint64_t guest_cid,
                                         std::vector<iovec>& scratch) {
    auto send = [&](PacketHeader h) -> RxPacket {
        ChainWriter writer(chain);
        (void)writer.write_obj(encode_header(h));  // the device checked the room
        last_fwd_cnt_sent_ = h.fwd_cnt;
        return {static_cast<std::uint32_t>(kHeaderSize + h.len), Verdict::Keep};
    };
    auto take = [&](std::uint32_t bit) {
        const bool had = (pending_ & bit) != 0;
        pending_ &= ~bit;
        return had;
    };

    if (take(kPendingRequest)) {
        return send(header_for_guest(guest_cid, Op::Request));
    }
    if (take(kPendingResponse)) {
        return send(header_for_guest(guest_cid, Op::Response));
    }
    if (can_read_host() && host_readable_ && peer_credit() > 0) {
        ChainWriter writer(chain);
        writer.skip(kHeaderSize);
        const std::size_t room = std::min<std::uint64_t>({writer.available(), kMaxPacketPayload, peer_credit()});
        if (room > 0) {
            scratch.clear();
            writer.take_iovecs(room, scratch);
            ssize_t n = 0;
            do {
                n = ::readv(socket_.get(), scratch.data(), static_cast<int>(scratch.size()));
            } while (n < 0 && errno == EINTR);
            if (n > 0) {
                PacketHeader h = header_for_guest(guest_cid, Op::Rw);
                h.len = static_cast<std::uint32_t>(n);
                tx_cnt_ += h.len;
                pending_ &= ~kPendingCreditUpdate;  // this packet carries fwd_cnt
                if (peer_credit() == 0 && !credit_requested_) {
                    // Out of credit with more to send: ask (§5.10.6.3).
                    credit_requested_ = true;
                    pending_ |= kPendingCreditRequest;
                }
                return send(h);
            }
            if (n == 0) {
                host_eof_ = true;
                pending_ |= kPendingShutdown;
            } else if (!would_block(errno)) {
                return {0, Verdict::Reset};
            }
            host_readable_ = false;
        }
    }
    if (take(kPendingCreditUpdate)) {
        return send(header_for_guest(guest_cid, Op::CreditUpdate));
    }
    if (take(kPendingCreditRequest)) {
        return send(header_for_guest(guest_cid, Op::CreditRequest));
    }
    if (take(kPendingShutdown)) {
        // EOF on the host socket: no more data from the host. After EPOLLHUP
        // the host cannot receive either.
        PacketHeader h = header_for_guest(guest_cid, Op::Shutdown);
        h.flags = kShutdownSend | (host_hup_ ? kShutdownRcv : 0);
        shutdown_sent_ = true;
        RxPacket packet = send(h);
        check_done();
        return packet;
    }
    if (take(kPendingRst)) {
        finished_ = true;
        return send(header_for_guest(guest_cid, Op::Rst));
    }
    return {};
}

}  // namespace sbx::virtio::vsock
