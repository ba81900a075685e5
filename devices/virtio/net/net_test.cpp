// virtio-net against a real frame backend: one end of a SOCK_SEQPACKET
// socket pair, which carries one frame (header first) per message like a
// tap with IFF_VNET_HDR. The tap itself is exercised in tap_test.cpp.
#include "devices/virtio/net/net.hpp"

#include <doctest/doctest.h>
#include <sys/socket.h>

#include <map>

#include "devices/virtio/virtio_test_util.hpp"

using namespace sbx;
using namespace sbx::virtio;
using namespace sbx::virtio::testing;

namespace {

constexpr MacAddress kMac{0x52, 0x54, 0x00, 0x12, 0x34, 0x56};
constexpr std::uint64_t kPlain =
    kFeatureVersion1 | kFeatureIndirectDesc | net_feature::kMac | net_feature::kStatus;
constexpr std::uint64_t kMergeable = kPlain | net_feature::kMrgRxbuf | kFeatureEventIdx;
constexpr std::uint64_t kTso = kMergeable | net_feature::kGuestCsum | net_feature::kGuestTso4 |
                               net_feature::kGuestTso6 | net_feature::kCsum | net_feature::kHostTso4;
constexpr std::size_t kRx = Net::kRxQueue;
constexpr std::size_t kTx = Net::kTxQueue;

struct Backend {
    std::unique_ptr<Net> net;
    UniqueFd peer;  // the host side: what a tap would be
};

Backend make_backend(int device_sndbuf = 0) {
    std::array<int, 2> fds{};
    REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds.data()) == 0);
    if (device_sndbuf > 0) {
        REQUIRE(::setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &device_sndbuf, sizeof device_sndbuf) == 0);
    }
    auto net = Net::from_fd(UniqueFd(fds[0]), NetConfig{"test0", kMac});
    REQUIRE(net.has_value());
    return Backend{std::move(*net), UniqueFd(fds[1])};
}

// For the conformance checks: the peers stay open for the whole run, so no
// device sees its backend hang up.
std::unique_ptr<VirtioDevice> make_device() {
    static std::vector<UniqueFd> peers;
    Backend b = make_backend();
    peers.push_back(std::move(b.peer));
    return std::move(b.net);
}

std::vector<std::uint8_t> pattern(std::size_t n, std::uint8_t seed) {
    std::vector<std::uint8_t> v(n);
    for (std::size_t i = 0; i < n; ++i) {
        v[i] = static_cast<std::uint8_t>(seed + i * 7);
    }
    return v;
}

// A virtio_net_hdr_v1 and `frame_len` frame bytes; num_buffers is left 0
// as a tap leaves it.
std::vector<std::uint8_t> packet(std::size_t frame_len, std::uint8_t seed) {
    auto p = pattern(kNetHeaderSize + frame_len, seed);
    std::fill(p.begin(), p.begin() + kNetHeaderSize, 0);
    p[0] = 1;  // flags: NEEDS_CSUM, passed through untouched
    return p;
}

void send_packet(const UniqueFd& peer, const std::vector<std::uint8_t>& p) {
    REQUIRE(::send(peer.get(), p.data(), p.size(), MSG_DONTWAIT) == static_cast<ssize_t>(p.size()));
}

std::optional<std::vector<std::uint8_t>> receive_packet(const UniqueFd& peer) {
    std::vector<std::uint8_t> buf(70000);
    const ssize_t n = ::recv(peer.get(), buf.data(), buf.size(), MSG_DONTWAIT);
    if (n < 0) {
        return std::nullopt;
    }
    buf.resize(static_cast<std::size_t>(n));
    return buf;
}

std::uint16_t num_buffers(const std::vector<std::uint8_t>& received) {
    return static_cast<std::uint16_t>(received[10] | (received[11] << 8));
}

// Receive buffers the test offered, by head.
struct RxChains {
    MockDriver& driver;
    std::map<std::uint16_t, OfferedChain> by_head;

