// Persistent taps in a private network namespace: made with the flags
// sbx-vmm needs (its own open_tap attaches to them), persistent, addressed
// and up through netlink, deleted by their owner even while attached,
// released and adopted again by name, reused when stale. Needs root and
// /dev/net/tun: exits 77 without them.
#include "host-tools/sbxd/net/tap.hpp"

#include <arpa/inet.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <cstring>
#include <fstream>
#include <string>

#include "base/unique_fd.hpp"
#include "devices/virtio/net/tap.hpp"
#include "host-tools/sbxd/net/netlink.hpp"
#include "host-tools/sbxd/net/tests/private_netns.hpp"

using namespace sbx;
using namespace sbx::sbxd::net;

namespace {

void require_taps() {
    testing::enter_private_netns_or_skip();
    if (::access("/dev/net/tun", R_OK | W_OK) != 0) {
        std::printf("SKIP: no /dev/net/tun\n");
        std::exit(77);
    }
}

bool exists(const std::string& name) {
    return ::if_nametoindex(name.c_str()) != 0;
}

// The interface's flags and IPv4 address through the classic ioctls
// (netdevice(7)): a second opinion beside netlink.
unsigned ioctl_flags(const std::string& name) {
    UniqueFd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    REQUIRE(s);
    ifreq r{};
    std::strncpy(r.ifr_name, name.c_str(), IFNAMSIZ - 1);
    REQUIRE(::ioctl(s.get(), SIOCGIFFLAGS, &r) == 0);
    return static_cast<unsigned short>(r.ifr_flags);
}

std::string ioctl_address(const std::string& name) {
    UniqueFd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    REQUIRE(s);
    ifreq r{};
    std::strncpy(r.ifr_name, name.c_str(), IFNAMSIZ - 1);
    if (::ioctl(s.get(), SIOCGIFADDR, &r) != 0) {
        return "";
    }
    char text[INET_ADDRSTRLEN] = {};
    const auto* in = reinterpret_cast<const sockaddr_in*>(&r.ifr_addr);  // NOLINT: the ioctl's union
    ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
    return text;
}

// /sys/class/net/NAME/tun_flags: the tap's flags as the kernel keeps them
// ("0x5802"); empty when this namespace's sysfs is not mounted.
unsigned sysfs_tun_flags(const std::string& name) {
    std::ifstream in("/sys/class/net/" + name + "/tun_flags");
    std::string text;
    if (!(in >> text)) {
        return 0;
    }
    return static_cast<unsigned>(std::stoul(text, nullptr, 16));
}

}  // namespace

TEST_CASE("a persistent tap: made, addressed, up, attachable by sbx-vmm, deleted") {
    require_taps();
    const std::string name = interface_name(7);
    {
        auto tap = PersistentTap::create(name);
        REQUIRE_MESSAGE(tap, (tap ? "" : tap.error().to_string()));
        CHECK(tap->name() == name);
        REQUIRE(exists(name));  // the fd that made it is closed: TUNSETPERSIST keeps it
        CHECK(*is_tap(name));

        if (unsigned flags = sysfs_tun_flags(name); flags != 0) {
            CHECK((flags & IFF_TAP) != 0);
            CHECK((flags & IFF_NO_PI) != 0);
            CHECK((flags & IFF_VNET_HDR) != 0);
            CHECK((flags & IFF_PERSIST) != 0);
            CHECK((flags & IFF_MULTI_QUEUE) == 0);
        }

        auto socket = RouteSocket::open();
        REQUIRE(socket);
        const InterfaceAddress gateway{*parse_ipv4("10.231.0.29"), 30};
        REQUIRE(socket->set_only_ipv4_address(name, gateway));
        REQUIRE(socket->set_only_ipv4_address(name, gateway));  // again: no error
        REQUIRE(socket->set_up(name));
        CHECK((ioctl_flags(name) & IFF_UP) != 0);
        CHECK(ioctl_address(name) == "10.231.0.29");
        CHECK(*socket->ipv4_addresses(name) == std::vector<InterfaceAddress>{gateway});

        // sbx-vmm's own attach (devices/virtio/net/tap.cpp) takes it.
        auto vmm = virtio::open_tap(name);
        REQUIRE_MESSAGE(vmm, (vmm ? "" : vmm.error().to_string()));
        ifreq r{};
        REQUIRE(::ioctl(vmm->get(), TUNGETIFF, &r) == 0);
        CHECK((r.ifr_flags & IFF_PERSIST) != 0);
        CHECK((r.ifr_flags & IFF_TAP) != 0);
        CHECK((r.ifr_flags & IFF_VNET_HDR) != 0);

        // While a VMM holds it, a second create of that name is refused.
        auto again = PersistentTap::create(name);
        REQUIRE_FALSE(again);
        CHECK(again.error().code == "tap_busy");
        CHECK(exists(name));
        // The owner deletes it even so.
        REQUIRE(tap->remove());
        CHECK_FALSE(exists(name));
        CHECK(tap->remove());  // twice: nothing to do
    }
    CHECK_FALSE(exists(name));
}

