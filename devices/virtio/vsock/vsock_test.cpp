// virtio-vsock against the mock driver and real Unix sockets: opening,
// configuration, the hybrid handshake both ways, RST and shutdown, hostile
// TX packets, reset, and snapshots (TRANSPORT_RESET on restore). Flow
// control and scale are in vsock_flow_test.cpp.
#include "devices/virtio/vsock/vsock.hpp"

#include <doctest/doctest.h>
#include <sys/stat.h>

#include <fstream>

#include "devices/virtio/vsock/vsock_test_util.hpp"

using namespace sbx;
using namespace sbx::virtio;
using namespace sbx::virtio::vsock;
using namespace sbx::virtio::vsock::testing;
using sbx::virtio::testing::check_conformance;

TEST_CASE("conformance") {
    TempDir dir;
    int n = 0;
    check_conformance([&] { return open_vsock(dir.path + "/v" + std::to_string(n++)); }, DeviceType::Vsock, kTxQueue);
}

TEST_CASE("open checks the cid and the socket path") {
    TempDir dir;
    VsockConfig config;
    config.uds_path = dir.path + "/v.sock";

    SUBCASE("reserved cids are refused") {
        for (std::uint64_t cid : {0ULL, 1ULL, 2ULL, 0xffffffffULL, 1ULL << 32}) {
            config.guest_cid = cid;
            CHECK_FALSE(Vsock::open(config).has_value());
        }
    }
    SUBCASE("listens, and unlinks the socket when destroyed") {
        {
            auto v = Vsock::open(config);
            REQUIRE(v.has_value());
            struct stat st {};
            REQUIRE(::lstat(config.uds_path.c_str(), &st) == 0);
            CHECK(S_ISSOCK(st.st_mode));
        }
        CHECK_FALSE(std::filesystem::exists(config.uds_path));
    }
    SUBCASE("a path in use by a live listener is refused, naming it") {
        auto first = Vsock::open(config);
        REQUIRE(first.has_value());
        auto second = Vsock::open(config);
        REQUIRE_FALSE(second.has_value());
        CHECK(second.error().to_string().find(config.uds_path) != std::string::npos);
    }
    SUBCASE("a stale socket is replaced") {
        { UniqueFd stale = unix_listener(config.uds_path); }  // closed, file left behind
        REQUIRE(std::filesystem::exists(config.uds_path));
        auto v = Vsock::open(config);
        REQUIRE(v.has_value());
        UniqueFd client = unix_client(config.uds_path);
        CHECK(client);
    }
    SUBCASE("a path that is not a socket is refused, naming it") {
        std::ofstream(config.uds_path) << "data";
        auto v = Vsock::open(config);
        REQUIRE_FALSE(v.has_value());
        CHECK(v.error().to_string().find(config.uds_path) != std::string::npos);
        CHECK(std::filesystem::exists(config.uds_path));  // left alone
    }
    SUBCASE("bind errors name the path") {
        config.uds_path = dir.path + "/missing-dir/v.sock";
        auto v = Vsock::open(config);
        REQUIRE_FALSE(v.has_value());
        CHECK(v.error().to_string().find(config.uds_path) != std::string::npos);
        config.uds_path = dir.path + "/" + std::string(200, 'x');
        CHECK_FALSE(Vsock::open(config).has_value());
    }
}

TEST_CASE("configuration space holds le64 guest_cid; rx, tx, event queues") {
    TempDir dir;
    VsockConfig config;
    config.uds_path = dir.path + "/v.sock";
    config.guest_cid = 0x12345678;
    auto v = Vsock::open(config);
    REQUIRE(v.has_value());
    CHECK((*v)->queue_sizes().size() == 3);
    TestBed bed(std::move(*v));
    CHECK(bed.config32(0) == 0x12345678);
    CHECK(bed.config32(4) == 0);
}

TEST_CASE("host connects: CONNECT, REQUEST, RESPONSE, OK line, data both ways") {
    Fixture f;
    HostConnection c = host_connect(f, 1234);
    GuestStream& s = *c.stream;
    CHECK(f.device->stats().connections == 1);

    send_text(c.fd.get(), "hello guest");
    REQUIRE(f.guest->run_until([&] { return s.received.size() == 11; }));
    CHECK(as_text(s.received) == "hello guest");

    const std::string reply = "hello host";
    CHECK(f.guest->write(s, std::span(reinterpret_cast<const std::uint8_t*>(reply.data()), reply.size())) ==
          reply.size());
    std::string got;
    REQUIRE(f.guest->run_until([&] {
        got += as_text(recv_some(c.fd.get()));
        return got.size() == reply.size();
    }));
    CHECK(got == reply);
}

