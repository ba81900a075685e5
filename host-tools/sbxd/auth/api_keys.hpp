// API keys (docs/sbxd.md, "API keys"): "sbxk_" and 32 random bytes in hex
// (OpenSSL RAND_bytes). Only the SHA-256 of a key is stored: keys carry
// 256 bits of entropy, so an unsalted hash is as hard to invert as the key
// is to guess, and lookup by hash needs no constant-time comparison.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "base/result.hpp"
#include "host-tools/sbxd/auth/principal.hpp"
#include "host-tools/sbxd/store/records.hpp"

namespace sbx::sbxd {

class Store;

struct NewApiKey {
    std::string secret;  // shown once, never stored
    ApiKeyRecord record;
};

// What a key may do beyond its sandbox scope.
struct KeyLimits {
    bool read_only = false;                   // GET and HEAD only, no WebSocket upgrade
    std::optional<UnixMillis> expires_at = {};  // refused from then on
};

// A fresh key and the record to store for it.
[[nodiscard]] Result<NewApiKey> make_api_key(std::string name, std::optional<std::string> sandbox_id,
                                             UnixMillis now, KeyLimits limits = {});

// The principal of an Authorization header value ("Bearer sbxk_..."), or
// "unauthorized" when it is missing, malformed, names no stored key (never
// issued, or revoked) or names one that expired at or before `now`.
[[nodiscard]] Result<Principal> authenticate_bearer(Store& store, std::string_view authorization, UnixMillis now);

}  // namespace sbx::sbxd
