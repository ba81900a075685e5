// Frame encoding and the incremental decoder, including every way a peer
// can send a bad frame.
#include "guest-agent/protocol/frame.hpp"

#include <doctest/doctest.h>

using namespace sbx::agent;

namespace {

std::vector<Frame> decode_all(const std::vector<std::uint8_t>& bytes, std::size_t split) {
    FrameDecoder d;
    std::vector<Frame> frames;
    std::size_t pos = 0;
    while (pos < bytes.size()) {
        std::size_t n = std::min(split, bytes.size() - pos);
        auto used = d.feed(std::span(bytes).subspan(pos, n));
        REQUIRE(used.has_value());
        pos += *used;
        if (auto f = d.next()) {
            frames.push_back(std::move(*f));
        }
    }
    CHECK(d.pending() == 0);
    return frames;
}

std::vector<std::uint8_t> header(std::uint32_t length, std::uint8_t kind) {
    return {static_cast<std::uint8_t>(length), static_cast<std::uint8_t>(length >> 8),
            static_cast<std::uint8_t>(length >> 16), static_cast<std::uint8_t>(length >> 24), kind};
}

}  // namespace

TEST_CASE("frames round-trip in any split") {
    std::vector<std::uint8_t> bytes;
    encode_json(R"({"type":"hello"})", bytes);
    std::vector<std::uint8_t> payload(70000);
    for (std::size_t i = 0; i < payload.size(); ++i) {
        payload[i] = static_cast<std::uint8_t>(i * 7);
    }
    encode_data(Channel::Stdout, 1234567890123ULL, payload, bytes);
    encode_data(Channel::Stderr, 0, {}, bytes);
    encode_eof(Channel::Content, bytes);
    for (std::size_t split : {std::size_t{1}, std::size_t{3}, std::size_t{4096}, bytes.size()}) {
        auto frames = decode_all(bytes, split);
        REQUIRE(frames.size() == 4);
        CHECK(frames[0].kind == FrameKind::Json);
        CHECK(frames[0].json == R"({"type":"hello"})");
        CHECK(frames[1].kind == FrameKind::Data);
        CHECK(frames[1].channel == Channel::Stdout);
        CHECK(frames[1].offset == 1234567890123ULL);
        CHECK(frames[1].data == payload);
        CHECK(frames[2].data.empty());
        CHECK(frames[3].kind == FrameKind::Eof);
        CHECK(frames[3].channel == Channel::Content);
    }
}

TEST_CASE("bad frames are refused from their header, and the decoder stays failed") {
    FrameDecoder d;
    std::vector<std::uint8_t> bad;
    SUBCASE("zero length") { bad = header(0, 1); }
    SUBCASE("unknown kind") { bad = header(5, 9); }
    SUBCASE("oversized JSON") { bad = header(kMaxJsonBody + 2, 1); }
    SUBCASE("empty JSON") { bad = header(1, 1); }
    SUBCASE("oversized data") { bad = header(kMaxFrameBody + 2, 2); }
    SUBCASE("data shorter than its header") { bad = header(5, 2); }
    SUBCASE("EOF with a body") { bad = header(3, 3); }
    SUBCASE("unknown channel") {
        bad = header(2, 3);
        bad.push_back(7);
    }
    CHECK_FALSE(d.feed(bad).has_value());
    std::vector<std::uint8_t> good;
    encode_eof(Channel::Stdin, good);
    CHECK_FALSE(d.feed(good).has_value());
}

TEST_CASE("a truncated frame stays pending") {
    std::vector<std::uint8_t> bytes;
    encode_json(R"({"type":"x"})", bytes);
    bytes.pop_back();
    FrameDecoder d;
    REQUIRE(d.feed(bytes).has_value());
    CHECK_FALSE(d.next().has_value());
    CHECK(d.pending() == bytes.size());
}