TEST_CASE("bytes the host sends right after its CONNECT line reach the guest") {
    Fixture f;
    UniqueFd host = unix_client(f.uds);
    send_text(host.get(), "CONNECT 7\nearly bytes");
    std::optional<Packet> request;
    REQUIRE(f.guest->run_until([&] { return (request = f.guest->take_unclaimed(Op::Request)).has_value(); }));
    GuestStream& s = f.guest->accept(*request);
    REQUIRE(f.guest->run_until([&] { return s.received.size() == 11; }));
    CHECK(as_text(s.received) == "early bytes");
    CHECK(as_text(recv_some(host.get())) == "OK " + std::to_string(request->header.src_port) + "\n");
}

TEST_CASE("the CONNECT line is split across writes") {
    Fixture f;
    UniqueFd host = unix_client(f.uds);
    send_text(host.get(), "CONN");
    f.guest->settle();
    CHECK(f.device->stats().pending_handshakes == 1);
    send_text(host.get(), "ECT 99\n");
    std::optional<Packet> request;
    REQUIRE(f.guest->run_until([&] { return (request = f.guest->take_unclaimed(Op::Request)).has_value(); }));
    CHECK(request->header.dst_port == 99);
    CHECK(f.device->stats().pending_handshakes == 0);
}

TEST_CASE("a bad CONNECT line closes the host socket") {
    for (const std::string& line : std::vector<std::string>{"HELLO 5\n", "CONNECT\n", "CONNECT abc\n", "CONNECT 4294967296\n", "CONNECT -1\n",
                             "connect 5\n", "CONNECT 5 6\n", std::string(100, 'C')}) {
        CAPTURE(line);
        Fixture f;
        UniqueFd host = unix_client(f.uds);
        send_some(host.get(), std::span(reinterpret_cast<const std::uint8_t*>(line.data()), line.size()));
        bool eof = false;
        REQUIRE(f.guest->run_until([&] {
            recv_some(host.get(), &eof);
            return eof;
        }));
        CHECK(f.device->stats().pending_handshakes == 0);
        CHECK(f.device->stats().connections == 0);
        CHECK(f.guest->unclaimed().empty());
    }
}

TEST_CASE("a client that closes before its line is forgotten; idle clients are capped") {
    Fixture f;
    {
        UniqueFd partial = unix_client(f.uds);
        send_text(partial.get(), "CONNECT 1");
        f.guest->settle();
        CHECK(f.device->stats().pending_handshakes == 1);
    }
    REQUIRE(f.guest->run_until([&] { return f.device->stats().pending_handshakes == 0; }));

    std::vector<UniqueFd> idle;
    for (int i = 0; i < 80; ++i) {
        idle.push_back(unix_client(f.uds));
        f.guest->settle(1);
    }
    f.guest->settle();
    CHECK(f.device->stats().pending_handshakes == 64);
    bool eof = false;
    recv_some(idle.front().get(), &eof);
    CHECK(eof);  // the oldest were closed
    recv_some(idle.back().get(), &eof);
    CHECK_FALSE(eof);
    // A real client still gets through.
    HostConnection c = host_connect(f, 5);
    CHECK(c.stream != nullptr);
}

TEST_CASE("the guest answers RST: nothing listens, the host socket is closed") {
    Fixture f;
    UniqueFd host = unix_client(f.uds);
    send_text(host.get(), "CONNECT 4000\n");
    std::optional<Packet> request;
    REQUIRE(f.guest->run_until([&] { return (request = f.guest->take_unclaimed(Op::Request)).has_value(); }));
    f.guest->send(f.guest->header(Op::Rst, 4000, request->header.src_port));
    bool eof = false;
    REQUIRE(f.guest->run_until([&] {
        recv_some(host.get(), &eof);
        return eof;
    }));
    CHECK(f.device->stats().connections == 0);
    CHECK(f.guest->unclaimed().empty());  // no RST answers an RST
}

