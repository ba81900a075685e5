// Who a request acts for: the whole host (the Unix socket, or a host-wide
// API key) or one sandbox (a key scoped to it, as SANDBOXER_TOKEN is);
// with a read-only key, only to read.
#pragma once

#include <optional>
#include <string>

namespace sbx::sbxd {

struct Principal {
    std::string key_id;                     // empty on the Unix socket
    std::optional<std::string> sandbox_id;  // empty: the whole host
    bool read_only = false;
    [[nodiscard]] bool host_wide() const { return !sandbox_id.has_value(); }
    // The key's id, or nothing on the Unix socket (history, the request log).
    [[nodiscard]] std::optional<std::string> key() const {
        return key_id.empty() ? std::nullopt : std::optional<std::string>(key_id);
    }
};

}  // namespace sbx::sbxd
