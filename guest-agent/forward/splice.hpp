// Joins two connected stream sockets both ways: the byte pump behind every
// port forward (docs/agent-protocol.md, "Port forwarding"). One thread, one
// poll loop, a bounded pipe per direction that splice(2) moves pages
// through (about a fifth less CPU than copying through this process; a
// buffer of the same size where no pipe can be had). An end of stream on one side
// is passed on as shutdown(SHUT_WR) on the other once the buffered bytes
// are written, so half-closed protocols work; the join ends when both
// directions are done or either side fails.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/result.hpp"

namespace sbx::agent {

// Bytes held per direction (pipe or buffer): 256 KiB a join at most.
inline constexpr std::size_t kSpliceBuffer = 128 * 1024;

struct SpliceTotals {
    std::uint64_t a_to_b = 0;
    std::uint64_t b_to_a = 0;
};

struct SpliceEnds {
    int a = -1;
    int b = -1;
    // Bytes already read from a (or b) that go out first, e.g. what a
    // FrameStream read past its last frame before the stream turned raw.
    std::vector<std::uint8_t> a_first{};
    std::vector<std::uint8_t> b_first{};
    // When readable, the join stops at once (an owner shutting down); -1: none.
    int stop_fd = -1;
    // false: copy through a buffer even where splice(2) would work.
    bool zero_copy = true;
};

// Blocks until both directions reached end of stream and were passed on,
// or a side failed (the Error says which), or stop_fd became readable.
// The sockets are made non-blocking (splice(2) into a blocking socket
// would block) and stay open: their owners close them.
Result<SpliceTotals> splice_streams(SpliceEnds ends);

}  // namespace sbx::agent