    std::uint16_t offer(std::uint32_t len) {
        std::array<std::uint32_t, 1> lens{len};
        auto chain = driver.offer({}, lens);
        by_head[chain.head] = chain;
        return chain.head;
    }
    // The bytes the device wrote into the chain of `used`.
    std::vector<std::uint8_t> contents(const UsedElem& used) const {
        const auto& [addr, len] = by_head.at(used.head).writable.at(0);
        REQUIRE(used.len <= len);
        return driver.read(addr, used.len);
    }
};

std::vector<UsedElem> take_all_used(MockDriver& driver) {
    std::vector<UsedElem> out;
    while (auto used = driver.take_used()) {
        out.push_back(*used);
    }
    return out;
}

}  // namespace

TEST_CASE("conformance") {
    check_conformance(make_device, DeviceType::Net, Net::kTxQueue);
}

TEST_CASE("MAC and link status in configuration space (§5.1.4)") {
    TestBed bed(make_device());
    std::array<std::uint8_t, 10> config{};
    bed.transport->read(mmio_reg::kConfig, config);
    CHECK(std::equal(kMac.begin(), kMac.end(), config.begin()));
    CHECK(config[6] == 1);  // VIRTIO_NET_S_LINK_UP
    CHECK(config[8] == 1);  // max_virtqueue_pairs
    const std::uint64_t f = bed.device_features();
    CHECK((f & net_feature::kMac) != 0);
    CHECK((f & net_feature::kMrgRxbuf) != 0);
    CHECK((f & net_feature::kStatus) != 0);
    CHECK((f & net_feature::kGuestTso4) != 0);
}

TEST_CASE("without a configured MAC the device makes up a unicast, locally administered one") {
    std::array<int, 2> fds{};
    REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds.data()) == 0);
    UniqueFd peer(fds[1]);
    auto net = Net::from_fd(UniqueFd(fds[0]), NetConfig{"test0", std::nullopt});
    REQUIRE(net.has_value());
    const MacAddress mac = (*net)->mac();
    CHECK((mac[0] & 1) == 0);
    CHECK((mac[0] & 2) != 0);
}

TEST_CASE("a backend that is neither a tap nor a frame socket is refused") {
    std::array<int, 2> fds{};
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds.data()) == 0);
    UniqueFd peer(fds[1]);
    auto net = Net::from_fd(UniqueFd(fds[0]), NetConfig{"stream0", kMac});
    REQUIRE_FALSE(net.has_value());
    CHECK(net.error().message.find("stream0") != std::string::npos);
}

TEST_CASE("transmit: header and frame reach the backend byte for byte (§5.1.6.2)") {
    Backend b = make_backend();
    Net* net = b.net.get();
    TestBed bed(std::move(b.net));
    bed.start(kMergeable);
    const auto sent = packet(300, 3);
    // Header and frame split over three buffers, one of them mid-frame.
    std::vector<std::vector<std::uint8_t>> bufs = {{sent.begin(), sent.begin() + 12},
                                                   {sent.begin() + 12, sent.begin() + 100},
                                                   {sent.begin() + 100, sent.end()}};
    auto offered = bed.drivers[kTx]->offer(bufs, {});
    bed.notify(kTx);
    auto got = receive_packet(b.peer);
    REQUIRE(got);
    CHECK(*got == sent);
    auto used = bed.drivers[kTx]->take_used();
    REQUIRE(used);
    CHECK(used->head == offered.head);
    CHECK(used->len == 0);
    CHECK(bed.irq.count == 1);
    CHECK(net->counters().tx_frames == 1);
    CHECK(net->counters().tx_bytes == 300);

    SUBCASE("through an indirect table as well") {
        const auto second = packet(60, 9);
        std::vector<std::vector<std::uint8_t>> one = {second};
        bed.drivers[kTx]->offer(one, {}, true);
        bed.notify(kTx);
        got = receive_packet(b.peer);
        REQUIRE(got);
        CHECK(*got == second);
    }
}

