// Who may come in (docs/agent-protocol.md, "Session"): the per-boot token,
// the hello deadline and the two session bounds. A connection is pending
// from its arrival until its hello succeeds; then it is one of at most
// `max_sessions` authenticated sessions. Pending connections are bounded
// on their own (`max_pending`, the oldest evicted to make room), and one
// that has not said hello within `hello_timeout` is shut down, so idle or
// hostile connections can hold neither the session cap nor threads.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>


namespace sbx::agent {

struct DoorLimits {
    std::chrono::milliseconds hello_timeout = std::chrono::seconds(60);
    std::size_t max_sessions = 1024;  // authenticated sessions
    std::size_t max_pending = 64;     // connections that have not said hello yet
};

class Door {
public:
    // A connection's place: pending, then (after authenticate) a session.
    // Leaving it (destruction) frees the place; it must go before the
    // connection's fd is closed, since the door may shut that fd down.
    class Ticket {
    public:
        Ticket(Ticket&& other) noexcept;
        Ticket& operator=(Ticket&&) = delete;
        ~Ticket();
        [[nodiscard]] bool authenticated() const { return authenticated_; }

    private:
        friend class Door;
        Ticket(Door* door, std::uint64_t id) : door_(door), id_(id) {}
        Door* door_;
        std::uint64_t id_;
        bool authenticated_ = false;
    };

    Door(std::string token, DoorLimits limits);
    ~Door();
    Door(const Door&) = delete;
    Door& operator=(const Door&) = delete;

    // A new connection on `fd`, pending until its hello. When max_pending
    // connections are already pending, the oldest is shut down.
    [[nodiscard]] Ticket arrive(int fd);
    enum class Admission { admitted, full, closed };
    // The hello was good: the pending connection becomes a session, unless
    // max_sessions are served (full) or the door shut the connection down
    // meanwhile (closed: its deadline passed or it was evicted).
    [[nodiscard]] Admission authenticate(Ticket& ticket);

    // Constant-time comparison with the current token (with none, an agent
    // started without one, only an empty token matches).
    [[nodiscard]] bool token_matches(std::string_view token) const;
    [[nodiscard]] bool has_token() const;
    // The identity op: hellos from now on need `token`; sessions already
    // authenticated are not affected.
    void replace_token(std::string token);

    [[nodiscard]] std::size_t sessions() const;
    [[nodiscard]] std::size_t pending() const;
    [[nodiscard]] std::uint64_t arrivals() const;  // connections that ever arrived
    [[nodiscard]] const DoorLimits& limits() const { return limits_; }

private:
    struct Waiting {
        int fd;
        std::chrono::steady_clock::time_point deadline;
    };
    void leave(Ticket& ticket);
    void shut_locked(std::map<std::uint64_t, Waiting>::iterator it);
    void reap();

    const DoorLimits limits_;
    mutable std::mutex mutex_;
    std::condition_variable changed_;
    std::string token_;
    // By arrival, which is also by deadline (one timeout for all).
    std::map<std::uint64_t, Waiting> pending_;
    std::uint64_t next_id_ = 0;
    std::size_t sessions_ = 0;
    bool stopping_ = false;
    std::thread reaper_;  // shuts down pending connections past their deadline
};

// Seconds for the hello deadline from a kernel command line
// ("sbx.hello_timeout=N", 1 to 86400), or nothing when absent or malformed.
[[nodiscard]] std::optional<std::chrono::seconds> hello_timeout_from_cmdline(std::string_view cmdline);

}  // namespace sbx::agent
