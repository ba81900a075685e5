// The agent's side of an upload (file_write, tar_put; docs/agent-protocol.md
// "Files"): after its "ready", the client sends DATA on channel 3 with
// contiguous offsets from 0, then EOF 3 — or {"type":"cancel"} to abandon
// the op. One frame (at most 1 MiB) is held at a time.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "guest-agent/agent/agent.hpp"

namespace sbx::agent::files {

class UploadReader {
public:
    explicit UploadReader(FrameStream& stream) : stream_(stream) {}

    // The next piece of content, or nullopt at EOF. An error is either the
    // client breaking the op's rules (a wrong channel or offset, another
    // message, a cancel) or the connection failing (broken() is then true).
    [[nodiscard]] Result<std::optional<std::vector<std::uint8_t>>> next();

    [[nodiscard]] bool broken() const { return broken_; }
    [[nodiscard]] std::uint64_t received() const { return received_; }

private:
    FrameStream& stream_;
    std::uint64_t received_ = 0;
    bool broken_ = false;
};

// How an upload op ends after `error` (its temporary state already undone):
// a broken connection ends the session (with a bad_frame error if framing
// was lost); otherwise the error is returned, for the session to send as
// the op's final message. DATA the client sends after that is discarded by
// the session until the next request.
[[nodiscard]] Result<void> end_failed_upload(Session& session, const UploadReader& upload, Error error);

// The whole upload: sends "ready", hands each piece to `consume` until EOF.
// Returns the bytes received; an error from `consume` or from the client is
// returned as the op's error (the session discards the rest of the DATA),
// a broken connection ends the session (nullopt).
[[nodiscard]] Result<std::optional<std::uint64_t>> receive_upload(
    Session& session, const std::function<Result<void>(std::span<const std::uint8_t>)>& consume);

}  // namespace sbx::agent::files
