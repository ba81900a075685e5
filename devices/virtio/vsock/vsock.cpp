#include "devices/virtio/vsock/vsock.hpp"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/log.hpp"
#include "base/unix_socket.hpp"
#include "devices/virtio/vsock/vsock_host.hpp"

namespace sbx::virtio {

using vsock::Connection;
using vsock::kHeaderSize;
using vsock::Op;
using vsock::PacketHeader;

namespace {

// Host-side ports of host-initiated connections, as Firecracker's muxer:
// [2^30, 2^31), away from the well-known and ephemeral ranges.
constexpr std::uint32_t kFirstLocalPort = 1U << 30;
constexpr std::uint32_t kLocalPortEnd = 1U << 31;
// Connections accepted per listener event, so one burst cannot starve the
// rest of the device thread.
constexpr int kAcceptsPerEvent = 32;

}  // namespace

Result<std::unique_ptr<Vsock>> Vsock::open(const VsockConfig& config) {
    // §5.10.4: 0-2 are reserved, and the upper 32 bits are zero; 2^32-1 is
    // VMADDR_CID_ANY.
    if (config.guest_cid < vsock::kFirstGuestCid || config.guest_cid >= 0xffffffffULL) {
        return make_error("vsock guest cid {} is not in 3..4294967294", config.guest_cid);
    }
    auto listener = listen_unix(config.uds_path, Blocking::No);
    if (!listener) {
        return listener.error();
    }
    return std::unique_ptr<Vsock>(new Vsock(config, std::move(*listener)));
}

Vsock::Vsock(VsockConfig config, UniqueFd listener)
    : config_(std::move(config)), listener_(std::move(listener)), next_local_port_(kFirstLocalPort) {
    for (std::size_t i = 0; i < config_space_.size(); ++i) {
        config_space_[i] = static_cast<std::uint8_t>(config_.guest_cid >> (8 * i));  // le64 guest_cid
    }
}

Vsock::~Vsock() {
    connections_.clear();
    handshakes_.clear();
    listener_.reset();
    ::unlink(config_.uds_path.c_str());
}

std::string Vsock::name() const { return fmt::format("virtio-vsock cid {}", config_.guest_cid); }

void Vsock::read_config(std::uint64_t offset, std::span<std::uint8_t> data) const {
    read_config_bytes(config_space_, offset, data);
}

Result<void> Vsock::activate(const ActiveContext& context) {
    context_ = context;
    active_ = true;
    return context_.events->add(listener_.get(), EPOLLIN, [this](std::uint32_t events) { return on_listener(events); });
}

void Vsock::reset() {
    // The transport has already dropped every event registration.
    connections_.clear();
    handshakes_.clear();
    rx_ready_.clear();
    resets_.clear();
    context_ = {};
    active_ = false;
    listener_paused_ = false;
    rx_used_ = tx_used_ = false;
    transport_reset_pending_ = false;
    reset_unacked_ = false;
    ack_timer_ = UniqueFd();
}

VsockStats Vsock::stats() const {
    VsockStats s;
    s.connections = connections_.size();
    s.pending_handshakes = handshakes_.size();
    s.queued_resets = resets_.size();
    for (const auto& [key, c] : connections_) {
        s.buffered_to_host += c.buffered_to_host();
    }
    return s;
}

Result<void> Vsock::process_queue(std::size_t index) {
    Result<void> r = ok();
    if (index == vsock::kTxQueue) {
        r = process_tx();
    } else if (index == vsock::kRxQueue) {
        r = process_rx();
    } else if (index == vsock::kEventQueue) {
        r = post_transport_reset();  // the event queue's buffers are kept for this (§5.10.6.7)
        if (r) {
            r = check_reset_taken();
        }
    }
    signal_used();
    return r;
}

void Vsock::signal_used() {
    bool notify = false;
    if (std::exchange(rx_used_, false)) {
        notify = context_.queues[vsock::kRxQueue].needs_notification() || notify;
    }
    if (std::exchange(tx_used_, false)) {
        notify = context_.queues[vsock::kTxQueue].needs_notification() || notify;
    }
    if (notify) {
        context_.interrupt->signal_used();
    }
}

// ---- Guest → host ----

Result<void> Vsock::process_tx() {
    Queue& tx = context_.queues[vsock::kTxQueue];
    while (true) {
        tx.disable_notification();
        while (true) {
            auto popped = tx.pop(tx_chain_);
            if (!popped) {
                return popped.error();
            }
            if (!*popped) {
                break;
            }
            if (auto r = handle_tx_chain(); !r) {
                return r.error();
            }
            if (auto r = tx.add_used(tx_chain_.head(), 0); !r) {
                return r.error();
            }
            tx_used_ = true;
        }
        auto more = tx.enable_notification();
        if (!more) {
            return more.error();
        }
        if (!*more) {
            break;
        }
    }
    return process_rx();
}

Result<void> Vsock::handle_tx_chain() {
    ChainReader reader(tx_chain_);
    // A malformed chain is the driver's fault (see vsock.hpp).
    auto wire = reader.read_obj<vsock::WireHeader>();
    if (!wire) {
        return make_error("TX chain of {} readable bytes has no {}-byte packet header", tx_chain_.readable_bytes(),
                          kHeaderSize);
    }
    const PacketHeader header = vsock::decode_header(*wire);
    if (header.len > reader.remaining()) {
        return make_error("TX packet announces {} payload bytes, its chain holds {}", header.len, reader.remaining());
    }
    // A well-formed packet with a bad header is the peer's problem. One not
    // from this guest, or not to the host, is dropped as vhost does.
    if (header.src_cid != config_.guest_cid || header.dst_cid != vsock::kHostCid) {
        return ok();
    }
    if (header.type != vsock::kTypeStream || header.len > vsock::kMaxPacketPayload) {
        if (header.operation() != Op::Rst) {
            const Key key = key_of(header.dst_port, header.src_port);
            if (connections_.contains(key)) {
                apply(key, Connection::Verdict::Reset);
            } else {
                queue_reset_reply(header);
            }
        }
        return ok();
    }
    handle_guest_packet(header, reader);
    return ok();
}

void Vsock::handle_guest_packet(const PacketHeader& header, ChainReader& payload) {
    const Key key = key_of(header.dst_port, header.src_port);
    auto it = connections_.find(key);
    if (it != connections_.end() && it->second.closing() && header.operation() == Op::Request) {
        // The guest reused the port of a stream whose final RST it has not
        // been given yet: that stream is gone on its side too.
        forget(key);
        it = connections_.end();
    }
    if (it == connections_.end()) {
        if (header.operation() == Op::Request) {
            connect_to_host(header);
        } else if (header.operation() != Op::Rst) {
            queue_reset_reply(header);  // §5.10.6.4: no such connection
        }
        return;
    }
    apply(key, it->second.on_guest_packet(header, payload, scratch_));
}

void Vsock::connect_to_host(const PacketHeader& request) {
    if (connections_.size() >= config_.max_connections) {
        queue_reset_reply(request);
        return;
    }
    auto socket = connect_unix(config_.uds_path + "_" + std::to_string(request.dst_port), Blocking::No);
    if (!socket) {
        queue_reset_reply(request);  // nobody listens there
        return;
    }
    const Key key = key_of(request.dst_port, request.src_port);
    auto [it, inserted] = connections_.emplace(key, Connection::from_guest(std::move(*socket), request));
    if (!watch(key, it->second)) {
        apply(key, Connection::Verdict::Reset);
        return;
    }
    refresh(key, it->second);
}

// ---- Host → guest ----

void Vsock::queue_reset(std::uint32_t host_port, std::uint32_t guest_port) {
    if (resets_.size() >= kMaxQueuedResets) {
        return;  // the guest gives no RX buffers; its side times out
    }
    PacketHeader h;
    h.src_cid = vsock::kHostCid;
    h.dst_cid = config_.guest_cid;
    h.src_port = host_port;
    h.dst_port = guest_port;
    h.type = vsock::kTypeStream;
    h.op = static_cast<std::uint16_t>(Op::Rst);
    resets_.push_back(h);
}

void Vsock::queue_reset_reply(const PacketHeader& to) { queue_reset(to.dst_port, to.src_port); }

Result<void> Vsock::process_rx() {
    if (!active_ || !context_.queues[vsock::kRxQueue].active()) {
        return ok();
    }
    Queue& rx = context_.queues[vsock::kRxQueue];
    while (!resets_.empty() || !rx_ready_.empty()) {
        auto popped = rx.pop(rx_chain_);
        if (!popped) {
            return popped.error();
        }
        if (!*popped) {
            // Out of RX buffers: ask to be notified when the driver adds some.
            auto more = rx.enable_notification();
            if (!more) {
                return more.error();
            }
            if (*more) {
                continue;
            }
            break;
        }
        if (rx_chain_.writable_bytes() < kHeaderSize) {
            return make_error("RX chain of {} writable bytes cannot hold a {}-byte packet header",
                              rx_chain_.writable_bytes(), kHeaderSize);
        }
        std::uint32_t written = 0;
        if (!fill_rx_chain(written)) {
            rx.undo_pop();
            break;
        }
        if (auto r = rx.add_used(rx_chain_.head(), written); !r) {
            return r.error();
        }
        rx_used_ = true;
    }
    return ok();
}

bool Vsock::fill_rx_chain(std::uint32_t& written) {
    // Queued RSTs first, then the connections in turn, one packet each.
    std::size_t tries = rx_ready_.size();
    while (true) {
        if (!resets_.empty()) {
            ChainWriter writer(rx_chain_);
            (void)writer.write_obj(vsock::encode_header(resets_.front()));  // room checked by the caller
            resets_.pop_front();
            written = static_cast<std::uint32_t>(kHeaderSize);
            return true;
        }
        if (tries == 0 || rx_ready_.empty()) {
            return false;
        }
        --tries;
        const Key key = rx_ready_.front();
        rx_ready_.pop_front();
        auto it = connections_.find(key);
        if (it == connections_.end()) {
            continue;
        }
        Connection& c = it->second;
        c.queued_for_rx = false;
        auto packet = c.fill_rx(rx_chain_, config_.guest_cid, scratch_);
        apply(key, packet.verdict);  // re-queues it at the back if it has more
        if (packet.written > 0) {
            written = packet.written;
            return true;
        }
    }
}

// ---- Host sockets ----

bool Vsock::watch(Key key, Connection& c) {
    const std::uint32_t events = c.interest();
    auto r = context_.events->add(c.fd(), events, [this, key](std::uint32_t ev) { return on_host_socket(key, ev); });
    if (!r) {
        log::warn("{}: watching a host socket: {}", name(), r.error().to_string());
        return false;
    }
    c.watching = true;
    c.watched_events = events;
    return true;
}

void Vsock::unwatch(Connection& c) {
    if (c.watching) {
        context_.events->remove(c.fd());
        c.watching = false;
    }
}

void Vsock::apply(Key key, Connection::Verdict verdict) {
    auto it = connections_.find(key);
    if (it == connections_.end()) {
        return;
    }
    switch (verdict) {
    case Connection::Verdict::Keep: refresh(key, it->second); return;
    case Connection::Verdict::Reset: queue_reset(it->second.host_port(), it->second.guest_port()); break;
    case Connection::Verdict::Forget: break;
    }
    forget(key);
}

void Vsock::refresh(Key key, Connection& c) {
    if (c.finished()) {
        forget(key);
        return;
    }
    if (c.closing() && c.fd() >= 0) {
        unwatch(c);
        c.close_host_socket();
        resume_listener();
    }
    if (c.watching && !c.wants_watch()) {
        unwatch(c);
    } else if (c.watching && c.interest() != c.watched_events) {
        if (auto r = context_.events->modify(c.fd(), c.interest()); !r) {
            log::warn("{}: watching a host socket: {}", name(), r.error().to_string());
            apply(key, Connection::Verdict::Reset);
            return;
        }
        c.watched_events = c.interest();
    }
    if (c.wants_rx() && !c.queued_for_rx) {
        rx_ready_.push_back(key);
        c.queued_for_rx = true;
    }
}

void Vsock::forget(Key key) {
    auto it = connections_.find(key);
    if (it == connections_.end()) {
        return;
    }
    unwatch(it->second);
    if (it->second.queued_for_rx) {
        rx_ready_.erase(std::find(rx_ready_.begin(), rx_ready_.end(), key));
    }
    connections_.erase(it);
    resume_listener();
}

std::uint32_t Vsock::allocate_local_port(std::uint32_t guest_port) {
    while (true) {
        const std::uint32_t port = next_local_port_++;
        if (next_local_port_ == kLocalPortEnd) {
            next_local_port_ = kFirstLocalPort;
        }
        if (!connections_.contains(key_of(port, guest_port))) {
            return port;
        }
    }
}

Result<void> Vsock::on_listener(std::uint32_t /*events*/) {
    for (int i = 0; i < kAcceptsPerEvent; ++i) {
        UniqueFd socket(::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
        if (!socket) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                // Out of fds: stop listening until a connection closes
                // rather than spin on a listener that stays readable.
                log::warn("{}: accepting on {}: {}", name(), config_.uds_path, std::strerror(errno));
                if (context_.events->modify(listener_.get(), 0)) {
                    listener_paused_ = true;
                }
            }
            break;  // EAGAIN, or the client already gave up
        }
        if (handshakes_.size() >= config_.max_pending_handshakes) {
            drop_handshake(handshakes_.front().socket.get());  // the oldest idle client
        }
        const int fd = socket.get();
        handshakes_.push_back(Handshake{std::move(socket)});
        // Edge-triggered: the line is peeked, so unread bytes stay readable.
        auto r = context_.events->add(fd, EPOLLIN | EPOLLRDHUP | EPOLLET,
                                      [this, fd](std::uint32_t ev) { return on_handshake(fd, ev); });
        if (!r) {
            handshakes_.pop_back();
        }
    }
    return ok();
}

