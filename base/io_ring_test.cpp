// IoRing over a real io_uring: bounded waits, cancelling requests in flight
// (a read from an empty pipe never ends by itself), and a signal that ends a
// wait with the code "interrupted" rather than passing for a completion.
#include "base/io_ring.hpp"

#include <doctest/doctest.h>
#include <pthread.h>
#include <sys/uio.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <string>
#include <thread>
#include <vector>

#include "base/unique_fd.hpp"

using namespace sbx;
using namespace std::chrono_literals;

namespace {

struct Pipe {
    UniqueFd read_end;
    UniqueFd write_end;
    Pipe() {
        std::array<int, 2> fds{};
        REQUIRE(::pipe(fds.data()) == 0);
        read_end = UniqueFd(fds[0]);
        write_end = UniqueFd(fds[1]);
    }
};

std::vector<std::pair<std::uint64_t, int>> reap_all(IoRing& ring) {
    std::vector<std::pair<std::uint64_t, int>> seen;
    ring.reap([&](std::uint64_t data, int res) { seen.emplace_back(data, res); });
    return seen;
}

}  // namespace

TEST_CASE("a wait with nothing in flight ends at its timeout") {
    Pipe pipe;
    auto ring = IoRing::create(8, pipe.read_end.get());
    REQUIRE(ring);
    const auto start = std::chrono::steady_clock::now();
    auto waited = ring->submit_and_wait_one(100ms);
    REQUIRE(waited);
    CHECK_FALSE(*waited);
    CHECK(std::chrono::steady_clock::now() - start >= 90ms);
}

TEST_CASE("cancel_all ends a request that would never complete; its own completion is not reaped") {
    Pipe pipe;
    auto ring = IoRing::create(8, pipe.read_end.get());
    REQUIRE(ring);
    std::array<char, 16> buffer{};
    iovec iov{buffer.data(), buffer.size()};
    REQUIRE(ring->readv(7, &iov, 1, 0) != nullptr);
    auto waited = ring->submit_and_wait_one(50ms);
    REQUIRE(waited);
    CHECK_FALSE(*waited);  // the pipe is empty: the read stays in flight
    REQUIRE(ring->cancel_all());
    std::vector<std::pair<std::uint64_t, int>> seen;
    for (int i = 0; i < 40 && seen.empty(); ++i) {
        REQUIRE(ring->submit_and_wait_one(50ms));
        seen = reap_all(*ring);
    }
    REQUIRE(seen.size() == 1);
    CHECK(seen[0].first == 7);
    CHECK((seen[0].second == -ECANCELED || seen[0].second == -EINTR));
    REQUIRE(ring->submit_and_wait_one(10ms));
    CHECK(reap_all(*ring).empty());  // the cancel's completion stays inside the ring
}

TEST_CASE("a signal ends a wait with the code \"interrupted\"") {
    struct sigaction sa{};
    sa.sa_handler = [](int) {};
    sigemptyset(&sa.sa_mask);  // no SA_RESTART
    struct sigaction old{};
    REQUIRE(::sigaction(SIGUSR1, &sa, &old) == 0);
    Pipe pipe;
    auto ring = IoRing::create(8, pipe.read_end.get());
    REQUIRE(ring);
    std::string code;
    std::chrono::steady_clock::duration took{};
    std::atomic<bool> waiting{false};
    std::atomic<bool> done{false};
    std::thread waiter([&] {
        waiting = true;
        const auto start = std::chrono::steady_clock::now();
        auto waited = ring->submit_and_wait_one(10s);
        took = std::chrono::steady_clock::now() - start;
        code = waited ? std::string("no error") : waited.error().code;
        done = true;
    });
    while (!waiting) {
        std::this_thread::yield();
    }
    // Signals until the wait has ended (one sent before it blocks is lost).
    for (int i = 0; i < 200 && !done; ++i) {
        ::pthread_kill(waiter.native_handle(), SIGUSR1);
        std::this_thread::sleep_for(10ms);
    }
    waiter.join();
    ::sigaction(SIGUSR1, &old, nullptr);
    CHECK(code == "interrupted");
    CHECK(took < 5s);
}
