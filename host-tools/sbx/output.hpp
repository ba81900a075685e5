// How sbx speaks (docs/sbx.md): on a terminal, short tables and lines for
// people; piped or with --json, JSON — one object with a `type` per
// command (JSON Lines events for new/resume) — and errors as one `error`
// event on stderr. Exit codes live here too.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.hpp"
#include "host-tools/sbx/http_client.hpp"

namespace sbx::cli {

// Objects keep sbxd's field order (for `sbx info` and the JSON it passes on).
using Json = nlohmann::ordered_json;

// Exit status (docs/sbx.md, "Exit codes").
inline constexpr int kExitOk = 0;
inline constexpr int kExitApiError = 1;     // sbxd answered with an error
inline constexpr int kExitUsage = 2;        // bad flags or arguments
inline constexpr int kExitUnreachable = 3;  // no connection to sbxd, or it broke, or not HTTP
inline constexpr int kExitLocal = 4;        // a local file could not be read or written
// Commands that exit with a command's own status (exec, exec --attach)
// use these for what is not the command's.
inline constexpr int kExitTimedOut = 124;    // exec --timeout ran out (as timeout(1))
inline constexpr int kExitOwnFailure = 125;  // sbx itself failed (as docker run)

// Why a command failed: what the error event says, and how sbx exits.
struct Failure {
    int exit_code = kExitApiError;
    unsigned status = 0;  // HTTP status; 0 when sbxd did not answer
    std::string code, message, request_id;
    std::string retry_after;
};

// An Error from the HTTP client or the argument parsers, by its code.
[[nodiscard]] Failure failure_of(const Error& error);
// A reply with an error status: the API's error body (docs/api.md,
// "Errors"), or a description of whatever else came.
[[nodiscard]] Failure failure_of(const HttpReply& reply);
// The `error` event: {"type":"error","status":..,"code":..,"message":..,"requestId":..}.
[[nodiscard]] Json error_event(const Failure& failure);
// One human line: "sbx: no sandbox sbx_1 (not_found, HTTP 404, req_…)".
[[nodiscard]] std::string error_line(const Failure& failure);

class Output {
public:
    explicit Output(bool json) : json_(json) {}
    [[nodiscard]] bool json() const { return json_; }

    // A JSON line on stdout, flushed (a reader sees each event as it happens).
    void event(const Json& value) const;
    // Text on stdout, as given.
    void text(std::string_view text) const;
    // A line on stderr for people (progress, warnings); nothing in JSON mode.
    void note(std::string_view text) const;
    // The failure on stderr (an event or a line); returns its exit code.
    int fail(const Failure& failure) const;
    int fail(const Error& error) const { return fail(failure_of(error)); }

private:
    bool json_;
};

// Columns padded to their widest cell, two spaces apart; the last column
// is not padded. Cells are one line (a '\n' or '\t' shows as a space).
[[nodiscard]] std::string format_table(const std::vector<std::string>& headers,
                                       const std::vector<std::vector<std::string>>& rows);
// "k=v,k2=v2" of a labels object; "-" when there are none.
[[nodiscard]] std::string format_labels(const Json& labels);
// A JSON scalar as a cell: strings as they are, null/absent as "-".
[[nodiscard]] std::string cell(const Json& object, std::string_view key);
// `sbx ls`: ID STATE SIZE CPUS MEMORY LABELS LAST ACTIVITY.
[[nodiscard]] std::string sandbox_table(const Json& sandboxes);
// `sbx info`: one "field: value" line per field, in the API's order.
[[nodiscard]] std::string sandbox_details(const Json& sandbox);
// A command line as a shell would show it: words with spaces or quotes are single-quoted.
[[nodiscard]] std::string shell_words(const Json& command);

}  // namespace sbx::cli
