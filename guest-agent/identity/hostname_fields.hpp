// The identity op's "hostname" (docs/agent-protocol.md, "identity") as both
// ends spell it, and the /etc/hosts text that goes with it. Pure: the
// kernel and the files are hostname_apply.hpp's.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "base/result.hpp"

namespace sbx::agent {

// The longest name the kernel keeps (__NEW_UTS_LEN, HOST_NAME_MAX): 64 bytes.
inline constexpr std::size_t kMaxHostnameBytes = 64;
// The address Debian gives the machine's own name in /etc/hosts (Debian
// Reference §5.1.1, "The hostname resolution").
inline constexpr std::string_view kOwnHostAddress = "127.0.1.1";

// A host name as RFC 1123 §2.1 has it (RFC 952 relaxed: a label may start
// with a digit): one or more labels separated by dots, each 1 to 63 ASCII
// letters, digits and hyphens, neither starting nor ending with a hyphen;
// 64 bytes at most in all (the kernel's limit, under RFC 1123's 255).
// Returns the name, or an Error naming "hostname" and what is wrong.
[[nodiscard]] Result<std::string> check_hostname(std::string_view text);

// /etc/hosts with `name` for the machine itself: the first line whose
// address is 127.0.1.1 becomes "127.0.1.1\t<name>" (other names on that
// line go: they were the old name's), later 127.0.1.1 lines go, and
// without one the line is added after the first 127.0.0.1 line (else
// first). Every other line, comments included, stays as it is. The text
// ends with a line break.
[[nodiscard]] std::string hosts_with_hostname(std::string_view hosts, std::string_view name);

}  // namespace sbx::agent
