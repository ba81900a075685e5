#include "devices/virtio/net/net.hpp"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "base/log.hpp"
#include "devices/virtio/queue/chain_io.hpp"

namespace sbx::virtio {
namespace {

constexpr std::uint16_t kStatusLinkUp = 1;  // VIRTIO_NET_S_LINK_UP (§5.1.4)
constexpr std::size_t kMaxIovecs = IOV_MAX;
// Frames left in the backend from before activation are discarded, at
// most this many (a tap queues txqueuelen, 1000 by default).
constexpr std::size_t kMaxDrainedFrames = 4096;

// What the tap may hand the guest is what the guest accepted (§5.1.3.1:
// partial checksums with GUEST_CSUM, TSO only on top of it).
unsigned tap_offloads_for(std::uint64_t features) {
    unsigned offloads = 0;
    if ((features & net_feature::kGuestCsum) != 0) {
        offloads |= kTapOffloadCsum;
        if ((features & net_feature::kGuestTso4) != 0) {
            offloads |= kTapOffloadTso4;
        }
        if ((features & net_feature::kGuestTso6) != 0) {
            offloads |= kTapOffloadTso6;
        }
        if ((features & net_feature::kGuestEcn) != 0 &&
            (offloads & (kTapOffloadTso4 | kTapOffloadTso6)) != 0) {
            offloads |= kTapOffloadTsoEcn;
        }
    }
    return offloads;
}

Result<void> make_nonblocking(int fd) {
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
        return sys_error("cannot make the backend fd non-blocking");
    }
    return ok();
}

}  // namespace

Net::Net(UniqueFd fd, Backend backend, std::string name, MacAddress mac, EventFd tx_resume)
    : fd_(std::move(fd)),
      backend_(backend),
      name_(std::move(name)),
      mac_(mac),
      tx_resume_(std::move(tx_resume)),
      rx_chains_(kQueueSize),
      rx_covered_(kQueueSize) {
    // struct virtio_net_config (§5.1.4): mac, status, max_virtqueue_pairs.
    std::copy(mac_.begin(), mac_.end(), config_.begin());
    config_[6] = kStatusLinkUp;
    config_[8] = 1;
    rx_iov_.reserve(kMaxIovecs);
    tx_iov_.reserve(kMaxIovecs);
}

Result<std::unique_ptr<Net>> Net::open(const NetConfig& config) {
    auto fd = open_tap(config.tap);
    if (!fd) {
        return fd.error();
    }
    return create(std::move(*fd), Backend::Tap, config);
}

Result<std::unique_ptr<Net>> Net::from_fd(UniqueFd fd, const NetConfig& config) {
    if (virtio::is_tap(fd.get())) {
        if (auto r = configure_tap(fd.get(), config.tap); !r) {
            return r.error();
        }
        if (auto r = make_nonblocking(fd.get()); !r) {
            return r.error();
        }
        return create(std::move(fd), Backend::Tap, config);
    }
    int type = 0;
    socklen_t len = sizeof type;
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_TYPE, &type, &len) != 0 ||
        (type != SOCK_SEQPACKET && type != SOCK_DGRAM)) {
        return make_error("virtio-net {}: the backend is neither a tap nor a datagram or seqpacket socket",
                          config.tap);
    }
    if (auto r = make_nonblocking(fd.get()); !r) {
        return r.error();
    }
    return create(std::move(fd), Backend::Socket, config);
}

Result<std::unique_ptr<Net>> Net::create(UniqueFd fd, Backend backend, const NetConfig& config) {
    MacAddress mac{};
    if (config.mac) {
        mac = *config.mac;
    } else {
        auto random = random_local_mac();
        if (!random) {
            return random.error();
        }
        mac = *random;
    }
    auto tx_resume = EventFd::create();
    if (!tx_resume) {
        return tx_resume.error();
    }
    std::string name =
        config.tap.empty() ? fmt::format("virtio-net fd {}", fd.get()) : "virtio-net " + config.tap;
    return std::unique_ptr<Net>(new Net(std::move(fd), backend, std::move(name), mac, std::move(*tx_resume)));
}

std::uint64_t Net::features() const {
    using namespace net_feature;
    return kMac | kStatus | kMrgRxbuf | kCsum | kHostTso4 | kHostTso6 | kHostEcn | kGuestCsum | kGuestTso4 |
           kGuestTso6 | kGuestEcn;
}

void Net::read_config(std::uint64_t offset, std::span<std::uint8_t> data) const {
    read_config_bytes(config_, offset, data);
}