TEST_CASE("receive: a frame spans several mergeable buffers with num_buffers set (§5.1.6.4)") {
    Backend b = make_backend();
    Net* net = b.net.get();
    TestBed bed(std::move(b.net));
    bed.start(kMergeable);
    RxChains rx{*bed.drivers[kRx], {}};
    for (int i = 0; i < 3; ++i) {
        rx.offer(600);  // 1800 bytes: room for the largest frame without TSO
    }
    bed.notify(kRx);
    const auto sent = packet(1400, 5);
    send_packet(b.peer, sent);
    CHECK(bed.pump(1000) == 1);
    auto used = take_all_used(*bed.drivers[kRx]);
    REQUIRE(used.size() == 3);
    CHECK(used[0].len == 600);
    CHECK(used[1].len == 600);
    CHECK(used[2].len == sent.size() - 1200);
    std::vector<std::uint8_t> received;
    for (const auto& u : used) {
        auto part = rx.contents(u);
        received.insert(received.end(), part.begin(), part.end());
    }
    CHECK(num_buffers(received) == 3);
    received[10] = received[11] = 0;
    CHECK(received == sent);
    CHECK(bed.irq.count == 1);
    CHECK(net->counters().rx_frames == 1);
    CHECK(net->counters().rx_bytes == 1400);

    SUBCASE("a small frame next takes one buffer") {
        for (int i = 0; i < 3; ++i) {
            rx.offer(600);
        }
        bed.notify(kRx);
        const auto small = packet(40, 8);
        send_packet(b.peer, small);
        CHECK(bed.pump(1000) == 1);
        used = take_all_used(*bed.drivers[kRx]);
        REQUIRE(used.size() == 1);
        auto got = rx.contents(used[0]);
        CHECK(num_buffers(got) == 1);
        got[10] = 0;
        CHECK(got == small);
    }
}

TEST_CASE("receive with TSO accepted: a 64 KiB super-packet over page-sized buffers") {
    Backend b = make_backend();
    TestBed bed(std::move(b.net));
    bed.start(kTso);
    RxChains rx{*bed.drivers[kRx], {}};
    for (int i = 0; i < 17; ++i) {
        rx.offer(4096);  // 69632 bytes: what a 65565-byte frame needs
    }
    bed.notify(kRx);
    const auto sent = packet(20000, 1);
    send_packet(b.peer, sent);
    CHECK(bed.pump(1000) == 1);
    auto used = take_all_used(*bed.drivers[kRx]);
    REQUIRE(used.size() == 5);
    std::vector<std::uint8_t> received;
    for (const auto& u : used) {
        auto part = rx.contents(u);
        received.insert(received.end(), part.begin(), part.end());
    }
    CHECK(num_buffers(received) == 5);
    received[10] = 0;
    CHECK(received == sent);
}

