// Base64 (RFC 4648 §4, with padding) through OpenSSL's EVP_EncodeBlock /
// EVP_DecodeBlock: the API carries process output and stdin as base64.
#pragma once

#include <string>
#include <string_view>

#include "base/result.hpp"

namespace sbx::sbxd {

[[nodiscard]] std::string base64_encode(std::string_view bytes);
// invalid_argument for text that is not padded base64.
[[nodiscard]] Result<std::string> base64_decode(std::string_view text);

}  // namespace sbx::sbxd
