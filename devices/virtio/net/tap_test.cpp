// The tap backend: opening errors (which every user can see), and — when
// this process may create taps (root, CAP_NET_ADMIN) — frames through a
// real tap to and from an AF_PACKET socket on its host side, and offloads
// following what the guest accepted. Tests that need privileges report
// why they did not run.
#include "devices/virtio/net/tap.hpp"

#include <doctest/doctest.h>
#include <linux/capability.h>
#include <linux/ethtool.h>
#include <linux/if_packet.h>
#include <linux/sockios.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <thread>

#include "devices/virtio/net/net.hpp"
#include "devices/virtio/virtio_test_util.hpp"

using namespace sbx;
using namespace sbx::virtio;
using namespace sbx::virtio::testing;

namespace {

constexpr MacAddress kMac{0x52, 0x54, 0x00, 0x12, 0x34, 0x56};
constexpr std::uint16_t kTestEtherType = 0x88b5;  // IEEE 802 local experimental
constexpr std::uint64_t kTso = kFeatureVersion1 | kFeatureEventIdx | net_feature::kMac |
                               net_feature::kMrgRxbuf | net_feature::kGuestCsum | net_feature::kGuestTso4 |
                               net_feature::kGuestTso6 | net_feature::kCsum | net_feature::kHostTso4 |
                               net_feature::kHostTso6;

// Unique per process, within IFNAMSIZ-1.
std::string tap_name(const char* prefix) {
    return fmt::format("{}{}", prefix, ::getpid() % 100000);
}

bool tun_device_usable(std::string& why) {
    if (::access("/dev/net/tun", R_OK | W_OK) != 0) {
        why = "/dev/net/tun is missing or not accessible";
        return false;
    }
    return true;
}

// Whether this process can create taps; `why` says why not.
bool can_create_taps(std::string& why) {
    if (!tun_device_usable(why)) {
        return false;
    }
    auto fd = open_tap(tap_name("sbxprobe"));
    if (!fd) {
        why = fd.error().to_string();
        return false;
    }
    return true;
}

bool has_cap_net_admin() {
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    std::array<__user_cap_data_struct, 2> data{};
    REQUIRE(::syscall(SYS_capget, &header, data.data()) == 0);
    return (data[0].effective & (1U << CAP_NET_ADMIN)) != 0;
}

// Drops CAP_NET_ADMIN from the calling thread only (capabilities are
// per-thread to the kernel).
void drop_cap_net_admin_in_this_thread() {
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    std::array<__user_cap_data_struct, 2> data{};
    REQUIRE(::syscall(SYS_capget, &header, data.data()) == 0);
    data[0].effective &= ~(1U << CAP_NET_ADMIN);
    REQUIRE(::syscall(SYS_capset, &header, data.data()) == 0);
}

// The host side of a tap: the interface up (IPv6 off, so the kernel sends
// no chatter of its own) and an AF_PACKET socket bound to it.
struct HostSide {
    UniqueFd control;
    UniqueFd packet;
    int ifindex = 0;
    std::string name;