TEST_CASE("receive without mergeable buffers: one chain per frame, num_buffers 1") {
    Backend b = make_backend();
    Net* net = b.net.get();
    TestBed bed(std::move(b.net));
    bed.start(kPlain);
    RxChains rx{*bed.drivers[kRx], {}};
    const std::uint16_t first = rx.offer(Net::kMaxFrame);
    rx.offer(Net::kMaxFrame);
    bed.notify(kRx);
    const auto largest = packet(Net::kMaxFrame - kNetHeaderSize, 2);
    send_packet(b.peer, largest);
    send_packet(b.peer, packet(64, 4));
    CHECK(bed.pump(1000) == 1);
    auto used = take_all_used(*bed.drivers[kRx]);
    REQUIRE(used.size() == 2);
    CHECK(used[0].head == first);
    CHECK(used[0].len == largest.size());
    CHECK(used[1].len == kNetHeaderSize + 64);
    auto got = rx.contents(used[0]);
    CHECK(num_buffers(got) == 1);
    got[10] = 0;
    CHECK(got == largest);
    CHECK(num_buffers(rx.contents(used[1])) == 1);

    SUBCASE("a frame larger than the chain is dropped and counted, never truncated") {
        const std::uint16_t next = rx.offer(Net::kMaxFrame);
        bed.notify(kRx);
        send_packet(b.peer, packet(Net::kMaxFrame, 6));  // one byte too many
        send_packet(b.peer, packet(10, 7));
        CHECK(bed.pump(1000) == 1);
        used = take_all_used(*bed.drivers[kRx]);
        REQUIRE(used.size() == 1);
        CHECK(used[0].head == next);  // the chain waited for the next frame
        CHECK(used[0].len == kNetHeaderSize + 10);
        CHECK(net->counters().rx_dropped_oversize == 1);
        CHECK_FALSE(bed.needs_reset());
    }
}

TEST_CASE("receive waits for buffers without watching the backend, and resumes on notify") {
    Backend b = make_backend();
    Net* net = b.net.get();
    TestBed bed(std::move(b.net));
    bed.start(kMergeable);
    const auto sent = packet(500, 11);
    send_packet(b.peer, sent);
    CHECK(bed.pump(1000) == 1);
    CHECK(net->counters().rx_waits == 1);
    CHECK(bed.pump(50) == 0);  // not spinning on a readable backend
    RxChains rx{*bed.drivers[kRx], {}};
    rx.offer(1000);  // not yet room for a largest frame: still waiting
    bed.notify(kRx);
    CHECK_FALSE(bed.drivers[kRx]->take_used());
    CHECK(bed.pump(50) == 0);
    rx.offer(1000);
    bed.notify(kRx);
    auto used = take_all_used(*bed.drivers[kRx]);
    REQUIRE(used.size() == 1);
    auto got = rx.contents(used[0]);
    CHECK(num_buffers(got) == 1);
    got[10] = 0;
    CHECK(got == sent);
    CHECK(bed.irq.count == 1);
    CHECK(net->counters().rx_dropped_oversize == 0);
}

TEST_CASE("a queue too small for the largest frame still receives what fits, and drops the rest") {
    Backend b = make_backend();
    Net* net = b.net.get();
    TestBed bed(std::move(b.net));
    REQUIRE((bed.negotiate(kMergeable) & kStatusFeaturesOk) != 0);
    bed.setup_queue(kRx, 4);
    bed.setup_queue(kTx);
    bed.driver_ok();
    RxChains rx{*bed.drivers[kRx], {}};
    for (int i = 0; i < 4; ++i) {
        rx.offer(100);  // the whole queue: 400 bytes, all the guest can ever offer
    }
    bed.notify(kRx);
    const auto fits = packet(288, 12);
    send_packet(b.peer, fits);
    CHECK(bed.pump(1000) == 1);
    auto used = take_all_used(*bed.drivers[kRx]);
    REQUIRE(used.size() == 3);
    CHECK(num_buffers(rx.contents(used[0])) == 3);
    for (int i = 0; i < 3; ++i) {
        rx.offer(100);
    }
    bed.notify(kRx);
    send_packet(b.peer, packet(1000, 13));
    CHECK(bed.pump(1000) == 1);
    CHECK(take_all_used(*bed.drivers[kRx]).empty());
    CHECK(net->counters().rx_dropped_oversize == 1);
    CHECK_FALSE(bed.needs_reset());
}

