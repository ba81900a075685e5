// IoRing over a real io_uring: bounded waits, cancelling requests in flight
// (a read from an empty pipe never ends by itself), a signal that ends a
// wait with the code "interrupted" rather than passing for a completion, and
// the ring's restrictions (its own operations pass, others get EACCES).
#include "base/io_ring.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
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

namespace {

struct TempFile {
    UniqueFd fd;
    TempFile() {
        std::string name = "/tmp/sbx-io-ring-test.XXXXXX";
        fd = UniqueFd(::mkstemp(name.data()));
        REQUIRE(fd.get() >= 0);
        ::unlink(name.c_str());
    }
};

// Waits (bounded) for `count` completions.
std::vector<std::pair<std::uint64_t, int>> reap_count(IoRing& ring, std::size_t count) {
    std::vector<std::pair<std::uint64_t, int>> seen;
    for (int i = 0; i < 100 && seen.size() < count; ++i) {
        REQUIRE(ring.submit_and_wait_one(50ms));
        for (auto& c : reap_all(ring)) {
            seen.push_back(c);
        }
    }
    return seen;
}

}  // namespace

TEST_CASE("the operations IoRing prepares pass its restrictions") {
    TempFile file;
    auto ring = IoRing::create(8, file.fd.get());
    REQUIRE(ring);
    std::string text = "restricted ring";
    iovec out{text.data(), text.size()};
    REQUIRE(ring->fallocate(1, 0, 0, 4096) != nullptr);
    REQUIRE(ring->submit());
    REQUIRE(reap_count(*ring, 1) == std::vector<std::pair<std::uint64_t, int>>{{1, 0}});
    REQUIRE(ring->writev(2, &out, 1, 100) != nullptr);
    REQUIRE(ring->submit());
    REQUIRE(reap_count(*ring, 1) == std::vector<std::pair<std::uint64_t, int>>{{2, static_cast<int>(text.size())}});
    REQUIRE(ring->fdatasync(3) != nullptr);
    REQUIRE(ring->submit());
    REQUIRE(reap_count(*ring, 1) == std::vector<std::pair<std::uint64_t, int>>{{3, 0}});
    std::string back(text.size(), '\0');
    iovec in{back.data(), back.size()};
    // Through a file that is not the registered one (qcow2's backing file).
    TempFile other;
    REQUIRE(::pwrite(other.fd.get(), text.data(), text.size(), 0) == static_cast<ssize_t>(text.size()));
    REQUIRE(ring->readv(4, &in, 1, 0, other.fd.get()) != nullptr);
    REQUIRE(ring->submit());
    REQUIRE(reap_count(*ring, 1) == std::vector<std::pair<std::uint64_t, int>>{{4, static_cast<int>(text.size())}});
    CHECK(back == text);
}

TEST_CASE("a submission outside the allowed operations or flags fails with EACCES") {
    TempFile file;
    auto ring = IoRing::create(8, file.fd.get());
    REQUIRE(ring);
    std::array<char, 8> buffer{};
    iovec iov{buffer.data(), buffer.size()};

    // The request a compromised thread would make: open a host file through
    // the ring, which its seccomp filter cannot see.
    io_uring_sqe* open = ring->readv(1, &iov, 1, 0);
    REQUIRE(open != nullptr);
    io_uring_prep_openat(open, AT_FDCWD, "/etc/hostname", O_RDONLY, 0);
    io_uring_sqe_set_data64(open, 1);
    io_uring_sqe* nop = ring->readv(2, &iov, 1, 0);
    REQUIRE(nop != nullptr);
    io_uring_prep_nop(nop);
    io_uring_sqe_set_data64(nop, 2);
    // An allowed operation with a flag outside IOSQE_FIXED_FILE.
    io_uring_sqe* drain = ring->readv(3, &iov, 1, 0);
    REQUIRE(drain != nullptr);
    io_uring_sqe_set_flags(drain, IOSQE_FIXED_FILE | IOSQE_IO_DRAIN);
    REQUIRE(ring->submit());
    auto seen = reap_count(*ring, 3);
    std::sort(seen.begin(), seen.end());
    CHECK(seen == std::vector<std::pair<std::uint64_t, int>>{{1, -EACCES}, {2, -EACCES}, {3, -EACCES}});
}
