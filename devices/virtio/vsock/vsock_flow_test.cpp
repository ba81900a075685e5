// virtio-vsock flow control (§5.10.6.3) and scale: a slow side never makes
// the device buffer without bound, many streams interleave, and bulk
// transfers arrive intact.
#include <doctest/doctest.h>

#include <chrono>

#include "devices/virtio/vsock/vsock.hpp"
#include "devices/virtio/vsock/vsock_test_util.hpp"

using namespace sbx;
using namespace sbx::virtio;
using namespace sbx::virtio::vsock;
using namespace sbx::virtio::vsock::testing;

namespace {

// Host side of a transfer: writes what the socket takes, reads what came.
struct HostPeer {
    HostPeer(int socket, std::span<const std::uint8_t> data) : fd(socket), to_send(data) {}
    int fd;
    std::span<const std::uint8_t> to_send;
    std::size_t sent = 0;
    std::vector<std::uint8_t> received;
    void step() {
        if (sent < to_send.size()) {
            sent += send_some(fd, to_send.subspan(sent, std::min<std::size_t>(to_send.size() - sent, 256 * 1024)));
        }
        auto part = recv_some(fd);
        received.insert(received.end(), part.begin(), part.end());
    }
};

}  // namespace

TEST_CASE("a host that stops reading: the device holds at most buf_alloc, credit holds the guest back") {
    Fixture f;
    HostConnection c = host_connect(f, 1);
    GuestStream& s = *c.stream;
    const auto data = pattern(4 << 20, 7);
    std::size_t sent = 0;
    for (int round = 0; round < 50; ++round) {
        sent += f.guest->write(s, std::span(data).subspan(sent));
        f.guest->settle(1);
        CHECK(f.device->stats().buffered_to_host <= kConnectionBufAlloc);
    }
    CHECK(sent < data.size());
    CHECK(s.credit() == 0);
    CHECK(f.device->stats().buffered_to_host > 0);
    MESSAGE("guest sent " << sent << " bytes before running out of credit; device holds "
                          << f.device->stats().buffered_to_host);

    // The host reads again: credit updates let the guest finish.
    std::vector<std::uint8_t> got;
    REQUIRE(f.guest->run_until(
        [&] {
            auto part = recv_some(c.fd.get());
            got.insert(got.end(), part.begin(), part.end());
            sent += f.guest->write(s, std::span(data).subspan(sent));
            return got.size() == data.size();
        },
        20000));
    CHECK(got == data);
    CHECK(f.device->stats().buffered_to_host == 0);
}

TEST_CASE("a guest that sends beyond its credit is reset") {
    Fixture f;
    HostConnection c = host_connect(f, 1);
    GuestStream& s = *c.stream;
    const auto chunk = pattern(64 * 1024, 8);
    std::size_t sent = 0;
    while (!s.reset && sent < (16u << 20)) {
        PacketHeader h = f.guest->header(Op::Rw, 1, c.local_port);
        h.len = static_cast<std::uint32_t>(chunk.size());
        f.guest->send(h, chunk);  // ignoring credit
        sent += chunk.size();
        CHECK(f.device->stats().buffered_to_host <= kConnectionBufAlloc);
        f.guest->settle(1);
    }
    CHECK(s.reset);
    CHECK(f.device->stats().connections == 0);
    CHECK(f.device->stats().buffered_to_host == 0);
}

TEST_CASE("without RX buffers host data stays in the host socket") {
    Fixture f;
    HostConnection c = host_connect(f, 1);
    GuestStream& s = *c.stream;
    f.guest->refill = false;
    const auto data = pattern(8 << 20, 9);
    HostPeer host(c.fd.get(), data);
    for (int i = 0; i < 200 && host.sent < data.size(); ++i) {
        host.step();
        f.guest->settle(1);
    }
    // The device filled the guest's buffers and stopped: the host socket
    // is full, and the device is not spinning on it.
    CHECK(f.guest->rx_buffers_held_by_device() == 0);
    CHECK(host.sent < data.size());
    CHECK(f.bed->pump(20) == 0);
    const std::size_t delivered = s.received.size();
    CHECK(delivered <= 64 * 4096);
    MESSAGE("host wrote " << host.sent << " bytes before its socket filled; guest got " << delivered);

    f.guest->refill = true;
    f.guest->give_rx();
    REQUIRE(f.guest->run_until(
        [&] {
            host.step();
            return s.received.size() == data.size();
        },
        20000));
    CHECK(s.received == data);
}

TEST_CASE("without credit the device stops reading the host socket and asks for credit") {
    Fixture f;
    HostConnection c = host_connect(f, 1, 8192);
    GuestStream& s = *c.stream;
    s.reading = false;
    const auto data = pattern(1 << 20, 10);
    HostPeer host(c.fd.get(), data);
    for (int i = 0; i < 100; ++i) {
        host.step();
        f.guest->settle(1);
    }
    CHECK(s.received.size() == 8192);  // exactly the credit it had
    CHECK(s.saw(Op::CreditRequest));
    CHECK(host.sent < data.size());
    CHECK(f.bed->pump(20) == 0);  // EPOLLIN is not watched meanwhile

    s.reading = true;
    f.guest->consume(s);
    REQUIRE(f.guest->run_until(
        [&] {
            host.step();
            return s.received.size() == data.size();
        },
        20000));
    CHECK(s.received == data);
}

