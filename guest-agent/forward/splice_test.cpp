// splice_streams on its own: a Unix socket pair joined to a TCP pair (the
// agent's two kinds of ends), in both modes (splice through pipes, copy
// through buffers): ordering, half-closes, large concurrent transfers,
// a stalled reader, stopping, and a vanished peer.
#include <doctest/doctest.h>
#include <sys/resource.h>

#include <future>

#include "guest-agent/forward/forward_test_util.hpp"
#include "guest-agent/forward/splice.hpp"

using namespace sbx;
using namespace sbx::agent;
using namespace sbx::agent::testing;

namespace {

struct Pair {
    UniqueFd near;  // joined by splice_streams
    UniqueFd far;   // the test's end
};

Pair unix_pair(int type = SOCK_STREAM) {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, type | SOCK_CLOEXEC, 0, fds) == 0);
    return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

Pair tcp_pair() {
    auto address = parse_tcp_address("127.0.0.1", 0);
    auto listener = listen_tcp(*address);
    REQUIRE(listener);
    auto far = connect_local_tcp(*local_port(listener->get()));
    UniqueFd near(::accept4(listener->get(), nullptr, nullptr, SOCK_CLOEXEC));
    REQUIRE(near);
    return {std::move(near), std::move(far)};
}

// a: a Unix socket pair, b: a TCP connection; the join runs on a thread.
struct Join {
    Pair a;
    Pair b = tcp_pair();
    std::future<Result<SpliceTotals>> result;

    explicit Join(bool zero_copy, std::vector<std::uint8_t> a_first = {}, std::vector<std::uint8_t> b_first = {},
                  int stop_fd = -1, int a_type = SOCK_STREAM)
        : a(unix_pair(a_type)) {
        SpliceEnds ends{.a = a.near.get(),
                        .b = b.near.get(),
                        .a_first = std::move(a_first),
                        .b_first = std::move(b_first),
                        .stop_fd = stop_fd,
                        .zero_copy = zero_copy};
        result = std::async(std::launch::async, [ends = std::move(ends)]() mutable { return splice_streams(std::move(ends)); });
    }
    Result<SpliceTotals> finish() {
        REQUIRE(result.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
        return result.get();
    }
};

std::vector<std::uint8_t> bytes(std::string_view s) { return {s.begin(), s.end()}; }

double cpu_seconds() {
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
    return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

}  // namespace

TEST_CASE("splice_streams") {
    bool zero_copy = true;
    SUBCASE("through pipes") { zero_copy = true; }
    SUBCASE("through buffers") { zero_copy = false; }
    CAPTURE(zero_copy);

    SUBCASE("handed-over bytes go first, half-closes pass each way") {
        Join j(zero_copy, bytes("first "), bytes("FIRST "));
        send_all(j.a.far.get(), "then");
        ::shutdown(j.a.far.get(), SHUT_WR);
        CHECK(read_to_eof(j.b.far.get()) == "first then");
        // b may still talk after a finished, and the other way round.
        send_all(j.b.far.get(), "THEN");
        ::shutdown(j.b.far.get(), SHUT_WR);
        CHECK(read_to_eof(j.a.far.get()) == "FIRST THEN");
        auto totals = j.finish();
        REQUIRE(totals);
        CHECK(totals->a_to_b == 10);
        CHECK(totals->b_to_a == 10);
    }
    SUBCASE("large transfers both ways at once arrive whole") {
        Join j(zero_copy);
        constexpr std::uint64_t kBytes = 32ull << 20;
        auto a_sender = std::async(std::launch::async, [&] {
            auto h = send_pattern(j.a.far.get(), kBytes);
            ::shutdown(j.a.far.get(), SHUT_WR);
            return h;
        });
        auto b_sender = std::async(std::launch::async, [&] {
            auto h = send_pattern(j.b.far.get(), kBytes);
            ::shutdown(j.b.far.get(), SHUT_WR);
            return h;
        });
        auto at_b = std::async(std::launch::async, [&] { return receive_hashed(j.b.far.get()); });
        auto at_a = receive_hashed(j.a.far.get());
        auto b_got = at_b.get();
        const auto a_sent = a_sender.get();
        const auto b_sent = b_sender.get();
        CHECK(b_got.bytes == kBytes);
        CHECK(b_got.hash == a_sent);
        CHECK(at_a.bytes == kBytes);
        CHECK(at_a.hash == b_sent);
        auto totals = j.finish();
        REQUIRE(totals);
        CHECK(totals->a_to_b == kBytes);
        CHECK(totals->b_to_a == kBytes);
    }
    SUBCASE("a stalled reader holds the writer back without spinning") {
        // Small packets: a socket type without its own splice_read (like
        // vsock) fills one pipe slot per read, so the pipe runs out of
        // slots long before it is out of bytes.
        Join j(zero_copy, {}, {}, -1, SOCK_SEQPACKET);
        // Small TCP buffers, so the join has to hold bytes back at once.
        const int small = 4096;
        REQUIRE(::setsockopt(j.b.near.get(), SOL_SOCKET, SO_SNDBUF, &small, sizeof small) == 0);
        REQUIRE(::setsockopt(j.b.far.get(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small) == 0);
        std::atomic<bool> writing{true};
        std::uint64_t written = 0;
        auto writer = std::async(std::launch::async, [&] {
            const std::string message(10, 'm');
            for (int i = 0; i < 50000; ++i) {
                if (::send(j.a.far.get(), message.data(), message.size(), MSG_NOSIGNAL) != 10) {
                    break;
                }
                written += 10;
            }
            ::shutdown(j.a.far.get(), SHUT_WR);
            writing = false;
        });
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        const double cpu_before = cpu_seconds();
        std::this_thread::sleep_for(std::chrono::milliseconds(400));
        const double stalled_cpu = cpu_seconds() - cpu_before;
        CHECK(stalled_cpu < 0.1);  // a busy loop would burn the whole 0.4 s
        auto got = read_to_eof(j.b.far.get());
        writer.get();
        CHECK(got.size() == written);
        CHECK(got.size() == 500000);
        ::shutdown(j.b.far.get(), SHUT_WR);
        CHECK(j.finish());
    }
    SUBCASE("the stop fd ends an idle join") {
        auto stop = EventFd::create();
        REQUIRE(stop);
        Join j(zero_copy, {}, {}, stop->fd());
        REQUIRE(stop->signal());
        CHECK(j.finish());
    }
    SUBCASE("a vanished peer ends the join with an error") {
        Join j(zero_copy);
        j.b.far.reset();  // closed without reading: a reset for whoever writes
        auto sender = std::async(std::launch::async, [&] { return send_pattern(j.a.far.get(), 8 << 20); });
        auto totals = j.finish();
        CHECK_FALSE(totals);
        j.a.near.reset();  // its owner closes it: the sender sees the end too
        sender.get();
    }
}
