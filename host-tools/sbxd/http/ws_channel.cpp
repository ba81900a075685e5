#include "host-tools/sbxd/http/ws_channel.hpp"

#include <algorithm>
#include <utility>

namespace sbx::sbxd::http {

namespace {

Error cancelled(std::string_view why) {
    return make_coded_error("cancelled", "{}", why);
}

}  // namespace

WsChannel::WsChannel(std::size_t out_limit, std::size_t in_limit, std::function<void()> wake)
    : out_limit_(std::max<std::size_t>(out_limit, 1)),
      in_limit_(std::max<std::size_t>(in_limit, 1)),
      wake_(std::move(wake)) {}

Result<WsMessage> WsChannel::receive(std::optional<Clock::time_point> deadline) {
    bool resume = false;
    WsMessage message;
    {
        std::unique_lock lock(mutex_);
        auto ready = [&] { return gone_ || close_ || !in_.empty(); };
        if (deadline) {
            if (!changed_.wait_until(lock, *deadline, ready)) {
                return make_coded_error("timeout", "no message from the client in time");
            }
        } else {
            changed_.wait(lock, ready);
        }
        if (close_) {
            return cancelled("the connection is closing");
        }
        if (in_.empty()) {
            return cancelled("the client went away");
        }
        message = std::move(in_.front());
        in_.pop_front();
        in_bytes_ -= message.data.size();
        resume = in_paused_ && in_bytes_ < in_limit_;
        if (resume) {
            in_paused_ = false;
        }
    }
    if (resume) {
        wake_();
    }
    return message;
}

Result<void> WsChannel::send(WsMessage message) {
    bool was_empty = false;
    {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, [&] {
            return gone_ || close_ || out_bytes_ == 0 || out_bytes_ + message.data.size() <= out_limit_;
        });
        if (gone_) {
            return cancelled("the client went away");
        }
        if (close_) {
            return cancelled("the connection is closing");
        }
        was_empty = out_.empty();
        out_bytes_ += message.data.size();
        out_.push_back(std::move(message));
    }
    if (was_empty) {
        wake_();
    }
    return ok();
}

void WsChannel::close(WsClose close) {
    {
        std::lock_guard lock(mutex_);
        if (close_ || gone_) {
            return;
        }
        if (close.reason.size() > 123) {
            close.reason.resize(123);
        }
        close_ = std::move(close);
    }
    changed_.notify_all();
    wake_();
}

bool WsChannel::gone() const {
    std::lock_guard lock(mutex_);
    return gone_;
}

WsChannel::GoneHook WsChannel::on_gone(std::function<void()> hook) {
    bool run_now = false;
    {
        std::lock_guard hook_lock(hook_mutex_);
        std::lock_guard lock(mutex_);
        run_now = gone_;
        hook_ = std::move(hook);
    }
    if (run_now) {
        std::lock_guard hook_lock(hook_mutex_);
        if (auto late = std::exchange(hook_, nullptr)) {
            late();
        }
    }
    return GoneHook(this);
}

WsChannel::GoneHook::~GoneHook() {
    std::lock_guard hook_lock(channel_->hook_mutex_);
    channel_->hook_ = nullptr;
}

bool WsChannel::push(WsMessage message) {
    {
        std::lock_guard lock(mutex_);
        if (gone_ || close_) {
            return true;  // dropped: nobody receives any more
        }
        in_bytes_ += message.data.size();
        in_.push_back(std::move(message));
        in_paused_ = in_bytes_ >= in_limit_;
    }
    changed_.notify_all();
    return has_room();
}

bool WsChannel::has_room() const {
    std::lock_guard lock(mutex_);
    return !in_paused_;
}

std::optional<WsMessage> WsChannel::take() {
    std::optional<WsMessage> message;
    {
        std::lock_guard lock(mutex_);
        if (out_.empty()) {
            return std::nullopt;
        }
        message = std::move(out_.front());
        out_.pop_front();
        out_bytes_ -= message->data.size();
    }
    changed_.notify_all();
    return message;
}

std::optional<WsClose> WsChannel::closing() const {
    std::lock_guard lock(mutex_);
    return out_.empty() ? close_ : std::nullopt;
}

void WsChannel::peer_gone() {
    {
        std::lock_guard lock(mutex_);
        if (gone_) {
            return;
        }
        gone_ = true;
        out_.clear();
        out_bytes_ = 0;
    }
    changed_.notify_all();
    std::lock_guard hook_lock(hook_mutex_);
    if (auto hook = std::exchange(hook_, nullptr)) {
        hook();
    }
}

}  // namespace sbx::sbxd::http