TEST_CASE("transmit stops at EAGAIN and resumes when the backend drains") {
    Backend b = make_backend(4096);  // a few frames fill the socket
    Net* net = b.net.get();
    TestBed bed(std::move(b.net));
    bed.start(kMergeable);
    constexpr int kFrames = 40;
    std::vector<std::vector<std::uint8_t>> sent;
    for (int i = 0; i < kFrames; ++i) {
        sent.push_back(packet(1000, static_cast<std::uint8_t>(i)));
        std::vector<std::vector<std::uint8_t>> one = {sent.back()};
        bed.drivers[kTx]->offer(one, {});
    }
    bed.notify(kTx);
    std::size_t used = take_all_used(*bed.drivers[kTx]).size();
    CHECK(used < kFrames);
    CHECK(net->counters().tx_waits == 1);
    CHECK(bed.pump(50) == 0);  // blocked: nothing to do until the backend drains
    std::vector<std::vector<std::uint8_t>> received;
    for (int round = 0; round < 100 && received.size() < kFrames; ++round) {
        while (auto p = receive_packet(b.peer)) {
            received.push_back(*p);
        }
        bed.pump(100);
        used += take_all_used(*bed.drivers[kTx]).size();
    }
    while (auto p = receive_packet(b.peer)) {
        received.push_back(*p);
    }
    CHECK(used == kFrames);
    CHECK(received == sent);
    CHECK(net->counters().tx_waits > 1);
    CHECK(net->counters().tx_dropped == 0);
}

TEST_CASE("a backend that hangs up while transmit waits: the waiting frames are dropped and returned") {
    Backend b = make_backend(4096);
    Net* net = b.net.get();
    TestBed bed(std::move(b.net));
    bed.start(kMergeable);
    constexpr std::size_t kFrames = 40;
    for (std::size_t i = 0; i < kFrames; ++i) {
        std::vector<std::vector<std::uint8_t>> one = {packet(1000, 1)};
        bed.drivers[kTx]->offer(one, {});
    }
    bed.notify(kTx);
    std::size_t used = take_all_used(*bed.drivers[kTx]).size();
    REQUIRE(used < kFrames);
    b.peer.reset();
    CHECK(bed.pump(1000) == 1);
    used += take_all_used(*bed.drivers[kTx]).size();
    CHECK(used == kFrames);
    CHECK(net->counters().tx_frames + net->counters().tx_dropped == kFrames);
    CHECK(bed.pump(50) == 0);
    CHECK_FALSE(bed.needs_reset());
}

TEST_CASE("each event handles a bounded number of frames per direction") {
    Backend b = make_backend();
    TestBed bed(std::move(b.net));
    bed.start(kPlain);
    constexpr std::size_t kFrames = 200;
    SUBCASE("transmit re-arms itself") {
        for (std::size_t i = 0; i < kFrames; ++i) {
            std::vector<std::vector<std::uint8_t>> one = {packet(20, static_cast<std::uint8_t>(i))};
            bed.drivers[kTx]->offer(one, {});
        }
        bed.notify(kTx);
        CHECK(take_all_used(*bed.drivers[kTx]).size() == Net::kFramesPerEvent);
        CHECK(bed.pump(1000) == 1);
        CHECK(take_all_used(*bed.drivers[kTx]).size() == kFrames - Net::kFramesPerEvent);
    }
    SUBCASE("receive leaves the rest for the next turn") {
        RxChains rx{*bed.drivers[kRx], {}};
        for (std::size_t i = 0; i < kFrames; ++i) {
            rx.offer(Net::kMaxFrame);
            send_packet(b.peer, packet(20, static_cast<std::uint8_t>(i)));
        }
        CHECK(bed.pump(1000) == 1);
        CHECK(take_all_used(*bed.drivers[kRx]).size() == Net::kFramesPerEvent);
        CHECK(bed.pump(1000) == 1);
        CHECK(take_all_used(*bed.drivers[kRx]).size() == kFrames - Net::kFramesPerEvent);
    }
}

