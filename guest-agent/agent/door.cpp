#include "guest-agent/agent/door.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <charconv>
#include <sstream>
#include <utility>

namespace sbx::agent {

Door::Ticket::Ticket(Ticket&& other) noexcept
    : door_(std::exchange(other.door_, nullptr)), id_(other.id_), authenticated_(other.authenticated_) {}

Door::Ticket::~Ticket() {
    if (door_ != nullptr) {
        door_->leave(*this);
    }
}

Door::Door(std::string token, DoorLimits limits) : limits_(limits), token_(std::move(token)) {
    reaper_ = std::thread([this] { reap(); });
}

Door::~Door() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    changed_.notify_all();
    reaper_.join();
}

Door::Ticket Door::arrive(int fd) {
    std::lock_guard lock(mutex_);
    while (!pending_.empty() && pending_.size() >= limits_.max_pending) {
        shut_locked(pending_.begin());
    }
    const bool was_empty = pending_.empty();
    const std::uint64_t id = next_id_++;
    pending_.emplace(id, Waiting{fd, std::chrono::steady_clock::now() + limits_.hello_timeout});
    if (was_empty) {
        changed_.notify_all();  // the reaper waits for a first deadline
    }
    return Ticket(this, id);
}

Door::Admission Door::authenticate(Ticket& ticket) {
    std::lock_guard lock(mutex_);
    auto it = pending_.find(ticket.id_);
    if (it == pending_.end()) {
        return Admission::closed;
    }
    if (sessions_ >= limits_.max_sessions) {
        return Admission::full;
    }
    pending_.erase(it);
    ++sessions_;
    ticket.authenticated_ = true;
    return Admission::admitted;
}

void Door::leave(Ticket& ticket) {
    std::lock_guard lock(mutex_);
    if (ticket.authenticated_) {
        --sessions_;
    } else {
        pending_.erase(ticket.id_);  // may be gone already (shut down)
    }
}

// Under mutex_, so the fd is still the connection's: its Ticket, which
// leaves before the fd is closed, waits for the lock.
void Door::shut_locked(std::map<std::uint64_t, Waiting>::iterator it) {
    ::shutdown(it->second.fd, SHUT_RDWR);  // wakes the session's blocked read or write
    pending_.erase(it);
}

void Door::reap() {
    std::unique_lock lock(mutex_);
    while (!stopping_) {
        if (pending_.empty()) {
            changed_.wait(lock);
            continue;
        }
        auto first = pending_.begin();
        const auto deadline = first->second.deadline;  // a copy: the entry may go while we wait
        if (deadline <= std::chrono::steady_clock::now()) {
            shut_locked(first);
            continue;
        }
        changed_.wait_until(lock, deadline);
    }
}

bool Door::token_matches(std::string_view token) const {
    std::lock_guard lock(mutex_);
    // Without an early exit, so timing says nothing about the token.
    if (token.size() != token_.size()) {
        return false;
    }
    unsigned char diff = 0;
    for (std::size_t i = 0; i < token.size(); ++i) {
        diff |= static_cast<unsigned char>(token[i] ^ token_[i]);
    }
    return diff == 0;
}

bool Door::has_token() const {
    std::lock_guard lock(mutex_);
    return !token_.empty();
}

void Door::replace_token(std::string token) {
    std::lock_guard lock(mutex_);
    token_.swap(token);
    std::fill(token.begin(), token.end(), '\0');  // the old one
}

std::size_t Door::sessions() const {
    std::lock_guard lock(mutex_);
    return sessions_;
}

std::size_t Door::pending() const {
    std::lock_guard lock(mutex_);
    return pending_.size();
}

std::uint64_t Door::arrivals() const {
    std::lock_guard lock(mutex_);
    return next_id_;
}

std::optional<std::chrono::seconds> hello_timeout_from_cmdline(std::string_view cmdline) {
    constexpr std::string_view kKey = "sbx.hello_timeout=";
    constexpr unsigned kMaxSeconds = 86400;
    std::istringstream words{std::string(cmdline)};
    std::string word;
    while (words >> word) {
        if (!word.starts_with(kKey)) {
            continue;
        }
        unsigned seconds = 0;
        const char* end = word.data() + word.size();
        auto [at, error] = std::from_chars(word.data() + kKey.size(), end, seconds);
        if (error != std::errc() || at != end || seconds < 1 || seconds > kMaxSeconds) {
            return std::nullopt;
        }
        return std::chrono::seconds(seconds);
    }
    return std::nullopt;
}

}  // namespace sbx::agent
