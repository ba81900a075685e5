// Guest connections that arrived through a reverse forward (GET
// .../tcp/listen/ws) and wait for a client to pick them up by id (GET
// .../tcp/accept/ws?connection=ID). Bounded per listener and in all; one
// left unclaimed past its deadline, or whose listener ended, is closed.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "base/result.hpp"
#include "base/unique_fd.hpp"

namespace sbx::sbxd {

class PendingTcpConnections {
public:
    using Clock = std::chrono::steady_clock;
    static constexpr std::size_t kPerListener = 256;
    static constexpr std::size_t kTotal = 4096;

    // A fresh listener id, and the host vsock port its guest connections
    // come to (unique while this sbxd runs; above the ports sbxd's own
    // services use, docs/sbxd.md).
    [[nodiscard]] std::uint64_t new_listener();
    [[nodiscard]] static std::uint32_t vsock_port(std::uint64_t listener);

    // Keeps `connection` under a new id ("c" and 16 hex digits) until
    // `deadline`; limit_reached past the bounds.
    [[nodiscard]] Result<std::string> add(const std::string& sandbox_id, std::uint64_t listener,
                                          UniqueFd connection, Clock::time_point deadline);
    // The connection, once: nullopt when there is none by that id for that
    // sandbox (never was, taken, expired, or its listener ended).
    [[nodiscard]] std::optional<UniqueFd> take(const std::string& sandbox_id, const std::string& id);
    // Closes the listener's unclaimed connections past their deadline (all
    // of them with Clock::time_point::max()).
    void expire(std::uint64_t listener, Clock::time_point now);

private:
    struct Entry {
        std::string sandbox_id;
        std::uint64_t listener = 0;
        UniqueFd connection;
        Clock::time_point deadline;
    };
    std::mutex mutex_;
    std::uint64_t next_listener_ = 0;
    std::map<std::string, Entry, std::less<>> entries_;
};

}  // namespace sbx::sbxd