TEST_CASE("hostile chains mean NEEDS_RESET") {
    Backend b = make_backend();
    TestBed bed(std::move(b.net));
    bed.start(kMergeable);
    SUBCASE("a transmit chain shorter than the header") {
        std::vector<std::vector<std::uint8_t>> short_header = {pattern(8, 1)};
        bed.drivers[kTx]->offer(short_header, {});
        bed.notify(kTx);
        CHECK(bed.needs_reset());
        CHECK_FALSE(receive_packet(b.peer));
    }
    SUBCASE("a receive chain with no writable buffer") {
        std::vector<std::vector<std::uint8_t>> readable = {pattern(64, 1)};
        bed.drivers[kRx]->offer(readable, {});
        bed.notify(kRx);
        CHECK(bed.needs_reset());
    }
    SUBCASE("a receive chain too small for the header") {
        std::array<std::uint32_t, 2> tiny{4, 4};
        bed.drivers[kRx]->offer({}, tiny);
        bed.notify(kRx);
        CHECK(bed.needs_reset());
    }
    // The driver's reset brings the device back.
    bed.set_reg(mmio_reg::kStatus, 0);
    bed.start(kMergeable);
    std::vector<std::vector<std::uint8_t>> good = {packet(10, 1)};
    bed.drivers[kTx]->offer(good, {});
    bed.notify(kTx);
    CHECK(receive_packet(b.peer));
    CHECK_FALSE(bed.needs_reset());
}

TEST_CASE("reset drops held buffers; frames from before activation are discarded") {
    Backend b = make_backend();
    TestBed bed(std::move(b.net));
    bed.start(kMergeable);
    RxChains rx{*bed.drivers[kRx], {}};
    rx.offer(2000);
    bed.notify(kRx);  // held by the device
    bed.set_reg(mmio_reg::kStatus, 0);
    send_packet(b.peer, packet(100, 1));  // arrives while no driver runs
    bed.start(kMergeable);
    RxChains fresh{*bed.drivers[kRx], {}};
    fresh.offer(2000);
    bed.notify(kRx);
    CHECK(bed.pump(50) == 0);
    const auto sent = packet(100, 2);
    send_packet(b.peer, sent);
    CHECK(bed.pump(1000) == 1);
    auto used = take_all_used(*bed.drivers[kRx]);
    REQUIRE(used.size() == 1);
    auto got = fresh.contents(used[0]);
    got[10] = 0;
    CHECK(got == sent);
}

TEST_CASE("a closed backend: no spinning, transmitted frames are dropped and counted") {
    Backend b = make_backend();
    Net* net = b.net.get();
    TestBed bed(std::move(b.net));
    bed.start(kMergeable);
    b.peer.reset();
    CHECK(bed.pump(1000) == 1);
    CHECK(bed.pump(50) == 0);
    std::vector<std::vector<std::uint8_t>> one = {packet(10, 1)};
    bed.drivers[kTx]->offer(one, {});
    bed.notify(kTx);  // EPIPE, not SIGPIPE
    auto used = bed.drivers[kTx]->take_used();
    REQUIRE(used);
    CHECK(net->counters().tx_dropped == 1);
    CHECK_FALSE(bed.needs_reset());
}