TEST_CASE("100 concurrent streams with interleaved data both ways") {
    Fixture f;
    constexpr int kHostInitiated = 60;
    constexpr int kGuestInitiated = 40;
    constexpr std::size_t kBytes = 48 * 1024;
    struct Stream {
        UniqueFd host;
        GuestStream* guest = nullptr;
        std::vector<std::uint8_t> to_guest, to_host;
        std::size_t guest_sent = 0;
        std::unique_ptr<HostPeer> peer;
    };
    std::vector<Stream> streams(kHostInitiated + kGuestInitiated);
    for (int i = 0; i < kHostInitiated; ++i) {
        HostConnection c = host_connect(f, 1000 + static_cast<std::uint32_t>(i));
        streams[i].host = std::move(c.fd);
        streams[i].guest = c.stream;
    }
    UniqueFd listener = unix_listener(f.uds + "_7000");
    for (int i = kHostInitiated; i < kHostInitiated + kGuestInitiated; ++i) {
        streams[i].guest = &f.guest->connect(2000 + static_cast<std::uint32_t>(i), 7000);
        REQUIRE(f.guest->run_until([&] { return streams[i].guest->saw(Op::Response); }));
        streams[i].host = UniqueFd(::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
        REQUIRE(streams[i].host);
    }
    CHECK(f.device->stats().connections == streams.size());
    for (std::size_t i = 0; i < streams.size(); ++i) {
        Stream& st = streams[i];
        st.to_guest = pattern(kBytes + i * 97, static_cast<std::uint32_t>(2 * i));
        st.to_host = pattern(kBytes + i * 89, static_cast<std::uint32_t>(2 * i + 1));
        st.peer = std::make_unique<HostPeer>(st.host.get(), st.to_guest);
    }
    // Round-robin small writes from every stream, both sides at once.
    REQUIRE(f.guest->run_until(
        [&] {
            bool done = true;
            for (Stream& st : streams) {
                const std::size_t piece = std::min<std::size_t>(st.to_host.size() - st.guest_sent, 1500);
                st.guest_sent += f.guest->write(*st.guest, std::span(st.to_host).subspan(st.guest_sent, piece));
                st.peer->step();
                done = done && st.guest->received.size() == st.to_guest.size() &&
                       st.peer->received.size() == st.to_host.size();
            }
            return done;
        },
        60000));
    for (Stream& st : streams) {
        CHECK(st.guest->received == st.to_guest);
        CHECK(st.peer->received == st.to_host);
    }
}

TEST_CASE("connections past the cap are refused") {
    Fixture f(FixtureOptions{.max_connections = 4});
    std::vector<HostConnection> open;
    for (std::uint32_t i = 0; i < 4; ++i) {
        open.push_back(host_connect(f, 10 + i));
    }
    UniqueFd extra = unix_client(f.uds);
    send_text(extra.get(), "CONNECT 99\n");
    bool eof = false;
    REQUIRE(f.guest->run_until([&] {
        recv_some(extra.get(), &eof);
        return eof;
    }));
    UniqueFd listener = unix_listener(f.uds + "_7000");
    GuestStream& refused = f.guest->connect(3000, 7000);
    REQUIRE(f.guest->run_until([&] { return refused.reset; }));
    CHECK(f.device->stats().connections == 4);
    // Closing one makes room again.
    f.guest->send(f.guest->header(Op::Rst, 10, open[0].local_port));
    f.guest->settle();
    GuestStream& accepted = f.guest->connect(3001, 7000);
    REQUIRE(f.guest->run_until([&] { return accepted.saw(Op::Response); }));
}

TEST_CASE("bulk transfer of several MiB each way, checked by content") {
    for (std::uint32_t rx_size : {4096u + static_cast<std::uint32_t>(kHeaderSize), 64u * 1024 + 44}) {
        CAPTURE(rx_size);
        Fixture f(FixtureOptions{.rx_size = rx_size});
        HostConnection c = host_connect(f, 1);
        GuestStream& s = *c.stream;
        const auto to_guest = pattern(8 << 20, 11);
        const auto to_host = pattern(8 << 20, 12);
        HostPeer host(c.fd.get(), to_guest);
        std::size_t guest_sent = 0;
        const auto start = std::chrono::steady_clock::now();
        REQUIRE(f.guest->run_until(
            [&] {
                guest_sent += f.guest->write(s, std::span(to_host).subspan(guest_sent));
                host.step();
                return s.received.size() == to_guest.size() && host.received.size() == to_host.size();
            },
            60000));
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        CHECK(s.received == to_guest);
        CHECK(host.received == to_host);
        MESSAGE("16 MiB through the device (mock driver, RX buffers of " << rx_size << " bytes) in " << seconds
                                                                          << " s");
    }
}
