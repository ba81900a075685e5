// Who a request acts for: the whole host (the Unix socket, or a host-wide
// API key) or one sandbox (a key scoped to it, as SANDBOXER_TOKEN is).
#pragma once

#include <optional>
#include <string>

namespace sbx::sbxd {

struct Principal {
    std::string key_id;                     // empty on the Unix socket
    std::optional<std::string> sandbox_id;  // empty: the whole host
    [[nodiscard]] bool host_wide() const { return !sandbox_id.has_value(); }
};

}  // namespace sbx::sbxd
