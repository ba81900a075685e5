// The agent protocol's framing (docs/agent-protocol.md, "Frames"): every
// frame is a 32-bit little-endian length, a kind byte and a body, with a
// hard bound on the length so a peer can never make the other side buffer
// more than kMaxFrameBody bytes. The decoder is incremental and refuses a
// frame as soon as its header is known to be bad.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"

namespace sbx::agent {

enum class FrameKind : std::uint8_t {
    Json = 1,  // a UTF-8 JSON object
    Data = 2,  // channel byte, u64 offset, bytes
    Eof = 3,   // channel byte: no more data on that channel
};

// Channels of Data and Eof frames.
enum class Channel : std::uint8_t { Stdin = 0, Stdout = 1, Stderr = 2, Content = 3 };

inline constexpr std::size_t kFrameHeader = 5;            // length + kind
inline constexpr std::size_t kMaxFrameBody = 1 << 20;     // kind excluded
inline constexpr std::size_t kMaxJsonBody = 64 * 1024;
inline constexpr std::size_t kDataHeader = 9;             // channel + offset
inline constexpr std::size_t kMaxDataPayload = kMaxFrameBody - kDataHeader;

struct Frame {
    FrameKind kind = FrameKind::Json;
    // Json: the text. Data/Eof: the channel, and for Data the offset and bytes.
    std::string json;
    Channel channel = Channel::Stdin;
    std::uint64_t offset = 0;
    std::vector<std::uint8_t> data;
};

// Appends one encoded frame to `out`.
void encode_json(std::string_view json, std::vector<std::uint8_t>& out);
void encode_data(Channel channel, std::uint64_t offset, std::span<const std::uint8_t> bytes,
                 std::vector<std::uint8_t>& out);
void encode_eof(Channel channel, std::vector<std::uint8_t>& out);

// Feeds bytes in any split; yields whole frames. After an error the decoder
// stays failed: framing is lost, and the connection must be closed.
class FrameDecoder {
public:
    // Consumes bytes from `in`; returns how many were used (fewer than
    // in.size() when a frame completed: call next() and feed the rest).
    [[nodiscard]] Result<std::size_t> feed(std::span<const std::uint8_t> in);
    // The completed frame, once; nullopt while one is still incomplete.
    [[nodiscard]] std::optional<Frame> next();
    // Bytes of a frame received so far (0 between frames).
    [[nodiscard]] std::size_t pending() const { return buffer_.size(); }

private:
    [[nodiscard]] Result<void> check_header();
    [[nodiscard]] Result<Frame> parse_body() const;

    std::vector<std::uint8_t> buffer_;
    std::uint32_t body_length_ = 0;  // known once the header is in
    std::optional<Frame> ready_;
    bool failed_ = false;
};

}  // namespace sbx::agent
