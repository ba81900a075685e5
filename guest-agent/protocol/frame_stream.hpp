// Blocking frame I/O on a connected stream socket, shared by the agent's
// sessions and the host client. Reads happen on one thread; writes may
// come from several (an exec's stdout and stderr pumps) and are serialized.
#pragma once

#include <mutex>
#include <span>
#include <vector>

#include "base/unique_fd.hpp"
#include "guest-agent/protocol/frame.hpp"
#include "guest-agent/protocol/messages.hpp"

namespace sbx::agent {

class FrameStream {
public:
    explicit FrameStream(UniqueFd fd) : fd_(std::move(fd)) {}

    [[nodiscard]] int fd() const { return fd_.get(); }

    // The next frame. Errors: the peer closed (errno_value 0, message
    // "connection closed"), a read error, or a malformed frame (framing is
    // then lost: answer with a bad_frame error if possible and close).
    [[nodiscard]] Result<Frame> read();
    // The next frame, which must be a JSON message (parsed).
    [[nodiscard]] Result<Json> read_message();

    [[nodiscard]] Result<void> write_message(const Json& message);
    [[nodiscard]] Result<void> write_data(Channel channel, std::uint64_t offset, std::span<const std::uint8_t> bytes);
    [[nodiscard]] Result<void> write_eof(Channel channel);

    // True when bytes past the last frame are already buffered: poll(2) on
    // fd() would not report them, so read() before polling again.
    [[nodiscard]] bool has_buffered_input() const { return in_pos_ < in_end_; }

    // Bytes read from the socket past the last frame (a stream that turns
    // into raw bytes, as port forwarding does, must forward these first).
    [[nodiscard]] std::vector<std::uint8_t> take_buffered();

    // Half-closes or closes the socket; the object may then be destroyed.
    void shutdown_write();

private:
    [[nodiscard]] Result<void> write_all(std::span<const std::uint8_t> bytes);

    UniqueFd fd_;
    FrameDecoder decoder_;
    std::vector<std::uint8_t> in_;  // a fixed read buffer; [in_pos_, in_end_) not yet fed
    std::size_t in_pos_ = 0;
    std::size_t in_end_ = 0;
    std::mutex write_mutex_;
    std::vector<std::uint8_t> out_;  // reused encode buffer (under write_mutex_)
};

// True for the error read() returns when the peer closed cleanly.
[[nodiscard]] bool is_closed(const Error& error);

}  // namespace sbx::agent