TEST_CASE("snapshot: held receive buffers go back in ring order; frames flow both ways after restore") {
    Backend b = make_backend();
    Backend restored = make_backend();  // the restored VM's new tap
    TestBed bed(std::move(b.net));
    std::optional<RxChains> rx;  // once the bed started
    std::vector<std::uint16_t> heads;
    auto bytes = check_state_round_trip(
        bed, [&] { return std::move(restored.net); },
        [&](TestBed& t) {
            rx.emplace(RxChains{*t.drivers[kRx], {}});
            for (int i = 0; i < 8; ++i) {
                heads.push_back(rx->offer(1024));  // two per largest frame without TSO
            }
            t.notify(kRx);
            const auto first = packet(100, 1);
            send_packet(b.peer, first);
            CHECK(t.pump(1000) == 1);
            auto used = take_all_used(*t.drivers[kRx]);
            REQUIRE(used.size() == 1);
            CHECK(used[0].head == heads[0]);
            // The device now holds heads[1] and heads[2], waiting for the tap.
            CHECK(t.transport->save().queues[kRx].next_avail == 3);
            const auto out = packet(200, 2);
            std::vector<std::vector<std::uint8_t>> bufs = {out};
            t.drivers[kTx]->offer(bufs, {});
            t.notify(kTx);
            CHECK(receive_packet(b.peer) == out);
            REQUIRE(t.drivers[kTx]->take_used());
        },
        [&](TestBed& t) {
            // The next frame lands in the first buffer the old device held.
            const auto in = packet(300, 3);
            send_packet(restored.peer, in);
            CHECK(t.pump(1000) == 1);
            auto used = take_all_used(*t.drivers[kRx]);
            REQUIRE(used.size() == 1);
            CHECK(used[0].head == heads[1]);
            auto got = rx->contents(used[0]);
            CHECK(num_buffers(got) == 1);
            got[10] = 0;
            CHECK(got == in);
            const auto out = packet(400, 4);
            std::vector<std::vector<std::uint8_t>> bufs = {out};
            t.drivers[kTx]->offer(bufs, {});
            t.notify(kTx);
            CHECK(receive_packet(restored.peer) == out);
            CHECK(t.drivers[kTx]->take_used());
        },
        kMergeable);
    auto saved = SavedTransport::parse(bytes);
    CHECK(saved.state.queues[kRx].next_avail == 1);  // heads[1] and heads[2] given back
    CHECK(saved.state.queues[kRx].next_used == 1);
    CHECK(saved.state.queues[kTx].next_avail == 1);
    CHECK(saved.state.queues[kTx].next_used == 1);
}

TEST_CASE("snapshot: without mergeable buffers the one held chain goes back too") {
    Backend b = make_backend();
    Backend restored = make_backend();
    TestBed bed(std::move(b.net));
    std::optional<RxChains> rx;  // once the bed started
    std::vector<std::uint16_t> heads;
    auto bytes = check_state_round_trip(
        bed, [&] { return std::move(restored.net); },
        [&](TestBed& t) {
            rx.emplace(RxChains{*t.drivers[kRx], {}});
            heads.push_back(rx->offer(2048));
            heads.push_back(rx->offer(2048));
            t.notify(kRx);
            CHECK(t.transport->save().queues[kRx].next_avail == 1);  // one held for the next frame
        },
        [&](TestBed& t) {
            send_packet(restored.peer, packet(50, 1));
            send_packet(restored.peer, packet(60, 2));
            t.pump(1000);
            auto used = take_all_used(*t.drivers[kRx]);
            REQUIRE(used.size() == 2);
            CHECK(used[0].head == heads[0]);
            CHECK(used[1].head == heads[1]);
            CHECK(used[1].len == kNetHeaderSize + 60);
        },
        kPlain);
    CHECK(SavedTransport::parse(bytes).state.queues[kRx].next_avail == 0);
}

TEST_CASE("snapshot: corrupt states are refused") {
    check_state_refusals(make_device);
}

TEST_CASE("snapshot: a restored device keeps its own MAC in configuration space") {
    Backend b = make_backend();
    TestBed bed(std::move(b.net));
    bed.start();
    const auto bytes = bed.transport->save_state();
    std::array<int, 2> fds{};
    REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds.data()) == 0);
    UniqueFd peer(fds[1]);
    constexpr MacAddress kForked{0x52, 0x54, 0x00, 0xab, 0xcd, 0xef};
    auto forked = Net::from_fd(UniqueFd(fds[0]), NetConfig{"fork0", kForked});
    REQUIRE(forked.has_value());
    bed.replace(std::move(*forked));
    REQUIRE(bed.transport->restore_state(bytes));
    std::array<std::uint8_t, 6> config{};
    bed.transport->read(mmio_reg::kConfig, config);
    CHECK(config == kForked);
}