    explicit HostSide(const std::string& tap) : name(tap) {
        std::ofstream(fmt::format("/proc/sys/net/ipv6/conf/{}/disable_ipv6", tap)) << "1\n";
        control = UniqueFd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
        REQUIRE(control);
        ifreq request = make_request();
        REQUIRE(::ioctl(control.get(), SIOCGIFFLAGS, &request) == 0);
        request.ifr_flags = static_cast<short>(request.ifr_flags | IFF_UP);
        REQUIRE(::ioctl(control.get(), SIOCSIFFLAGS, &request) == 0);
        ifindex = static_cast<int>(::if_nametoindex(tap.c_str()));
        REQUIRE(ifindex > 0);
        packet = UniqueFd(::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL)));
        REQUIRE(packet);
        sockaddr_ll addr{};
        addr.sll_family = AF_PACKET;
        addr.sll_protocol = htons(ETH_P_ALL);
        addr.sll_ifindex = ifindex;
        REQUIRE(::bind(packet.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    }
    [[nodiscard]] ifreq make_request() const {
        ifreq request{};
        std::memcpy(request.ifr_name, name.data(), name.size());
        return request;
    }
    // The next frame of the test's EtherType within timeout_ms, if any.
    std::optional<std::vector<std::uint8_t>> receive(int timeout_ms) const {
        for (int waited = 0; waited < timeout_ms; waited += 10) {
            pollfd p{packet.get(), POLLIN, 0};
            if (::poll(&p, 1, 10) != 1) {
                continue;
            }
            std::vector<std::uint8_t> frame(70000);
            const ssize_t n = ::recv(packet.get(), frame.data(), frame.size(), 0);
            REQUIRE(n >= 0);
            frame.resize(static_cast<std::size_t>(n));
            if (frame.size() >= 14 && frame[12] == (kTestEtherType >> 8) &&
                frame[13] == (kTestEtherType & 0xff)) {
                return frame;
            }
        }
        return std::nullopt;
    }
    void send(const std::vector<std::uint8_t>& frame) const {
        REQUIRE(::send(packet.get(), frame.data(), frame.size(), 0) == static_cast<ssize_t>(frame.size()));
    }
    // TCP segmentation offload of the tap interface, which TUNSETOFFLOAD sets.
    [[nodiscard]] bool tso() const {
        ethtool_value value{ETHTOOL_GTSO, 0};
        ifreq request = make_request();
        request.ifr_data = reinterpret_cast<char*>(&value);
        REQUIRE(::ioctl(control.get(), SIOCETHTOOL, &request) == 0);
        return value.data != 0;
    }
};

std::vector<std::uint8_t> test_frame(const MacAddress& dst, const MacAddress& src, std::size_t payload) {
    std::vector<std::uint8_t> frame(dst.begin(), dst.end());
    frame.insert(frame.end(), src.begin(), src.end());
    frame.push_back(kTestEtherType >> 8);
    frame.push_back(kTestEtherType & 0xff);
    for (std::size_t i = 0; i < payload; ++i) {
        frame.push_back(static_cast<std::uint8_t>(i * 13));
    }
    return frame;
}

}  // namespace

TEST_CASE("tap names are checked before any system call") {
    auto long_name = Net::open(NetConfig{"sbx-name-too-long", std::nullopt});
    REQUIRE_FALSE(long_name.has_value());
    CHECK(long_name.error().message.find("sbx-name-too-long") != std::string::npos);
    CHECK(long_name.error().message.find("at most 15") != std::string::npos);
    for (const char* bad : {"", "tap/0", "tap:0", "tap%d", "tap 0", ".."}) {
        CAPTURE(bad);
        CHECK_FALSE(check_interface_name(bad).has_value());
    }
    CHECK(check_interface_name("tap0").has_value());
    CHECK(check_interface_name("fifteen-chars-x").has_value());
}

TEST_CASE("attaching without permission says how to create the tap") {
    std::string why;
    if (!tun_device_usable(why)) {
        MESSAGE("skipped: " << why);
        return;
    }
    const std::string name = tap_name("sbxnoperm");
    Result<std::unique_ptr<Net>> result = make_error("not run");
    std::thread([&] {
        if (has_cap_net_admin()) {
            drop_cap_net_admin_in_this_thread();
        }
        result = Net::open(NetConfig{name, std::nullopt});
    }).join();
    REQUIRE_FALSE(result.has_value());
    const std::string message = result.error().message;
    CHECK(message.find("tap " + name) == 0);
    CHECK(message.find(fmt::format("`ip tuntap add {} mode tap user $USER`", name)) != std::string::npos);
}

TEST_CASE("an interface that is not a tap is refused with a clear error") {
    std::string why;
    if (!tun_device_usable(why)) {
        MESSAGE("skipped: " << why);
        return;
    }
    auto result = Net::open(NetConfig{"lo", std::nullopt});
    REQUIRE_FALSE(result.has_value());
    CHECK(result.error().message.find("not a single-queue tap") != std::string::npos);
}

TEST_CASE("a tap in use by another process is refused") {
    std::string why;
    if (!can_create_taps(why)) {
        MESSAGE("skipped (needs CAP_NET_ADMIN): " << why);
        return;
    }
    const std::string name = tap_name("sbxbusy");
    auto first = Net::open(NetConfig{name, kMac});
    REQUIRE(first.has_value());
    CHECK((*first)->is_tap());
    auto second = Net::open(NetConfig{name, kMac});
    REQUIRE_FALSE(second.has_value());
    CHECK(second.error().message.find("already attached") != std::string::npos);
}