Result<void> Net::activate(const ActiveContext& context) {
    context_ = context;
    mergeable_ = (context.features & net_feature::kMrgRxbuf) != 0;
    const unsigned offloads = tap_offloads_for(context.features);
    const bool tso = (offloads & (kTapOffloadTso4 | kTapOffloadTso6)) != 0;
    rx_frame_limit_ = tso ? kMaxFrameWithTso : kMaxFrame;
    if (backend_ == Backend::Tap) {
        if (auto r = set_tap_offloads(fd_.get(), offloads); !r) {
            return r.error().context(name_);
        }
    }
    // Frames that reached the backend while no driver was running were
    // meant for none (and may carry offloads this driver refused).
    drain_backend();
    [[maybe_unused]] auto stale = tx_resume_.consume();
    rx_waiting_ = tx_blocked_ = false;
    backend_events_ = context_.queues[kRxQueue].active() ? std::uint32_t{EPOLLIN} : 0;
    if (auto r = context_.events->add(fd_.get(), backend_events_,
                                      [this](std::uint32_t events) { return on_backend_event(events); });
        !r) {
        return r.error().context(name_);
    }
    backend_watched_ = true;
    return context_.events->add(tx_resume_.fd(), EPOLLIN, [this](std::uint32_t) -> Result<void> {
        [[maybe_unused]] auto n = tx_resume_.consume();
        return process_tx();
    });
}

void Net::reset() {
    // All backend I/O is synchronous on the device thread, so nothing
    // touches guest memory once this returns; the held chains are dropped.
    context_ = {};
    rx_first_ = rx_held_ = 0;
    rx_capacity_ = 0;
    rx_waiting_ = tx_blocked_ = false;
    backend_watched_ = false;
    backend_events_ = 0;
    if (backend_ == Backend::Tap) {
        if (auto r = set_tap_offloads(fd_.get(), 0); !r) {
            log::warn("{}: {}", name_, r.error().to_string());
        }
    }
}

Result<void> Net::process_queue(std::size_t index) {
    if (index == kRxQueue) {
        // §5.1.6.3: the driver posted receive buffers.
        if (rx_waiting_) {
            rx_waiting_ = false;
            context_.queues[kRxQueue].disable_notification();
            if (auto r = update_backend_events(); !r) {
                return r;
            }
        }
        return process_rx();
    }
    if (index == kTxQueue) {
        return process_tx();
    }
    return ok();
}

Result<void> Net::on_backend_event(std::uint32_t events) {
    if ((events & EPOLLOUT) != 0 && tx_blocked_) {
        tx_blocked_ = false;
        if (auto r = update_backend_events(); !r) {
            return r;
        }
        if (auto r = process_tx(); !r) {
            return r;
        }
    }
    if ((events & EPOLLIN) != 0) {
        if (auto r = process_rx(); !r) {
            return r;
        }
    }
    if ((events & (EPOLLHUP | EPOLLERR)) != 0 && backend_watched_) {
        // Level-triggered and not maskable: stop watching or spin.
        stop_watching_backend(make_error("the backend hung up or failed (events {:#x})", events));
        if (tx_blocked_) {
            tx_blocked_ = false;  // no EPOLLOUT will come: the frames are dropped and returned instead
            return process_tx();
        }
    }
    return ok();
}

Result<void> Net::update_backend_events() {
    if (!backend_watched_) {
        return ok();
    }
    std::uint32_t events = 0;
    if (!rx_waiting_ && context_.queues[kRxQueue].active()) {
        events |= std::uint32_t{EPOLLIN};
    }
    if (tx_blocked_) {
        events |= std::uint32_t{EPOLLOUT};
    }
    if (events == backend_events_) {
        return ok();
    }
    backend_events_ = events;
    return context_.events->modify(fd_.get(), events);
}

void Net::stop_watching_backend(const Error& why) {
    log::warn("{}: {}; no more frames are received", name_, why.to_string());
    context_.events->remove(fd_.get());
    backend_watched_ = false;
}

void Net::drain_backend() const {
    // A read shorter than the frame discards the rest (tap and datagram
    // sockets alike).
    std::array<std::uint8_t, kNetHeaderSize> scratch{};
    for (std::size_t i = 0; i < kMaxDrainedFrames; ++i) {
        if (::read(fd_.get(), scratch.data(), scratch.size()) <= 0) {
            return;
        }
    }
}

