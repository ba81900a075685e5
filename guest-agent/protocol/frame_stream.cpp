#include "guest-agent/protocol/frame_stream.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace sbx::agent {

namespace {
constexpr std::string_view kClosed = "connection closed";
constexpr std::size_t kReadChunk = 256 * 1024;
}  // namespace

bool is_closed(const Error& error) { return error.errno_value == 0 && error.message == kClosed; }

Result<Frame> FrameStream::read() {
    while (true) {
        if (auto frame = decoder_.next()) {
            return std::move(*frame);
        }
        if (in_pos_ == in_end_) {
            // Sized once (not per read: resizing would zero 256 KiB each time).
            if (in_.empty()) {
                in_.resize(kReadChunk);
            }
            in_pos_ = in_end_ = 0;
            ssize_t n = 0;
            do {
                n = ::read(fd_.get(), in_.data(), in_.size());
            } while (n < 0 && errno == EINTR);
            if (n < 0) {
                return sys_error("reading a frame");
            }
            in_end_ = static_cast<std::size_t>(n);
            if (n == 0) {
                if (decoder_.pending() > 0) {
                    return make_error("connection closed in the middle of a frame");
                }
                return make_error(std::string(kClosed));
            }
        }
        auto used = decoder_.feed(std::span(in_).subspan(in_pos_, in_end_ - in_pos_));
        if (!used) {
            return used.error();
        }
        in_pos_ += *used;
    }
}

Result<Json> FrameStream::read_message() {
    auto frame = read();
    if (!frame) {
        return frame.error();
    }
    if (frame->kind != FrameKind::Json) {
        return make_error("expected a JSON message, got a data frame");
    }
    return parse_message(frame->json);
}

Result<void> FrameStream::write_all(std::span<const std::uint8_t> bytes) {
    while (!bytes.empty()) {
        ssize_t n = ::send(fd_.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            if (errno == ENOTSOCK) {  // a pipe in tests
                n = ::write(fd_.get(), bytes.data(), bytes.size());
                if (n < 0) {
                    return sys_error("writing a frame");
                }
            } else {
                return sys_error("writing a frame");
            }
        }
        bytes = bytes.subspan(static_cast<std::size_t>(n));
    }
    return ok();
}

Result<void> FrameStream::write_message(const Json& message) {
    // Invalid UTF-8 (a file name, a command's output) is replaced, never thrown.
    std::string text = message.dump(-1, ' ', false, Json::error_handler_t::replace);
    if (text.size() > kMaxJsonBody) {
        return make_error("message of {} bytes exceeds the {}-byte JSON limit", text.size(), kMaxJsonBody);
    }
    std::lock_guard lock(write_mutex_);
    out_.clear();
    encode_json(text, out_);
    return write_all(out_);
}

Result<void> FrameStream::write_data(Channel channel, std::uint64_t offset, std::span<const std::uint8_t> bytes) {
    std::lock_guard lock(write_mutex_);
    while (true) {
        auto chunk = bytes.first(std::min(bytes.size(), kMaxDataPayload));
        out_.clear();
        encode_data(channel, offset, chunk, out_);
        if (auto r = write_all(out_); !r) {
            return r;
        }
        bytes = bytes.subspan(chunk.size());
        offset += chunk.size();
        if (bytes.empty()) {
            return ok();
        }
    }
}

Result<void> FrameStream::write_eof(Channel channel) {
    std::lock_guard lock(write_mutex_);
    out_.clear();
    encode_eof(channel, out_);
    return write_all(out_);
}

std::vector<std::uint8_t> FrameStream::take_buffered() {
    std::vector<std::uint8_t> rest(in_.begin() + static_cast<std::ptrdiff_t>(in_pos_),
                                   in_.begin() + static_cast<std::ptrdiff_t>(in_end_));
    in_pos_ = in_end_ = 0;
    return rest;
}

void FrameStream::shutdown_write() { ::shutdown(fd_.get(), SHUT_WR); }

}  // namespace sbx::agent