TEST_CASE("conformance over a real tap") {
    std::string why;
    if (!can_create_taps(why)) {
        MESSAGE("skipped (needs CAP_NET_ADMIN): " << why);
        return;
    }
    // Each device gets its own tap: the conformance check holds two at once
    // (a snapshot restored into a fresh device).
    int made = 0;
    auto make = [&made] {
        auto net = Net::open(NetConfig{tap_name(made++ % 2 == 0 ? "sbxconfa" : "sbxconfb"), kMac});
        REQUIRE(net.has_value());
        return std::unique_ptr<VirtioDevice>(std::move(*net));
    };
    check_conformance(make, DeviceType::Net, Net::kTxQueue);
}

TEST_CASE("frames through a real tap, both ways, byte for byte") {
    std::string why;
    if (!can_create_taps(why)) {
        MESSAGE("skipped (needs CAP_NET_ADMIN): " << why);
        return;
    }
    const std::string name = tap_name("sbxnet");
    auto net = Net::open(NetConfig{name, kMac});
    REQUIRE(net.has_value());
    REQUIRE((*net)->is_tap());
    HostSide host(name);
    TestBed bed(std::move(*net));
    bed.start(kTso);
    CHECK(host.tso());  // the guest accepted GUEST_TSO4/6 with GUEST_CSUM

    SUBCASE("transmit") {
        const auto frame = test_frame({0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, kMac, 200);
        std::vector<std::vector<std::uint8_t>> bufs = {std::vector<std::uint8_t>(kNetHeaderSize, 0),
                                                       {frame.begin(), frame.begin() + 20},
                                                       {frame.begin() + 20, frame.end()}};
        bed.drivers[Net::kTxQueue]->offer(bufs, {});
        bed.notify(Net::kTxQueue);
        CHECK(bed.drivers[Net::kTxQueue]->take_used());
        auto got = host.receive(2000);
        REQUIRE(got);
        CHECK(*got == frame);
    }
    SUBCASE("receive") {
        std::vector<OfferedChain> chains;
        for (int i = 0; i < 70; ++i) {  // 71680 bytes: room for a 64 KiB TSO frame
            std::array<std::uint32_t, 1> len{1024};
            chains.push_back(bed.drivers[Net::kRxQueue]->offer({}, len));
        }
        bed.notify(Net::kRxQueue);
        const auto frame = test_frame(kMac, {0x02, 0, 0, 0, 0, 1}, 1400);  // within the tap's MTU
        host.send(frame);
        std::optional<std::vector<std::uint8_t>> received;
        for (int round = 0; round < 200 && !received; ++round) {
            bed.pump(10);
            // Gather one frame's chains (num_buffers of them) at a time.
            while (auto used = bed.drivers[Net::kRxQueue]->take_used()) {
                auto chain_of = [&](std::uint16_t head) {
                    return *std::find_if(chains.begin(), chains.end(),
                                         [&](auto& c) { return c.head == head; });
                };
                auto first = chain_of(used->head);
                auto bytes = bed.drivers[Net::kRxQueue]->read(first.writable[0].first, used->len);
                const std::uint16_t count = static_cast<std::uint16_t>(bytes[10] | (bytes[11] << 8));
                for (std::uint16_t i = 1; i < count; ++i) {
                    auto more = bed.drivers[Net::kRxQueue]->take_used();
                    REQUIRE(more);
                    auto part =
                        bed.drivers[Net::kRxQueue]->read(chain_of(more->head).writable[0].first, more->len);
                    bytes.insert(bytes.end(), part.begin(), part.end());
                }
                std::vector<std::uint8_t> got(bytes.begin() + kNetHeaderSize, bytes.end());
                if (got.size() >= 14 && got[12] == (kTestEtherType >> 8)) {
                    CHECK(count == 2);  // 12 + 1414 bytes over 1024-byte buffers
                    received = got;
                }
            }
        }
        REQUIRE(received);
        CHECK(*received == frame);
    }
    SUBCASE("a reset turns the offloads off again") {
        bed.set_reg(mmio_reg::kStatus, 0);
        CHECK_FALSE(host.tso());
    }
}
