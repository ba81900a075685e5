// The values of the identity op (docs/agent-protocol.md, "identity") as
// both ends spell them: an Ethernet address "aa:bb:cc:dd:ee:ff"
// (base/mac_address.hpp), the RNG seed and the new token as hex. They come
// from the other side and are checked here.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/mac_address.hpp"
#include "base/result.hpp"

namespace sbx::agent {

inline constexpr std::size_t kMinSeedBytes = 32;  // 256 bits: a full reseed of the kernel CRNG
inline constexpr std::size_t kMaxSeedBytes = 512;
// A per-boot token set by the identity op: lower-case hex, 128 to 512 bits
// (docs/agent-protocol.md, "The per-boot token").
inline constexpr std::size_t kMinTokenDigits = 32;
inline constexpr std::size_t kMaxTokenDigits = 128;

// An even number of hex digits (either case) for kMinSeedBytes to kMaxSeedBytes bytes.
[[nodiscard]] Result<std::vector<std::uint8_t>> parse_seed_hex(std::string_view text);
[[nodiscard]] std::string to_hex(std::span<const std::uint8_t> bytes);

// kMinTokenDigits to kMaxTokenDigits lower-case hex digits: the text itself,
// or an Error naming "token" (never quoting it).
[[nodiscard]] Result<std::string> check_token(std::string_view text);

}  // namespace sbx::agent