TEST_CASE("the owner's end deletes the tap; a released one stays and is adopted by name") {
    require_taps();
    const std::string name = interface_name(8);
    {
        auto tap = PersistentTap::create(name);
        REQUIRE(tap);
    }
    CHECK_FALSE(exists(name));

    {
        auto tap = PersistentTap::create(name);
        REQUIRE(tap);
        CHECK(tap->release() == name);
    }
    REQUIRE(exists(name));  // as after sbxd exits with its sandboxes running

    auto vmm = virtio::open_tap(name);  // a VMM still attached across the restart
    REQUIRE(vmm);
    {
        auto adopted = PersistentTap::adopt(name);
        REQUIRE_MESSAGE(adopted, (adopted ? "" : adopted.error().to_string()));
        CHECK(adopted->name() == name);
        CHECK(exists(name));
    }
    CHECK_FALSE(exists(name));  // adopted means owned: deleted with its owner

    auto missing = PersistentTap::adopt(interface_name(9));
    REQUIRE_FALSE(missing);
    CHECK(missing.error().code == "no_such_interface");
}

TEST_CASE("a stale tap of the same name is reused; an interface that is not a tap is refused") {
    require_taps();
    const std::string name = interface_name(10);
    {
        auto stale = PersistentTap::create(name);
        REQUIRE(stale);
        auto socket = RouteSocket::open();
        REQUIRE(socket->set_only_ipv4_address(name, {*parse_ipv4("192.0.2.1"), 24}));  // left from before
        stale->release();
    }
    const int index = static_cast<int>(::if_nametoindex(name.c_str()));
    {
        auto reused = PersistentTap::create(name);
        REQUIRE(reused);
        CHECK(static_cast<int>(::if_nametoindex(name.c_str())) == index);  // the same interface
        auto socket = RouteSocket::open();
        const InterfaceAddress ours{*parse_ipv4("10.231.0.41"), 30};
        REQUIRE(socket->set_only_ipv4_address(name, ours));
        CHECK(*socket->ipv4_addresses(name) == std::vector<InterfaceAddress>{ours});  // the stale one is gone
    }
    CHECK_FALSE(exists(name));

    // A tun device (no Ethernet) of a sandbox's name is not its tap.
    UniqueFd tun(::open("/dev/net/tun", O_RDWR | O_CLOEXEC));
    REQUIRE(tun);
    ifreq r{};
    std::strncpy(r.ifr_name, "sbx11", IFNAMSIZ - 1);
    r.ifr_flags = IFF_TUN | IFF_NO_PI;
    REQUIRE(::ioctl(tun.get(), TUNSETIFF, &r) == 0);
    auto created = PersistentTap::create("sbx11");
    REQUIRE_FALSE(created);
    CHECK(created.error().code == "not_a_tap");
    auto adopted = PersistentTap::adopt("sbx11");
    REQUIRE_FALSE(adopted);
    CHECK(adopted.error().code == "not_a_tap");
    CHECK(exists("sbx11"));  // and left alone

    CHECK(PersistentTap::create("sbx/1").error().code == "bad_interface_name");
    CHECK(PersistentTap::create("sbx0123456789abc").error().code == "bad_interface_name");
}

TEST_CASE("netlink: the IPv4 default route's interface") {
    require_taps();
    auto socket = RouteSocket::open();
    REQUIRE(socket);
    auto none = socket->default_route_interface();
    REQUIRE_FALSE(none);  // a fresh namespace has no routes
    CHECK(none.error().code == "no_uplink");

    auto up = PersistentTap::create("sbxup0");
    REQUIRE(up);
    REQUIRE(socket->set_only_ipv4_address("sbxup0", {*parse_ipv4("192.0.2.2"), 24}));
    REQUIRE(socket->set_up("sbxup0"));
    // The test's own route (ip(8)), over the tap with its carrier on.
    auto carrier = virtio::open_tap("sbxup0");
    REQUIRE(carrier);
    REQUIRE(std::system("ip route add default via 192.0.2.1 dev sbxup0") == 0);
    auto found = socket->default_route_interface();
    REQUIRE_MESSAGE(found, (found ? "" : found.error().to_string()));
    CHECK(*found == "sbxup0");
}