void Vsock::resume_listener() {
    if (listener_paused_ && context_.events->modify(listener_.get(), EPOLLIN)) {
        listener_paused_ = false;
    }
}

void Vsock::drop_handshake(int fd) {
    auto it = std::find_if(handshakes_.begin(), handshakes_.end(),
                           [fd](const Handshake& h) { return h.socket.get() == fd; });
    if (it != handshakes_.end()) {
        context_.events->remove(fd);
        handshakes_.erase(it);
        resume_listener();
    }
}

Result<void> Vsock::on_handshake(int fd, std::uint32_t events) {
    auto it = std::find_if(handshakes_.begin(), handshakes_.end(),
                           [fd](const Handshake& h) { return h.socket.get() == fd; });
    if (it == handshakes_.end()) {
        return ok();
    }
    if (transport_reset_pending_ || reset_unacked_) {
        return ok();  // its line stays unread until the driver has taken the reset
    }
    const vsock::ConnectLine line = vsock::read_connect_line(fd);
    using Status = vsock::ConnectLine::Status;
    if (line.status == Status::Refused ||
        (line.status == Status::Incomplete && (events & (EPOLLHUP | EPOLLRDHUP | EPOLLERR)) != 0)) {
        drop_handshake(fd);
        return ok();
    }
    if (line.status == Status::Incomplete) {
        return ok();
    }
    UniqueFd socket = std::move(it->socket);
    context_.events->remove(fd);
    handshakes_.erase(it);
    if (connections_.size() >= config_.max_connections) {
        resume_listener();
        return ok();  // closing the socket tells the client
    }
    const std::uint32_t local_port = allocate_local_port(line.port);
    const Key key = key_of(local_port, line.port);
    auto [conn, inserted] = connections_.emplace(key, Connection::from_host(std::move(socket), local_port, line.port));
    if (!watch(key, conn->second)) {
        connections_.erase(conn);
        return ok();
    }
    refresh(key, conn->second);  // its REQUEST goes to the guest
    auto r = process_rx();
    signal_used();
    return r;
}

Result<void> Vsock::on_host_socket(Key key, std::uint32_t events) {
    auto it = connections_.find(key);
    if (it == connections_.end()) {
        return ok();
    }
    apply(key, it->second.on_host_event(events));
    auto r = process_rx();
    signal_used();
    return r;
}

}  // namespace sbx::virtio
