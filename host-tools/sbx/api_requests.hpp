// What sbx's flags become on the wire: request bodies, targets with their
// path segments and query parameters encoded (Boost.URL), and the parsing
// of the small flag syntaxes (k=v, K=V, durations, sizes, ID:PATH). Pure:
// no I/O, so every rule here is unit-tested (sbx_test.cpp). sbxd checks
// every value again; these only catch what the CLI itself must know.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.hpp"

namespace sbx::cli {

// Objects keep sbxd's field order (for `sbx info` and the JSON it passes on).
using Json = nlohmann::ordered_json;

// "k=v" (a label or -e K=V) split at the first '='; refuses an empty key
// or a missing '='. `what` names the flag in the error.
[[nodiscard]] Result<std::pair<std::string, std::string>> parse_assignment(std::string_view text,
                                                                           std::string_view what);
// Repeated k=v flags as a map; a repeated key is an error.
[[nodiscard]] Result<std::map<std::string, std::string>> parse_assignments(
    const std::vector<std::string>& items, std::string_view what);
// -e K=V, or -e K taking K's value from `lookup` (our environment).
[[nodiscard]] Result<std::map<std::string, std::string>> parse_env(
    const std::vector<std::string>& items,
    const std::function<std::optional<std::string>(const std::string&)>& lookup);

// "500ms", "30s", "2m", "1h", or a bare number of seconds -> milliseconds.
[[nodiscard]] Result<std::uint64_t> parse_timeout_ms(std::string_view text);
// Memory: a bare number of MiB, or with M/MiB/G/GiB -> MiB.
[[nodiscard]] Result<std::uint64_t> parse_memory_mib(std::string_view text);
// Disk: a bare number of GiB, or with G/GiB -> GiB.
[[nodiscard]] Result<std::uint64_t> parse_disk_gib(std::string_view text);
// Bytes (logs --tail): a bare number, or with K/KiB, M/MiB, G/GiB (powers of 1024).
[[nodiscard]] Result<std::uint64_t> parse_byte_count(std::string_view text, std::string_view what);

// `sbx new` flags -> the create body (docs/api.md, POST /v1/sandboxes).
struct CreateOptions {
    std::string size, from, ttl, memory, disk;
    unsigned cpus = 0;  // 0: not given
    std::vector<std::string> labels, env;
    bool no_env = false, no_auto_stop = false, cold = false;
    std::optional<unsigned> idle_minutes;
    std::string egress;  // --egress: empty, or egress_fields' word
};
[[nodiscard]] Result<Json> create_body(
    const CreateOptions& options,
    const std::function<std::optional<std::string>(const std::string&)>& env_lookup);

// `sbx ttl ID SECONDS|off` -> the ttl body (docs/api.md, POST …/ttl): a
// bare number of seconds, or 90s, 30m, 2h, 7d; "off" is noAutoStop.
[[nodiscard]] Result<Json> ttl_body(std::string_view value);
// `--egress internet|deny-all|NET[,NET...]` -> the egress fields of a
// create or of POST …/egress (docs/api.md, "Egress"): networks are an
// allow list; sbxd checks them.
[[nodiscard]] Result<Json> egress_body(std::string_view value);
// `sbx idle ID MINUTES|off` -> the idle body (POST …/idle); "off" is 0.
[[nodiscard]] Result<Json> idle_body(std::string_view value);

// `sbx keys create` flags -> the key body (docs/api.md, POST /v1/keys):
// `expires` a bare number of seconds, or 90s, 30m, 2h, 30d; empty: never.
struct KeyOptions {
    std::string name, sandbox, expires;
    bool read_only = false;
};
[[nodiscard]] Result<Json> key_body(const KeyOptions& options);

// `sbx exec` flags -> the exec body (/work/helpers/exec-api.md).
struct ExecOptions {
    std::vector<std::string> command;
    std::vector<std::string> env;
    std::string cwd, user, timeout;
    bool detach = false;
    std::optional<std::string> stdin_bytes;  // sent base64-encoded when set
};
[[nodiscard]] Result<Json> exec_body(
    const ExecOptions& options,
    const std::function<std::optional<std::string>(const std::string&)>& env_lookup);

// Targets. Every path segment and query value is percent-encoded.
[[nodiscard]] std::string target(std::initializer_list<std::string_view> segments,
                                 const std::vector<std::pair<std::string, std::string>>& query = {});
// GET /v1/sandboxes?labels=k=v,k2=v2&state=a,b from repeated --label/--state
// (each --state may itself be a comma list).
[[nodiscard]] Result<std::string> list_target(const std::vector<std::string>& labels,
                                              const std::vector<std::string>& states);

// scp operands: "ID:/abs/path" is a sandbox's file, anything else is a
// local path (a local name with a ':' can be written ./a:b).
struct CopyEnd {
    std::string sandbox;  // empty: local
    std::string path;
};
[[nodiscard]] Result<CopyEnd> parse_copy_end(std::string_view text);
// The file a copy lands in: `to` itself, or to/basename(from) when `to`
// names a directory (ends in '/', or `to_is_dir`).
[[nodiscard]] std::string copy_destination(std::string_view from, std::string_view to, bool to_is_dir);
// The directory a tree copy (scp -r) lands in, as scp(1) does it: `to`
// itself, or to/basename(from) when `to_is_dir` (`to` is a directory that
// exists); a `from` whose last component is ".", ".." or none ("/")
// copies into `to` itself.
[[nodiscard]] std::string tree_destination(std::string_view from, std::string_view to, bool to_is_dir);

// Base64 (RFC 4648 §4) of exec's stdin and output; decoding refuses
// anything that is not canonical base64.
[[nodiscard]] std::string base64_encode(std::string_view bytes);
[[nodiscard]] Result<std::string> base64_decode(std::string_view text);

}  // namespace sbx::cli