TEST_CASE("guest connects to a host listener at <uds>_<port>") {
    Fixture f;
    UniqueFd listener = unix_listener(f.uds + "_5000");
    GuestStream& s = f.guest->connect(1025, 5000);
    REQUIRE(f.guest->run_until([&] { return s.saw(Op::Response); }));
    CHECK(s.peer_buf_alloc == kConnectionBufAlloc);
    UniqueFd host(::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    REQUIRE(host);

    const auto data = pattern(10000, 1);
    CHECK(f.guest->write(s, data) == data.size());
    std::vector<std::uint8_t> got;
    REQUIRE(f.guest->run_until([&] {
        auto part = recv_some(host.get());
        got.insert(got.end(), part.begin(), part.end());
        return got.size() == data.size();
    }));
    CHECK(got == data);

    send_text(host.get(), "pong");
    REQUIRE(f.guest->run_until([&] { return s.received.size() == 4; }));
    CHECK(as_text(s.received) == "pong");
}

TEST_CASE("guest connects to a port nobody listens on: RST") {
    Fixture f;
    GuestStream& s = f.guest->connect(1025, 5001);
    REQUIRE(f.guest->run_until([&] { return s.reset; }));
    CHECK_FALSE(s.saw(Op::Response));
    CHECK(f.device->stats().connections == 0);
}

TEST_CASE("guest RST on an established stream closes the host socket") {
    Fixture f;
    HostConnection c = host_connect(f, 80);
    f.guest->send(f.guest->header(Op::Rst, 80, c.local_port));
    bool eof = false;
    REQUIRE(f.guest->run_until([&] {
        recv_some(c.fd.get(), &eof);
        return eof;
    }));
    CHECK(f.device->stats().connections == 0);
    CHECK_FALSE(c.stream->reset);  // no RST answers an RST
    // Later packets for it are answered with RST.
    f.guest->send(f.guest->header(Op::CreditUpdate, 80, c.local_port));
    REQUIRE(f.guest->run_until([&] { return c.stream->reset; }));
}

TEST_CASE("shutdown: guest SEND, then host EOF, then the final RST") {
    Fixture f;
    HostConnection c = host_connect(f, 22);
    GuestStream& s = *c.stream;
    const std::string last = "last words";
    f.guest->write(s, std::span(reinterpret_cast<const std::uint8_t*>(last.data()), last.size()));
    PacketHeader shut = f.guest->header(Op::Shutdown, 22, c.local_port);
    shut.flags = kShutdownSend;
    f.guest->send(shut);
    // The host reads the data, then EOF, and can still write.
    std::string got;
    bool eof = false;
    REQUIRE(f.guest->run_until([&] {
        got += as_text(recv_some(c.fd.get(), &eof));
        return eof;
    }));
    CHECK(got == last);
    send_text(c.fd.get(), "still here");
    REQUIRE(f.guest->run_until([&] { return s.received.size() == 10; }));
    CHECK_FALSE(s.reset);
    // The host closes its side: the guest sees SHUTDOWN, then RST, and
    // the device forgets the stream.
    ::shutdown(c.fd.get(), SHUT_WR);
    REQUIRE(f.guest->run_until([&] { return s.reset; }));
    CHECK((s.shutdown_flags & kShutdownSend) != 0);
    CHECK(f.device->stats().connections == 0);
}

TEST_CASE("shutdown: host closes first, guest closes after") {
    Fixture f;
    HostConnection c = host_connect(f, 22);
    GuestStream& s = *c.stream;
    send_text(c.fd.get(), "bye");
    c.fd.reset();
    REQUIRE(f.guest->run_until([&] { return s.shutdown_flags != 0; }));
    CHECK(as_text(s.received) == "bye");
    CHECK(s.shutdown_flags == (kShutdownSend | kShutdownRcv));  // the host socket is gone
    CHECK(f.device->stats().connections == 1);
    // Linux answers a full shutdown with RST.
    f.guest->send(f.guest->header(Op::Rst, 22, c.local_port));
    f.guest->settle();
    CHECK(f.device->stats().connections == 0);
}

TEST_CASE("shutdown: guest closes both ways (as close() does): RST once flushed") {
    Fixture f;
    HostConnection c = host_connect(f, 22);
    GuestStream& s = *c.stream;
    PacketHeader shut = f.guest->header(Op::Shutdown, 22, c.local_port);
    shut.flags = kShutdownSend | kShutdownRcv;
    f.guest->send(shut);
    REQUIRE(f.guest->run_until([&] { return s.reset; }));
    bool eof = false;
    recv_some(c.fd.get(), &eof);
    CHECK(eof);
    CHECK(f.device->stats().connections == 0);
}

TEST_CASE("hostile TX packets") {
    Fixture f;
    HostConnection c = host_connect(f, 9);
    GuestStream& s = *c.stream;
    auto data = pattern(100, 3);

    SUBCASE("a wrong src_cid or dst_cid is dropped; the stream goes on") {
        PacketHeader h = f.guest->header(Op::Rw, 9, c.local_port);
        h.len = static_cast<std::uint32_t>(data.size());
        h.src_cid = 4;
        f.guest->send(h, data);
        h.src_cid = GuestDriver::kCid;
        h.dst_cid = 7;
        f.guest->send(h, data);
        h.op = static_cast<std::uint16_t>(Op::Rst);
        h.len = 0;
        f.guest->send(h);  // an RST with a bad address does not kill it either
        f.guest->settle();
        CHECK(recv_some(c.fd.get()).empty());
        CHECK_FALSE(s.reset);
        CHECK(f.guest->unclaimed().empty());
        CHECK(f.device->stats().connections == 1);
        CHECK_FALSE(f.bed->needs_reset());
    }
    SUBCASE("len over 64 KiB resets the stream") {
        auto big = pattern(kMaxPacketPayload + 1, 4);
        PacketHeader h = f.guest->header(Op::Rw, 9, c.local_port);
        h.len = static_cast<std::uint32_t>(big.size());
        f.guest->send(h, big);
        REQUIRE(f.guest->run_until([&] { return s.reset; }));
        CHECK(f.device->stats().connections == 0);
        CHECK_FALSE(f.bed->needs_reset());
    }
    SUBCASE("a type other than stream resets the stream") {
        PacketHeader h = f.guest->header(Op::Rw, 9, c.local_port);
        h.type = 2;  // SEQPACKET, not offered
        f.guest->send(h);
        REQUIRE(f.guest->run_until([&] { return s.reset; }));
    }
    SUBCASE("an unknown op or a second REQUEST resets the stream") {
        PacketHeader h = f.guest->header(Op::Request, 9, c.local_port);
        SUBCASE("REQUEST") {}
        SUBCASE("op 0") { h.op = 0; }
        SUBCASE("op 99") { h.op = 99; }
        f.guest->send(h);
        REQUIRE(f.guest->run_until([&] { return s.reset; }));
        bool eof = false;
        recv_some(c.fd.get(), &eof);
        CHECK(eof);
    }
    SUBCASE("packets for unknown connections get RST, except RST") {
        PacketHeader h = f.guest->header(Op::Rw, 9, 4242);
        h.len = static_cast<std::uint32_t>(data.size());
        f.guest->send(h, data);
        std::optional<Packet> rst;
        REQUIRE(f.guest->run_until([&] { return (rst = f.guest->take_unclaimed(Op::Rst)).has_value(); }));
        CHECK(rst->header.src_port == 4242);
        CHECK(rst->header.dst_port == 9);
        f.guest->send(f.guest->header(Op::Rst, 9, 4242));
        f.guest->settle();
        CHECK(f.guest->unclaimed().empty());
    }
    SUBCASE("trailing bytes after len are ignored (as vhost does)") {
        PacketHeader h = f.guest->header(Op::Rw, 9, c.local_port);
        h.len = 10;
        f.guest->send(h, data);
        std::vector<std::uint8_t> got;
        REQUIRE(f.guest->run_until([&] { return !(got = recv_some(c.fd.get())).empty(); }));
        CHECK(got == std::vector<std::uint8_t>(data.begin(), data.begin() + 10));
        CHECK_FALSE(f.bed->needs_reset());
    }
    SUBCASE("len beyond the chain's readable bytes: NEEDS_RESET") {
        PacketHeader h = f.guest->header(Op::Rw, 9, c.local_port);
        h.len = static_cast<std::uint32_t>(data.size() + 1);
        f.guest->send(h, data);
        CHECK(f.bed->needs_reset());
    }
    SUBCASE("a header shorter than 44 bytes: NEEDS_RESET") {
        WireHeader wire = encode_header(f.guest->header(Op::CreditRequest, 9, c.local_port));
        f.guest->send_raw({std::vector<std::uint8_t>(wire.begin(), wire.begin() + 40)});
        CHECK(f.bed->needs_reset());
    }
    SUBCASE("a header split over descriptors is fine") {
        PacketHeader h = f.guest->header(Op::Rw, 9, c.local_port);
        h.len = 5;
        WireHeader wire = encode_header(h);
        f.guest->send_raw({std::vector<std::uint8_t>(wire.begin(), wire.begin() + 10),
                           std::vector<std::uint8_t>(wire.begin() + 10, wire.end()), {'a', 'b', 'c', 'd', 'e'}});
        std::string got;
        REQUIRE(f.guest->run_until([&] { return !(got = as_text(recv_some(c.fd.get()))).empty(); }));
        CHECK(got == "abcde");
    }
    SUBCASE("data on a stream the guest shut for sending resets it") {
        PacketHeader shut = f.guest->header(Op::Shutdown, 9, c.local_port);
        shut.flags = kShutdownSend;
        f.guest->send(shut);
        PacketHeader h = f.guest->header(Op::Rw, 9, c.local_port);
        h.len = 3;
        f.guest->send(h, std::span(data).first(3));
        REQUIRE(f.guest->run_until([&] { return s.reset; }));
    }
}

TEST_CASE("an RX buffer too small for a header: NEEDS_RESET") {
    Fixture f(FixtureOptions{.rx_size = 40});
    UniqueFd host = unix_client(f.uds);
    send_text(host.get(), "CONNECT 1\n");
    REQUIRE(f.guest->run_until([&] { return f.bed->needs_reset(); }, 2000));
}

TEST_CASE("reset closes every stream and keeps the listener") {
    Fixture f;
    HostConnection a = host_connect(f, 1);
    UniqueFd pending = unix_client(f.uds);
    f.guest->settle();
    CHECK(f.device->stats().pending_handshakes == 1);

    f.bed->set_reg(mmio_reg::kStatus, 0);
    CHECK(f.device->stats().connections == 0);
    CHECK(f.device->stats().pending_handshakes == 0);
    bool eof = false;
    recv_some(a.fd.get(), &eof);
    CHECK(eof);
    recv_some(pending.get(), &eof);
    CHECK(eof);

    // Start again: a new driver, a new connection through the same socket.
    f.bed->start();
    f.guest = std::make_unique<GuestDriver>(*f.bed);
    f.guest->give_rx();
    HostConnection b = host_connect(f, 2);
    send_text(b.fd.get(), "again");
    REQUIRE(f.guest->run_until([&] { return b.stream->received.size() == 5; }));
}

TEST_CASE("a REQUEST reusing the ports of a stream still closing starts a new stream") {
    Fixture f(FixtureOptions{.give_rx = false});
    UniqueFd listener = unix_listener(f.uds + "_6000");
    f.guest->connect(1030, 6000);
    PacketHeader shut = f.guest->header(Op::Shutdown, 1030, 6000);
    shut.flags = kShutdownSend | kShutdownRcv;
    f.guest->send(shut);  // closed before any RX buffer carried RESPONSE or RST
    UniqueFd first(::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    REQUIRE(first);
    bool eof = false;
    recv_some(first.get(), &eof);
    CHECK(eof);

    GuestStream& again = f.guest->connect(1030, 6000);
    f.guest->give_rx();
    REQUIRE(f.guest->run_until([&] { return again.saw(Op::Response); }));
    f.guest->settle();
    CHECK_FALSE(again.reset);
    CHECK(f.device->stats().connections == 1);
}

namespace {

// Posts `n` event buffers as Linux does (one struct virtio_vsock_event each).
std::vector<sbx::virtio::testing::OfferedChain> give_event_buffers(TestBed& bed, int n) {
    std::vector<sbx::virtio::testing::OfferedChain> offered;
    for (int i = 0; i < n; ++i) {
        offered.push_back(bed.drivers[kEventQueue]->offer({}, std::array<std::uint32_t, 1>{4}));
    }
    bed.notify(kEventQueue);
    return offered;
}

// The TRANSPORT_RESET event (§5.10.6.7) in the event buffer `chain`.
void check_transport_reset(TestBed& bed, const sbx::virtio::testing::OfferedChain& chain) {
    auto used = bed.drivers[kEventQueue]->take_used();
    REQUIRE(used.has_value());
    CHECK(used->head == chain.head);
    CHECK(used->len == 4);
    CHECK(bed.drivers[kEventQueue]->read(chain.writable[0].first, 4) ==
          std::vector<std::uint8_t>{0, 0, 0, 0});
    CHECK_FALSE(bed.drivers[kEventQueue]->take_used().has_value());  // one event only
}

}  // namespace

TEST_CASE("snapshot: the restored device sends TRANSPORT_RESET, and new connections work") {
    Fixture f;
    auto events = give_event_buffers(*f.bed, 4);
    CHECK_FALSE(f.bed->drivers[kEventQueue]->take_used().has_value());  // kept for the event
    HostConnection old = host_connect(f, 1234);
    send_text(old.fd.get(), "before");
    REQUIRE(f.guest->run_until([&] { return old.stream->received.size() == 6; }));
    const std::string restored_uds = f.dir.path + "/restored.sock";  // the restored VM's socket
    const int irqs = f.bed->irq.count;
    check_state_round_trip(
        *f.bed, [&] { return open_vsock(restored_uds); }, [](TestBed&) {},
        [&](TestBed& bed) {
            check_transport_reset(bed, events[0]);
            CHECK(bed.irq.count > irqs);
            give_event_buffers(bed, 1);  // Linux hands the buffer back once it has handled the event
            // The old host socket went with the old device.
            bool eof = false;
            REQUIRE(f.guest->run_until([&] {
                recv_some(old.fd.get(), &eof);
                return eof;
            }));
            f.uds = restored_uds;
            HostConnection c = host_connect(f, 1235);
            send_text(c.fd.get(), "after restore");
            REQUIRE(f.guest->run_until([&] { return c.stream->received.size() == 13; }));
            CHECK(as_text(c.stream->received) == "after restore");
            const std::string reply = "to the host";
            CHECK(f.guest->write(*c.stream, std::span(reinterpret_cast<const std::uint8_t*>(reply.data()),
                                                      reply.size())) == reply.size());
            std::string got;
            REQUIRE(f.guest->run_until([&] {
                got += as_text(recv_some(c.fd.get()));
                return got.size() == reply.size();
            }));
            CHECK(got == reply);
        });
}

TEST_CASE("snapshot: a host CONNECT waits until the driver has taken the TRANSPORT_RESET") {
    Fixture f;
    auto events = give_event_buffers(*f.bed, 4);
    const std::string restored_uds = f.dir.path + "/restored.sock";
    check_state_round_trip(
        *f.bed, [&] { return open_vsock(restored_uds); }, [](TestBed&) {},
        [&](TestBed& bed) {
            check_transport_reset(bed, events[0]);
            // A REQUEST handled ahead of the event would be reset with the
            // old VM's streams: none reaches the guest before the driver
            // hands the event buffer back.
            UniqueFd early = unix_client(restored_uds);
            send_text(early.get(), "CONNECT 1236\n");
            const auto request_seen = [&] {
                return std::any_of(f.guest->unclaimed().begin(), f.guest->unclaimed().end(), [](const Packet& p) {
                    return p.op() == Op::Request && p.header.dst_port == 1236;
                });
            };
            const auto& restored = dynamic_cast<const Vsock&>(bed.transport->device());
            CHECK_FALSE(f.guest->run_until(request_seen, 300));
            CHECK(restored.stats().pending_handshakes == 1);
            give_event_buffers(bed, 1);
            CHECK(f.guest->run_until(request_seen));
            CHECK(restored.stats().pending_handshakes == 0);
        });
}

TEST_CASE("snapshot: with no event buffer posted, TRANSPORT_RESET waits for one") {
    Fixture f;
    const std::string restored_uds = f.dir.path + "/restored.sock";
    check_state_round_trip(
        *f.bed, [&] { return open_vsock(restored_uds); }, [](TestBed&) {},
        [&](TestBed& bed) {
            CHECK_FALSE(bed.drivers[kEventQueue]->take_used().has_value());
            auto events = give_event_buffers(bed, 2);
            check_transport_reset(bed, events[0]);
        });
}

TEST_CASE("snapshot: the restored device shows its own cid; the saved one is checked as a cid") {
    TempDir dir;
    Fixture f;
    const auto bytes = f.bed->transport->save_state();
    VsockConfig config;
    config.uds_path = dir.path + "/fork.sock";
    config.guest_cid = 77;
    auto forked = Vsock::open(config);
    REQUIRE(forked.has_value());
    f.bed->replace(std::move(*forked));
    REQUIRE(f.bed->transport->restore_state(bytes));
    CHECK(f.bed->config32(0) == 77);

    auto parts = sbx::virtio::testing::SavedTransport::parse(bytes);
    for (std::uint64_t cid : {0ULL, 2ULL, 0xffffffffULL, 1ULL << 40}) {
        CAPTURE(cid);
        ByteWriter device;
        device.u16(Vsock::kStateVersion);
        device.u64(cid);
        parts.device = device.take();
        sbx::virtio::testing::check_refused(*f.bed, parts.bytes(), "a reserved cid");
    }
}

TEST_CASE("snapshot: corrupt states are refused") {
    TempDir dir;
    int n = 0;
    sbx::virtio::testing::check_state_refusals(
        [&] { return open_vsock(dir.path + "/v" + std::to_string(n++)); });
}
