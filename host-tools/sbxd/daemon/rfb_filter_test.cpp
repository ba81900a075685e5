// The view-only filter of a desktop link (rfb_filter.hpp) on RFB client
// streams (RFC 6143 §7.1-7.5) cut into pieces at every place: what a
// viewer needs passes byte for byte, input never does, and a stream it
// cannot parse is refused, never guessed at.
#include "host-tools/sbxd/daemon/rfb_filter.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

using namespace sbx;
using namespace sbx::sbxd;

namespace {

std::string bytes(std::initializer_list<int> values) {
    std::string out;
    for (int v : values) {
        out.push_back(static_cast<char>(v));
    }
    return out;
}

std::string be32(std::uint32_t v) {
    return bytes({static_cast<int>(v >> 24), static_cast<int>((v >> 16) & 0xff), static_cast<int>((v >> 8) & 0xff),
                  static_cast<int>(v & 0xff)});
}

const std::string kHandshake = "RFB 003.008\n" + bytes({1}) + bytes({1});  // version, None, ClientInit(shared)

// Client messages (§7.5 and the extensions), each built whole.
const std::string kSetPixelFormat = bytes({0, 0, 0, 0}) + std::string(16, '\x04');  // payload full of 4s
const std::string kSetEncodings = bytes({2, 0, 0, 3}) + be32(0x04050607) + be32(0) + be32(0xFFFFFF21);
const std::string kUpdateRequest = bytes({3, 1, 0, 0, 0, 0, 5, 0, 3, 32});
const std::string kKeyEvent = bytes({4, 1, 0, 0}) + be32(0xff0d);
const std::string kPointerEvent = bytes({5, 1, 0, 10, 0, 20});
const std::string kCutText = bytes({6, 0, 0, 0}) + be32(5) + "hel\x03o";
const std::string kExtendedCutText = bytes({6, 0, 0, 0}) + be32(static_cast<std::uint32_t>(-6)) + bytes({0, 0, 0, 1, 4, 5});
const std::string kContinuousUpdates = bytes({150, 1, 0, 0, 0, 0, 5, 0, 3, 32});
const std::string kFence = bytes({248, 0, 0, 0}) + be32(0x80000002) + bytes({4}) + "\x05\x05\x04\x04";
const std::string kQemuKey = bytes({255, 0, 0, 1}) + be32(0x61) + be32(30);
const std::string kDesktopSize = bytes({251, 0, 5, 0, 3, 32, 1, 0}) + std::string(16, '\x05');
const std::string kXvp = bytes({252, 0, 1, 2});

struct Run {
    std::string out;
    bool ok = true;
};

// Feeds `stream` in pieces whose sizes `next_size` picks.
template <typename NextSize>
Run feed_in_pieces(RfbViewOnlyFilter& filter, const std::string& stream, NextSize next_size) {
    Run run;
    std::size_t at = 0;
    while (at < stream.size()) {
        const std::size_t n = std::min(next_size(), stream.size() - at);
        if (!filter.feed(std::string_view(stream).substr(at, n), run.out)) {
            run.ok = false;
            return run;
        }
        at += n;
    }
    return run;
}

}  // namespace

TEST_CASE("view-only: input is dropped and the rest passes, cut at every place") {
    const std::string stream = kHandshake + kSetPixelFormat + kSetEncodings + kUpdateRequest + kKeyEvent +
                               kPointerEvent + kCutText + kExtendedCutText + kContinuousUpdates + kFence +
                               kQemuKey + kDesktopSize + kXvp + kUpdateRequest;
    const std::string expected =
        kHandshake + kSetPixelFormat + kSetEncodings + kUpdateRequest + kContinuousUpdates + kFence + kUpdateRequest;
    for (std::size_t piece = 1; piece <= stream.size(); ++piece) {
        CAPTURE(piece);
        RfbViewOnlyFilter filter;
        Run run = feed_in_pieces(filter, stream, [piece] { return piece; });
        REQUIRE(run.ok);
        CHECK(run.out == expected);
        CHECK(filter.dropped() == 7);
    }
    std::mt19937 random(16);
    for (int round = 0; round < 200; ++round) {
        RfbViewOnlyFilter filter;
        Run run = feed_in_pieces(filter, stream, [&] { return std::size_t{1} + random() % 9; });
        REQUIRE(run.ok);
        CHECK(run.out == expected);
    }
}

TEST_CASE("view-only: VNC Authentication's response and a 3.7 client pass") {
    RfbViewOnlyFilter filter;
    const std::string handshake = "RFB 003.007\n" + bytes({2}) + std::string(16, '\x05') + bytes({0});
    std::string out;
    REQUIRE(filter.feed(handshake + kPointerEvent + kUpdateRequest, out));
    CHECK(out == handshake + kUpdateRequest);
    // A message cut before its length is known waits for the rest.
    out.clear();
    REQUIRE(filter.feed(kSetEncodings.substr(0, 3), out));
    CHECK(out.empty());
    REQUIRE(filter.feed(kSetEncodings.substr(3), out));
    CHECK(out == kSetEncodings);
}

TEST_CASE("view-only: a long clipboard is skipped without being held") {
    RfbViewOnlyFilter filter;
    std::string out;
    REQUIRE(filter.feed(kHandshake + bytes({6, 0, 0, 0}) + be32(1U << 30), out));
    out.clear();
    const std::string chunk(1 << 16, '\x04');  // looks like KeyEvents, is text
    for (int i = 0; i < 16; ++i) {
        REQUIRE(filter.feed(chunk, out));
    }
    CHECK(out.empty());
}

TEST_CASE("view-only: what the filter cannot parse is refused, then everything is") {
    struct Case {
        const char* what;
        std::string stream;
    };
    const std::vector<Case> cases = {
        {"RFB 3.3 (no security type from the client)", "RFB 003.003\n" + bytes({0})},
        {"not RFB", "GET / HTTP/1.1\r\n"},
        {"another security type", "RFB 003.008\n" + bytes({16})},
        {"an unknown message type", kHandshake + bytes({7, 0, 0, 0})},
        {"a fence over 64 bytes", kHandshake + bytes({248, 0, 0, 0}) + be32(0) + bytes({65})},
        {"another QEMU message", kHandshake + bytes({255, 1, 0, 0})},
    };
    for (const auto& c : cases) {
        CAPTURE(c.what);
        RfbViewOnlyFilter filter;
        std::string out;
        auto fed = filter.feed(c.stream, out);
        REQUIRE_FALSE(fed);
        CHECK(fed.error().code == kRfbRefused);
        CHECK_FALSE(filter.feed(kUpdateRequest, out));
    }
}
