#include "devices/virtio/rng/rng.hpp"

#include <sys/epoll.h>
#include <sys/random.h>

#include <algorithm>

namespace sbx::virtio {
namespace {

// Fills `bytes` from getrandom(2) without blocking; returns how many were
// filled (fewer only if the host's pool is not initialised yet).
std::size_t fill_random(std::span<std::uint8_t> bytes) {
    std::size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t n = ::getrandom(bytes.data() + done, bytes.size() - done, GRND_NONBLOCK);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            break;
        }
        done += static_cast<std::size_t>(n);
    }
    return done;
}

}  // namespace

std::unique_ptr<Rng> Rng::create() {
    return std::unique_ptr<Rng>(new Rng());
}

void Rng::read_config(std::uint64_t offset, std::span<std::uint8_t> data) const {
    read_config_bytes({}, offset, data);
}

Result<void> Rng::activate(const ActiveContext& context) {
    context_ = context;
    if (!resume_) {
        auto resume = EventFd::create();  // here rather than in create(), which has no error channel
        if (!resume) {
            return resume.error().context(name());
        }
        resume_ = std::move(*resume);
    }
    [[maybe_unused]] auto stale = resume_->consume();
    return context_.events->add(resume_->fd(), EPOLLIN, [this](std::uint32_t) -> Result<void> {
        [[maybe_unused]] auto n = resume_->consume();
        return fill_requests();
    });
}

void Rng::reset() {
    context_ = {};
}

Result<void> Rng::process_queue(std::size_t index) {
    if (index != 0) {
        return ok();
    }
    return fill_requests();
}

// §5.4.6: each chain is one device-writable buffer (or several) to fill.
Result<void> Rng::fill_requests() {
    Queue& queue = context_.queues[0];
    if (!queue.active()) {
        return ok();
    }
    std::size_t budget = kMaxBytesPerEvent;
    bool returned = false;
    queue.disable_notification();
    while (true) {
        if (budget == 0) {
            if (auto r = resume_->signal(); !r) {
                return r;
            }
            break;
        }
        auto popped = queue.pop_or_enable_notification(chain_);
        if (!popped) {
            return popped.error();
        }
        if (!*popped) {
            break;
        }
        if (chain_.writable_bytes() == 0) {
            return make_error("request chain {} has no device-writable buffer (§5.4.6)", chain_.head());
        }
        std::size_t want =
            std::min({chain_.writable_bytes(), std::uint64_t{kMaxBytesPerChain}, std::uint64_t{budget}});
        std::size_t written = 0;
        for (const Segment& segment : chain_.writable()) {
            const std::size_t len = std::min(segment.bytes.size(), want - written);
            const std::size_t filled = fill_random(segment.bytes.first(len));
            written += filled;
            if (filled < len || written == want) {
                break;
            }
        }
        budget -= std::min(budget, want);
        if (auto r = queue.add_used(chain_.head(), static_cast<std::uint32_t>(written)); !r) {
            return r;
        }
        returned = true;
    }
    if (returned && queue.needs_notification()) {
        context_.interrupt->signal_used();
    }
    return ok();
}

Result<void> Rng::restore_state(ByteReader& in) {
    const std::uint16_t version = in.u16();
    if (auto r = in.finish("virtio-rng state"); !r) {
        return r;
    }
    if (version != kStateVersion) {
        return make_error("virtio-rng state version {} is not {}", version, kStateVersion);
    }
    return ok();
}

}  // namespace sbx::virtio
