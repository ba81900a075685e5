// The transfer half of the file ops' client (files_client.cpp,
// tar_client.cpp): the request's owner fields, a download's DATA frames
// into a sink, and an upload's frames out
// (docs/agent-protocol.md, "Downloads" and "Uploads"). Internal to the
// client library.
#pragma once

#include <poll.h>

#include <cerrno>

#include "guest-agent/files/files_client.hpp"

namespace sbx::agent::files::detail {

// "user", "uid" and "gid" of a request that creates files.
void add_owner(Json& request, const Ownership& owner);

[[nodiscard]] Error cap_error(std::string_view what, std::uint64_t cap);

// Receives a download: DATA on channel 3 with contiguous offsets, EOF, then
// the final result. A sink error stops delivery but not the draining, so
// the connection stays in step; the first error wins. More than `asked` or
// `cap` bytes, or a frame out of place, ends the connection instead:
// nothing more is read from a guest that broke the protocol.
[[nodiscard]] Result<Json> receive_download(AgentClient& client, std::string_view what, const ChunkSink& sink,
                                            std::optional<std::uint64_t> asked, std::uint64_t cap,
                                            std::uint64_t& received);

// The client's side of an upload: DATA on channel 3, checking between
// frames whether the agent already gave up (its error is then the op's
// final reply, and sending more would be wasted).
class UploadSender {
public:
    // Writes are bounded by the reply timeout: an agent that stops reading
    // must not block the client for ever.
    explicit UploadSender(AgentClient& client) : client_(client) { client_.set_send_timeout(client.reply_timeout()); }
    ~UploadSender() { client_.set_send_timeout(std::chrono::milliseconds(0)); }
    UploadSender(const UploadSender&) = delete;
    UploadSender& operator=(const UploadSender&) = delete;

    [[nodiscard]] Result<void> send(std::span<const std::uint8_t> bytes) {
        if (auto r = client_.stream().write_data(Channel::Content, offset_, bytes); !r) {
            done_ = true;  // the connection is broken
            if (r.error().errno_value == EAGAIN) {
                return client_.abandon(errno_error(
                    fmt::format("the agent took no upload data for {} ms (the reply timeout)",
                                client_.reply_timeout().count()),
                    ETIMEDOUT));
            }
            return client_.abandon(r.error());
        }
        offset_ += bytes.size();
        return check_early_reply();
    }
    // EOF, then the agent's final reply.
    [[nodiscard]] Result<Json> finish() {
        if (auto r = client_.stream().write_eof(Channel::Content); !r) {
            return client_.abandon(r.error());
        }
        return client_.read_reply();
    }
    // Abandons the upload for a local `reason`: the agent undoes it and
    // answers with an error, read here so the connection stays in step.
    [[nodiscard]] Error cancel(Error reason) {
        if (!client_.stream().write_message(Json{{"type", "cancel"}})) {
            return client_.abandon(std::move(reason));
        }
        if (auto reply = client_.read_reply(); reply) {
            client_.abandon();  // a cancel is answered with an error, nothing else
        }
        return reason;
    }
    // False once the op is over without us: the agent's error reply was
    // read during the upload, or the connection broke.
    [[nodiscard]] bool can_cancel() const { return !done_; }

private:
    [[nodiscard]] Result<void> check_early_reply() {
        pollfd p{client_.stream().fd(), POLLIN, 0};
        if (!client_.stream().has_buffered_input() && ::poll(&p, 1, 0) <= 0) {
            return ok();
        }
        done_ = true;
        auto reply = client_.read_reply();
        if (!reply) {
            return reply.error();
        }
        return client_.abandon(malformed_reply(
            fmt::format("unexpected \"{}\" message during an upload", printable(reply_type(*reply), 64))));
    }

    AgentClient& client_;
    std::uint64_t offset_ = 0;
    bool done_ = false;
};

// Streams `source` through an upload that the agent has answered "ready" to.
[[nodiscard]] Result<Json> upload(AgentClient& client, const ChunkSource& source);

}  // namespace sbx::agent::files::detail
