// Randomness and digests from OpenSSL (RAND_bytes, EVP SHA-256).
#pragma once

#include <string>
#include <string_view>

#include "base/result.hpp"

namespace sbx::sbxd {

// `count` random bytes as lowercase hex (ids, request ids, keys).
[[nodiscard]] Result<std::string> random_hex(std::size_t count);

// Lowercase hex SHA-256 of text.
[[nodiscard]] std::string sha256_hex(std::string_view text);

}  // namespace sbx::sbxd