ssize_t Net::write_frame() {
    if (backend_ == Backend::Socket) {
        // MSG_NOSIGNAL: a closed peer is an error here, not SIGPIPE.
        msghdr message{};
        message.msg_iov = tx_iov_.data();
        message.msg_iovlen = tx_iov_.size();
        return ::sendmsg(fd_.get(), &message, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    return ::writev(fd_.get(), tx_iov_.data(), static_cast<int>(tx_iov_.size()));
}

// §5.1.6.2: each chain is a virtio_net_hdr_v1 and a frame, which is what
// the tap reads with IFF_VNET_HDR, so the chain's buffers go out as they are.
Result<void> Net::process_tx() {
    Queue& queue = context_.queues[kTxQueue];
    if (tx_blocked_ || !queue.active()) {
        return ok();
    }
    bool returned = false;
    std::size_t frames = 0;
    queue.disable_notification();
    while (true) {
        if (frames == kFramesPerEvent) {
            if (auto r = tx_resume_.signal(); !r) {
                return r;
            }
            break;
        }
        auto popped = queue.pop_or_enable_notification(tx_chain_);
        if (!popped) {
            return popped.error();
        }
        if (!*popped) {
            break;
        }
        if (tx_chain_.readable_bytes() < kNetHeaderSize) {
            return make_error(
                "transmit chain {} has {} readable bytes, less than the {}-byte header (§5.1.6.2)",
                tx_chain_.head(), tx_chain_.readable_bytes(), kNetHeaderSize);
        }
        tx_iov_.clear();
        ChainReader(tx_chain_).take_iovecs(tx_chain_.readable_bytes(), tx_iov_);
        const ssize_t written = write_frame();
        const int err = errno;
        // EAGAIN on a backend no longer watched would wait forever: a drop.
        if (written < 0 && (err == EINTR || (err == EAGAIN && backend_watched_))) {
            queue.undo_pop();
            if (err == EINTR) {
                continue;
            }
            tx_blocked_ = true;
            ++counters_.tx_waits;
            if (auto r = update_backend_events(); !r) {
                return r;
            }
            break;
        }
        if (written < 0) {
            ++counters_.tx_dropped;
            if (!logged_tx_drop_) {
                logged_tx_drop_ = true;
                log::warn("{}: the backend refused a {}-byte frame ({}); further drops are only counted",
                          name_, tx_chain_.readable_bytes() - kNetHeaderSize, std::strerror(err));
            }
        } else {
            ++counters_.tx_frames;
            counters_.tx_bytes +=
                static_cast<std::uint64_t>(written) - std::min<std::uint64_t>(written, kNetHeaderSize);
        }
        // The device writes nothing into a transmit chain.
        if (auto r = queue.add_used(tx_chain_.head(), 0); !r) {
            return r;
        }
        returned = true;
        ++frames;
    }
    if (returned && queue.needs_notification()) {
        context_.interrupt->signal_used();
    }
    return ok();
}

Result<bool> Net::hold_rx_buffers(Queue& queue) {
    while (mergeable_ ? rx_capacity_ < rx_frame_limit_ : rx_held_ == 0) {
        if (rx_held_ >= queue.size()) {
            return true;  // every buffer the guest can post is here already
        }
        DescriptorChain& chain = rx_slot(rx_held_);
        auto popped = queue.pop(chain);
        if (!popped) {
            return popped.error();
        }
        if (!*popped) {
            return false;
        }
        // §5.1.6.3.1: every receive buffer holds at least the header.
        if (chain.writable_bytes() < kNetHeaderSize) {
            return make_error(
                "receive chain {} has {} writable bytes, less than the {}-byte header (§5.1.6.3)",
                chain.head(), chain.writable_bytes(), kNetHeaderSize);
        }
        rx_capacity_ += chain.writable_bytes();
        ++rx_held_;
    }
    return true;
}

std::size_t Net::map_rx_buffers() {
    rx_iov_.clear();
    std::size_t covered = 0;
    const std::size_t chains = mergeable_ ? rx_held_ : std::min<std::size_t>(rx_held_, 1);
    for (std::size_t i = 0; i < chains && covered < rx_frame_limit_; ++i) {
        const std::size_t slot = (rx_first_ + i) % kQueueSize;
        std::size_t mapped = 0;
        for (const Segment& segment : rx_chains_[slot].writable()) {
            if (covered + mapped >= rx_frame_limit_ || rx_iov_.size() + 1 >= kMaxIovecs) {
                break;
            }
            const std::size_t len = std::min(segment.bytes.size(), rx_frame_limit_ - covered - mapped);
            rx_iov_.push_back(iovec{segment.bytes.data(), len});
            mapped += len;
        }
        rx_covered_[slot] = static_cast<std::uint32_t>(mapped);
        covered += mapped;
    }
    rx_iov_.push_back(iovec{&rx_overflow_byte_, 1});
    return covered;
}

Result<void> Net::deliver_rx_frame(Queue& queue, std::size_t length) {
    std::size_t chains = 0;
    for (std::size_t left = length; left > 0; ++chains) {
        left -= std::min<std::size_t>(left, rx_covered_[(rx_first_ + chains) % kQueueSize]);
    }
    // §5.1.6.4: num_buffers in the first chain's header; the tap leaves it
    // alone. 1 without mergeable buffers.
    const std::array<std::uint8_t, 2> num_buffers{static_cast<std::uint8_t>(chains),
                                                  static_cast<std::uint8_t>(chains >> 8)};
    ChainWriter header(rx_slot(0));
    header.skip(kNetHeaderNumBuffersOffset);
    if (auto r = header.write_exact(num_buffers); !r) {
        return r;
    }
    std::size_t left = length;
    for (std::size_t i = 0; i < chains; ++i) {
        const DescriptorChain& chain = rx_slot(0);
        const auto len = std::min<std::size_t>(left, rx_covered_[rx_first_]);
        if (auto r = queue.add_used(chain.head(), static_cast<std::uint32_t>(len)); !r) {
            return r;
        }
        left -= len;
        rx_capacity_ -= chain.writable_bytes();
        rx_first_ = (rx_first_ + 1) % kQueueSize;
        --rx_held_;
    }
    ++counters_.rx_frames;
    counters_.rx_bytes += length - kNetHeaderSize;
    return ok();
}

Result<void> Net::process_rx() {
    Queue& queue = context_.queues[kRxQueue];
    if (rx_waiting_ || !backend_watched_ || !queue.active()) {
        return ok();
    }
    bool returned = false;
    for (std::size_t frames = 0; frames < kFramesPerEvent;) {
        auto ready = hold_rx_buffers(queue);
        if (!ready) {
            return ready.error();
        }
        if (!*ready) {
            // Wait for the driver's next receive notification (§2.7.10).
            auto more = queue.enable_notification();
            if (!more) {
                return more.error();
            }
            if (*more) {
                queue.disable_notification();
                continue;
            }
            rx_waiting_ = true;
            ++counters_.rx_waits;
            if (auto r = update_backend_events(); !r) {
                return r;
            }
            break;
        }
        const std::size_t capacity = map_rx_buffers();
        const ssize_t n = ::readv(fd_.get(), rx_iov_.data(), static_cast<int>(rx_iov_.size()));
        if (n < 0) {
            if (errno == EAGAIN) {
                break;
            }
            if (errno == EINTR) {
                continue;
            }
            stop_watching_backend(sys_error("reading a frame"));
            break;
        }
        if (n == 0) {
            stop_watching_backend(make_error("the backend was closed"));
            break;
        }
        ++frames;
        const auto length = static_cast<std::size_t>(n);
        if (length > capacity || length < kNetHeaderSize) {
            // The held chains stay for the next frame.
            ++(length > capacity ? counters_.rx_dropped_oversize : counters_.rx_dropped_malformed);
            if (!logged_rx_drop_) {
                logged_rx_drop_ = true;
                log::warn(
                    "{}: dropped a received frame that {} ({} bytes held); further drops are only counted",
                    name_,
                    length > capacity ? "does not fit the guest's buffers" : "is shorter than a header",
                    capacity);
            }
            continue;
        }
        if (auto r = deliver_rx_frame(queue, length); !r) {
            return r;
        }
        returned = true;
    }
    if (returned && queue.needs_notification()) {
        context_.interrupt->signal_used();
    }
    return ok();
}

// The held receive chains are exactly the last rx_held_ chains popped, in
// available-ring order: hold_rx_buffers() appends each chain it pops and
// deliver_rx_frame() uses them from the front, so no later chain is ever
// used before an earlier one. Moving next_avail back by rx_held_ therefore
// gives back precisely those chains, at the ring positions the driver put
// them, and none of them has a used entry. (Completing them with 0 bytes
// instead would hand the guest empty frames.) Their avail entries are still
// intact: the driver rewrites a slot only after size more additions, and
// with these chains outstanding and unused it cannot have made them. Bytes
// a readv() left in them for a dropped frame are free buffer space to the
// driver. The next receive (a tap event, a notification, or the restored
// device's first pass) pops them again.
Result<void> Net::quiesce() {
    Queue& rx = context_.queues[kRxQueue];
    for (; rx_held_ > 0; --rx_held_) {
        rx.undo_pop();
    }
    rx_first_ = 0;
    rx_capacity_ = 0;
    return ok();
}

void Net::save_state(ByteWriter& out) const {
    out.u16(kStateVersion);
    out.raw(mac_);
}

Result<void> Net::restore_state(ByteReader& in) {
    const std::uint16_t version = in.u16();
    const auto saved = in.raw(std::tuple_size_v<MacAddress>);
    if (auto r = in.finish("virtio-net state"); !r) {
        return r;
    }
    if (version != kStateVersion) {
        return make_error("virtio-net state version {} is not {}", version, kStateVersion);
    }
    if (!std::equal(saved.begin(), saved.end(), mac_.begin())) {
        MacAddress old{};
        std::copy(saved.begin(), saved.end(), old.begin());
        log::info("{}: restored with MAC {}; the snapshot's guest had {}", name_, format_mac(mac_),
                  format_mac(old));
    }
    return ok();
}

}  // namespace sbx::virtio
