#include "host-tools/sbxd/daemon/tcp_pending.hpp"

#include <algorithm>

#include "host-tools/sbxd/api/api_error.hpp"
#include "host-tools/sbxd/crypto/random.hpp"

namespace sbx::sbxd {

namespace {
// Host vsock ports of reverse forwards: 1 << 30 and up, far from the
// agent's (52, 53) and the guest API's (7070).
constexpr std::uint32_t kFirstVsockPort = 1U << 30;
}  // namespace

std::uint64_t PendingTcpConnections::new_listener() {
    std::lock_guard lock(mutex_);
    return next_listener_++;
}

std::uint32_t PendingTcpConnections::vsock_port(std::uint64_t listener) {
    return kFirstVsockPort + static_cast<std::uint32_t>(listener % (0xfffffffeU - kFirstVsockPort));
}

Result<std::string> PendingTcpConnections::add(const std::string& sandbox_id, std::uint64_t listener,
                                               UniqueFd connection, Clock::time_point deadline) {
    auto hex = random_hex(8);
    if (!hex) {
        return hex.error();
    }
    std::lock_guard lock(mutex_);
    const auto mine = std::count_if(entries_.begin(), entries_.end(),
                                    [&](const auto& entry) { return entry.second.listener == listener; });
    if (entries_.size() >= kTotal || static_cast<std::size_t>(mine) >= kPerListener) {
        return make_coded_error(api::code::kLimitReached, "too many guest connections wait to be picked up");
    }
    std::string id = "c" + *hex;
    entries_.emplace(id, Entry{sandbox_id, listener, std::move(connection), deadline});
    return id;
}

std::optional<UniqueFd> PendingTcpConnections::take(const std::string& sandbox_id, const std::string& id) {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(id);
    if (it == entries_.end() || it->second.sandbox_id != sandbox_id) {
        return std::nullopt;
    }
    UniqueFd connection = std::move(it->second.connection);
    entries_.erase(it);
    return connection;
}

void PendingTcpConnections::expire(std::uint64_t listener, Clock::time_point now) {
    std::lock_guard lock(mutex_);
    std::erase_if(entries_, [&](const auto& entry) {
        return entry.second.listener == listener && entry.second.deadline <= now;
    });
}

}  // namespace sbx::sbxd
