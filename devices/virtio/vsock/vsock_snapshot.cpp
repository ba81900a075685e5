// virtio-vsock across a snapshot: the saved state, and the TRANSPORT_RESET
// a restored device posts (§5.10.6.7), with host connections held until the
// driver has taken it.
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/log.hpp"
#include "devices/virtio/vsock/vsock.hpp"

namespace sbx::virtio {

void Vsock::save_state(ByteWriter& out) const {
    out.u16(kStateVersion);
    out.u64(config_.guest_cid);
}

Result<void> Vsock::restore_state(ByteReader& in) {
    const std::uint16_t version = in.u16();
    const std::uint64_t cid = in.u64();
    if (auto r = in.finish("virtio-vsock state"); !r) {
        return r;
    }
    if (version != kStateVersion) {
        return make_error("virtio-vsock state version {} is not {}", version, kStateVersion);
    }
    if (cid < vsock::kFirstGuestCid || cid >= 0xffffffffULL) {
        return make_error("the snapshot's guest cid {} is not a guest cid", cid);
    }
    if (cid != config_.guest_cid) {
        log::info("{}: restored with cid {}; the snapshot's guest had {}", name(), config_.guest_cid, cid);
    }
    return ok();
}

Result<void> Vsock::after_restore() {
    transport_reset_pending_ = true;
    return post_transport_reset();
}

// struct virtio_vsock_event { le32 id; } with id VIRTIO_VSOCK_EVENT_TRANSPORT_RESET (0) (§5.10.6.7).
Result<void> Vsock::post_transport_reset() {
    Queue& events = context_.queues[vsock::kEventQueue];
    if (!transport_reset_pending_ || !events.active()) {
        return ok();
    }
    while (true) {
        auto popped = events.pop(event_chain_);
        if (!popped) {
            return popped.error();
        }
        if (*popped) {
            break;
        }
        // No event buffer yet: the driver's next event-queue notification
        // brings one (Linux refills them as it consumes them).
        auto more = events.enable_notification();
        if (!more || !*more) {
            return more ? ok() : Result<void>(more.error());
        }
    }
    constexpr std::array<std::uint8_t, 4> kTransportReset{0, 0, 0, 0};
    ChainWriter writer(event_chain_);
    if (auto r = writer.write_exact(kTransportReset); !r) {
        return make_error("event chain {} has {} writable bytes, a {}-byte event needs more",
                          event_chain_.head(), event_chain_.writable_bytes(), kTransportReset.size());
    }
    if (auto r = events.add_used(event_chain_.head(), kTransportReset.size()); !r) {
        return r;
    }
    transport_reset_pending_ = false;
    if (events.needs_notification()) {
        context_.interrupt->signal_used();
    }
    return await_reset_taken();
}

// A REQUEST the driver handles before the TRANSPORT_RESET would be reset
// with the streams of the old VM, silently (Linux's virtio_vsock_reset_sock
// sends nothing): the host would hold a connection the guest has dropped.
// Linux queues the rx work ahead of the event work when one interrupt
// signals both, so new host connections wait until the driver has taken
// the event: it hands the buffer back (the event queue's avail index moves,
// virtio_vsock_event_fill_one) after virtio_vsock_event_handle. Checked on
// event-queue notifications and every 10 ms, for at most kResetAckLimit.
Result<void> Vsock::await_reset_taken() {
    reset_unacked_ = true;
    reset_avail_idx_ = context_.queues[vsock::kEventQueue].avail_idx();
    reset_posted_at_ = std::chrono::steady_clock::now();
    if (!ack_timer_) {
        // Without a timer host connections go ahead at once, as before.
        UniqueFd timer(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
        if (!timer) {
            log::warn("{}: timerfd_create: {}", name(), std::strerror(errno));
            reset_unacked_ = false;
            return ok();
        }
        const int fd = timer.get();
        ack_timer_ = std::move(timer);
        if (auto r = context_.events->add(fd, EPOLLIN, [this](std::uint32_t) { return check_reset_taken(); }); !r) {
            log::warn("{}: {}", name(), r.error().to_string());
            ack_timer_ = UniqueFd();
            reset_unacked_ = false;
            return ok();
        }
    }
    constexpr itimerspec kEvery10ms{{0, 10'000'000}, {0, 10'000'000}};
    ::timerfd_settime(ack_timer_.get(), 0, &kEvery10ms, nullptr);
    return ok();
}

Result<void> Vsock::check_reset_taken() {
    if (ack_timer_) {
        std::uint64_t expirations = 0;
        [[maybe_unused]] auto n = ::read(ack_timer_.get(), &expirations, sizeof expirations);
    }
    if (!reset_unacked_) {
        return ok();
    }
    const bool taken = context_.queues[vsock::kEventQueue].avail_idx() != reset_avail_idx_;
    if (!taken && std::chrono::steady_clock::now() - reset_posted_at_ < kResetAckLimit) {
        return ok();
    }
    if (!taken) {
        log::warn("{}: the driver has not taken the transport reset after {} s; host connections go ahead", name(),
                  kResetAckLimit.count());
    }
    reset_unacked_ = false;
    constexpr itimerspec kStop{};
    ::timerfd_settime(ack_timer_.get(), 0, &kStop, nullptr);
    // The held CONNECT lines, oldest first (on_handshake may drop entries).
    std::vector<int> held;
    for (const auto& h : handshakes_) {
        held.push_back(h.socket.get());
    }
    for (int fd : held) {
        if (auto r = on_handshake(fd, 0); !r) {
            return r;
        }
    }
    signal_used();
    return ok();
}

}  // namespace sbx::virtio
