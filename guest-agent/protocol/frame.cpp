#include "guest-agent/protocol/frame.hpp"

#include <algorithm>
#include <cstring>

namespace sbx::agent {
namespace {

void put_u32(std::vector<std::uint8_t>& out, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) {
        out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
    }
}

void put_u64(std::vector<std::uint8_t>& out, std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
        out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
    }
}

std::uint64_t get_le(const std::uint8_t* p, int bytes) {
    std::uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) {
        v = (v << 8) | p[i];
    }
    return v;
}

}  // namespace

void encode_json(std::string_view json, std::vector<std::uint8_t>& out) {
    put_u32(out, static_cast<std::uint32_t>(json.size() + 1));
    out.push_back(static_cast<std::uint8_t>(FrameKind::Json));
    out.insert(out.end(), json.begin(), json.end());
}

void encode_data(Channel channel, std::uint64_t offset, std::span<const std::uint8_t> bytes,
                 std::vector<std::uint8_t>& out) {
    put_u32(out, static_cast<std::uint32_t>(1 + kDataHeader + bytes.size()));
    out.push_back(static_cast<std::uint8_t>(FrameKind::Data));
    out.push_back(static_cast<std::uint8_t>(channel));
    put_u64(out, offset);
    out.insert(out.end(), bytes.begin(), bytes.end());
}

void encode_eof(Channel channel, std::vector<std::uint8_t>& out) {
    put_u32(out, 2);
    out.push_back(static_cast<std::uint8_t>(FrameKind::Eof));
    out.push_back(static_cast<std::uint8_t>(channel));
}

Result<void> FrameDecoder::check_header() {
    const auto length = static_cast<std::uint32_t>(get_le(buffer_.data(), 4));
    const std::uint8_t kind = buffer_[4];
    if (length == 0) {
        return make_error("frame of length 0");
    }
    const std::size_t body = length - 1;
    switch (static_cast<FrameKind>(kind)) {
    case FrameKind::Json:
        if (body == 0 || body > kMaxJsonBody) {
            return make_error("JSON frame of {} bytes (1 to {} allowed)", body, kMaxJsonBody);
        }
        break;
    case FrameKind::Data:
        if (body < kDataHeader || body > kMaxFrameBody) {
            return make_error("data frame of {} bytes ({} to {} allowed)", body, kDataHeader, kMaxFrameBody);
        }
        break;
    case FrameKind::Eof:
        if (body != 1) {
            return make_error("EOF frame of {} bytes (1 expected)", body);
        }
        break;
    default: return make_error("unknown frame kind {}", kind);
    }
    body_length_ = static_cast<std::uint32_t>(body);
    return ok();
}

Result<Frame> FrameDecoder::parse_body() const {
    Frame f;
    f.kind = static_cast<FrameKind>(buffer_[4]);
    const std::uint8_t* body = buffer_.data() + kFrameHeader;
    if (f.kind == FrameKind::Json) {
        f.json.assign(reinterpret_cast<const char*>(body), body_length_);
        return f;
    }
    if (body[0] > static_cast<std::uint8_t>(Channel::Content)) {
        return make_error("unknown channel {}", body[0]);
    }
    f.channel = static_cast<Channel>(body[0]);
    if (f.kind == FrameKind::Data) {
        f.offset = get_le(body + 1, 8);
        f.data.assign(body + kDataHeader, body + body_length_);
    }
    return f;
}

Result<std::size_t> FrameDecoder::feed(std::span<const std::uint8_t> in) {
    if (failed_) {
        return make_error("frame stream already failed");
    }
    if (ready_) {
        return std::size_t{0};  // the caller must take the frame first
    }
    std::size_t used = 0;
    while (used < in.size()) {
        const std::size_t want = buffer_.size() < kFrameHeader ? kFrameHeader : kFrameHeader + body_length_;
        const std::size_t take = std::min(want - buffer_.size(), in.size() - used);
        buffer_.insert(buffer_.end(), in.begin() + static_cast<std::ptrdiff_t>(used),
                       in.begin() + static_cast<std::ptrdiff_t>(used + take));
        used += take;
        if (buffer_.size() == kFrameHeader && want == kFrameHeader) {
            if (auto r = check_header(); !r) {
                failed_ = true;
                return r.error();
            }
        }
        if (buffer_.size() >= kFrameHeader && buffer_.size() == kFrameHeader + body_length_) {
            auto frame = parse_body();
            if (!frame) {
                failed_ = true;
                return frame.error();
            }
            ready_ = std::move(*frame);
            buffer_.clear();
            body_length_ = 0;
            break;
        }
    }
    return used;
}

std::optional<Frame> FrameDecoder::next() {
    std::optional<Frame> out = std::move(ready_);
    ready_.reset();
    return out;
}

}  // namespace sbx::agent
