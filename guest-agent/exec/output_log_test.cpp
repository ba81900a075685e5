// The detached-output ring: absolute offsets, channel runs, retention.
#include <doctest/doctest.h>

#include <string>

#include "guest-agent/exec/output_log.hpp"

using namespace sbx::agent;

namespace {

void append(OutputLog& log, Channel channel, std::string_view text) {
    log.append(channel, std::span(reinterpret_cast<const std::uint8_t*>(text.data()), text.size()));
}

std::string text(const std::vector<std::uint8_t>& bytes) {
    return std::string(bytes.begin(), bytes.end());
}

// Everything retained, as "<channel>:<bytes>|" pieces.
std::string dump(const OutputLog& log) {
    std::string out;
    for (auto at = log.first_offset(); at < log.end_offset();) {
        auto piece = log.read(at, 1000);
        out += fmt::format("{}:{}|", static_cast<int>(piece.channel), text(piece.bytes));
        at += piece.bytes.size();
    }
    return out;
}

}  // namespace

TEST_CASE("pieces stop where the channel changes") {
    OutputLog log(64);
    append(log, Channel::Stdout, "abc");
    append(log, Channel::Stdout, "def");
    append(log, Channel::Stderr, "ERR");
    append(log, Channel::Stdout, "g");
    CHECK(log.end_offset() == 10);
    CHECK(dump(log) == "1:abcdef|2:ERR|1:g|");
    auto mid = log.read(4, 1000);
    CHECK(mid.offset == 4);
    CHECK(text(mid.bytes) == "ef");
    CHECK(text(log.read(0, 2).bytes) == "ab");
    CHECK(log.read(10, 100).bytes.empty());
    CHECK(text(log.tail(5)) == "fERRg");
}

TEST_CASE("old bytes fall out of the ring; offsets stay absolute") {
    OutputLog log(8);
    append(log, Channel::Stdout, "01234");
    append(log, Channel::Stderr, "56789");
    CHECK(log.first_offset() == 2);
    CHECK(log.end_offset() == 10);
    CHECK(dump(log) == "1:234|2:56789|");
    CHECK(log.read(1, 10).bytes.empty());      // gone
    append(log, Channel::Stdout, "abcdefgh");  // exactly the capacity
    CHECK(log.first_offset() == 10);
    CHECK(dump(log) == "1:abcdefgh|");
    append(log, Channel::Stderr, "0123456789XYZ");  // more than the capacity at once
    CHECK(log.end_offset() == 31);
    CHECK(log.first_offset() == 23);
    CHECK(dump(log) == "2:56789XYZ|");
    CHECK(text(log.tail(100)) == "56789XYZ");
}

TEST_CASE("channel runs are bounded too") {
    OutputLog log(1000, 4);
    for (int i = 0; i < 6; ++i) {
        append(log, i % 2 == 0 ? Channel::Stdout : Channel::Stderr, std::to_string(i));
    }
    CHECK(log.end_offset() == 6);
    CHECK(log.first_offset() == 2);
    CHECK(dump(log) == "1:2|2:3|1:4|2:5|");
}

TEST_CASE("a ring that wraps many times keeps the last bytes in order") {
    OutputLog log(7);
    std::string all;
    for (int i = 0; i < 100; ++i) {
        std::string chunk = std::to_string(i * 37);
        append(log, Channel::Stdout, chunk);
        all += chunk;
    }
    CHECK(log.end_offset() == all.size());
    CHECK(text(log.tail(7)) == all.substr(all.size() - 7));
    CHECK(text(log.read(all.size() - 3, 10).bytes) == all.substr(all.size() - 3));
}
