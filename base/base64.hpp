// Base64 (RFC 4648 §4, padded), as the API carries binary data in JSON
// (process output, stdin, file contents through MCP). Decoding refuses
// anything that is not canonical padded base64, with code "invalid_base64".
#pragma once

#include <string>
#include <string_view>

#include "base/result.hpp"

namespace sbx {

[[nodiscard]] std::string base64_encode(std::string_view bytes);
[[nodiscard]] Result<std::string> base64_decode(std::string_view text);

}  // namespace sbx
