// The identity op's IPv4 settings on the real kernel: rtnetlink.cpp behind
// SystemIdentityKernel, on a veth pair in a network namespace this process
// makes for itself before doctest runs (unshare(CLONE_NEWNET): the
// namespace ends with the process; the host's interfaces, routes and
// /etc/resolv.conf are never seen or touched; no packet leaves it). Each
// state is checked twice: by the agent's own read-back and by `ip -j addr`
// and `ip -j route`. Exits 77 (SKIP) when not root or without network
// namespaces, veth or ip(8).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>

#include "guest-agent/agent/agent_test_util.hpp"
#include "guest-agent/identity/identity_client.hpp"
#include "guest-agent/identity/ipv4_apply.hpp"
#include "guest-agent/identity/rtnetlink.hpp"

using namespace sbx;
using namespace sbx::agent;
using namespace sbx::agent::testing;

namespace {

constexpr const char* kDev = "sbxv0";   // the guest's interface, as it were
constexpr const char* kPeer = "sbxv1";  // the host's end

struct Run {
    int status = -1;
    std::string output;
};

// A shell command in this namespace; its stdout (bounded) and exit status.
Run run(const std::string& command) {
    Run r;
    FILE* pipe =
        ::popen((command + " 2>&1").c_str(), "r");  // NOLINT(cert-env33-c): the test's own ip(8) lines
    if (pipe == nullptr) {
        return r;
    }
    std::array<char, 4096> buffer{};
    std::size_t n = 0;
    while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0 && r.output.size() < (1U << 20)) {
        r.output.append(buffer.data(), n);
    }
    const int status = ::pclose(pipe);
    r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
}

void sh(const std::string& command) {
    auto r = run(command);
    REQUIRE_MESSAGE(r.status == 0, command << ": " << r.output);
}

Json ip_json(const std::string& args) {
    auto r = run("ip -j " + args);
    REQUIRE_MESSAGE(r.status == 0, args << ": " << r.output);
    Json j = Json::parse(r.output, nullptr, false);
    REQUIRE_MESSAGE(j.is_array(), r.output);
    return j;
}

// `ip -j addr show dev D`'s IPv4 entries as "local/prefix" (and "brd B" when there is one).
std::vector<std::string> ip_addresses(const std::string& dev, bool with_broadcast = false) {
    std::vector<std::string> out;
    for (const auto& link : ip_json("addr show dev " + dev)) {
        for (const auto& a : link.value("addr_info", Json::array())) {
            if (a.value("family", "") != "inet") {
                continue;
            }
            std::string text = a.value("local", "") + "/" + std::to_string(a.value("prefixlen", -1));
            if (with_broadcast && a.contains("broadcast")) {
                text += " brd " + a.value("broadcast", "");
            }
            out.push_back(text);
        }
    }
    return out;
}

// `ip -j route show table main default`: "via G dev D [metric M] [proto P]".
std::vector<std::string> ip_default_routes() {
    std::vector<std::string> out;
    for (const auto& r : ip_json("-4 route show table main default")) {
        std::string text = "via " + r.value("gateway", "-") + " dev " + r.value("dev", "-");
        if (r.contains("metric")) {
            text += " metric " + std::to_string(r.value("metric", 0));
        }
        text += " proto " + r.value("protocol", "boot");
        out.push_back(text);
    }
    return out;
}

bool ip_link_up(const std::string& dev) {
    for (const auto& link : ip_json("link show dev " + dev)) {
        for (const auto& flag : link.value("flags", Json::array())) {
            if (flag == "UP") {
                return true;
            }
        }
    }
    return false;
}

Ipv4Config config(const std::string& address = "10.231.0.6/30", const std::string& gateway = "10.231.0.5",
                  const std::optional<std::vector<std::string>>& dns = std::vector<std::string>{
                      "10.231.0.5"}) {
    auto c = parse_ipv4_settings(address, gateway, dns);
    REQUIRE_MESSAGE(c.has_value(), (c ? "" : c.error().to_string()));
    return *c;
}

// A fresh veth pair (the peer up, so the link has carrier; `kDev` down as
// a booted guest's eth0 is), a /sys/class/net-like tree that names kDev's
// driver virtio_net, and a scratch resolver file.
struct Net {
    TempDir dir;
    std::filesystem::path resolv = dir.path / "etc" / "resolv.conf";
    std::shared_ptr<IdentityKernel> kernel;

    Net() {
        (void)run(std::string("ip link del ") + kDev);
        sh(std::string("ip link add ") + kDev + " type veth peer name " + kPeer);
        sh(std::string("ip link set ") + kPeer + " up");
        auto net = dir.path / "class/net" / kDev;
        std::filesystem::create_directories(net);
        std::filesystem::create_directories(dir.path / "drivers/virtio_net");
        std::filesystem::create_directories(dir.path / "devices/virtio0");
        std::filesystem::create_directory_symlink(dir.path / "drivers/virtio_net",
                                                  dir.path / "devices/virtio0/driver");
        std::filesystem::create_directory_symlink(dir.path / "devices/virtio0", net / "device");
        std::ofstream(net / "ifindex") << "2\n";
        std::filesystem::create_directories(resolv.parent_path());
        kernel = make_system_identity_kernel(dir.path / "class/net", resolv);
    }
    ~Net() { (void)run(std::string("ip link del ") + kDev); }
    Net(const Net&) = delete;
    Net& operator=(const Net&) = delete;
    Net(Net&&) = delete;
    Net& operator=(Net&&) = delete;

    std::string resolv_text() const {
        std::ifstream in(resolv);
        return {std::istreambuf_iterator<char>(in), {}};
    }
};

// The kernel holds exactly `c`: checked by the agent's read-back and by ip(8).
void check_exactly(Net& n, const Ipv4Config& c) {
    auto state = read_ipv4(*n.kernel, kDev);
    REQUIRE_MESSAGE(state.has_value(), (state ? "" : state.error().to_string()));
    CHECK(check_ipv4_state(c, *state));
    CHECK(state->addresses == std::vector<Ipv4Prefix>{c.address});
    CHECK(state->gateway == c.gateway);
    CHECK(state->link_up);
    const Ipv4Prefix& a = c.address;
    std::string expected = format_ipv4_prefix(a);
    if (a.length <= 30) {
        expected += " brd " + format_ipv4(a.broadcast());
    }
    CHECK(ip_addresses(kDev, true) == std::vector<std::string>{expected});
    CHECK(ip_default_routes() ==
          std::vector<std::string>{"via " + format_ipv4(c.gateway) + " dev " + kDev + " proto static"});
    CHECK(ip_link_up(kDev));
}

const std::string kResolv =
    "# Written by sbx-agent (the identity op's \"ipv4\"): the sandbox's DNS as the host "
    "gave it.\nnameserver 10.231.0.5\noptions edns0 trust-ad\n";

}  // namespace

TEST_CASE("a first configuration: the link up, exactly the address and the default route") {
    Net n;
    CHECK_FALSE(ip_link_up(kDev));
    auto changes = apply_ipv4(*n.kernel, kDev, config());
    REQUIRE_MESSAGE(changes.has_value(), (changes ? "" : changes.error().to_string()));
    CHECK(changes->link_brought_up);
    CHECK(changes->addresses_removed.empty());
    CHECK(changes->resolv_conf_written);
    check_exactly(n, config());
    CHECK(n.resolv_text() == kResolv);
    struct stat st {};
    REQUIRE(::lstat(n.resolv.c_str(), &st) == 0);
    CHECK(S_ISREG(st.st_mode));
    CHECK((st.st_mode & 07777) == 0644);
    // No temporary file is left beside it.
    CHECK(std::distance(std::filesystem::directory_iterator(n.resolv.parent_path()),
                        std::filesystem::directory_iterator()) == 1);
}

TEST_CASE("a parent's addresses and default routes are replaced; other interfaces keep theirs") {
    Net n;
    sh(std::string("ip link set ") + kDev + " up");
    for (const char* a : {"10.231.0.2/30", "10.231.0.6/24", "192.0.2.7/24", "192.0.2.8/24"}) {
        sh(std::string("ip addr add ") + a + " dev " + kDev);
    }
    sh(std::string("ip addr add 198.51.100.2 peer 198.51.100.1/32 dev ") + kDev);
    sh(std::string("ip addr add 203.0.113.1/24 dev ") + kPeer);
    sh(std::string("ip route add default via 10.231.0.1 dev ") + kDev);
    sh(std::string("ip route add default via 192.0.2.1 dev ") + kDev + " metric 100");
    sh(std::string("ip route add default via 203.0.113.2 dev ") + kPeer + " metric 200");
    sh(std::string("ip route add 198.18.0.0/15 dev ") + kPeer);  // not a default route: left alone
    REQUIRE(ip_addresses(kDev).size() == 5);
    REQUIRE(ip_default_routes().size() == 3);

    auto changes = apply_ipv4(*n.kernel, kDev, config());
    REQUIRE_MESSAGE(changes.has_value(), (changes ? "" : changes.error().to_string()));
    CHECK_FALSE(changes->link_brought_up);
    check_exactly(n, config());
    CHECK(ip_addresses(kPeer) == std::vector<std::string>{"203.0.113.1/24"});
    CHECK(ip_json("-4 route show 198.18.0.0/15").size() == 1);
}

TEST_CASE("the same settings twice leave the same state, and the resolver file is not rewritten") {
    Net n;
    REQUIRE(apply_ipv4(*n.kernel, kDev, config()));
    const auto addresses = ip_json(std::string("-4 addr show dev ") + kDev);
    const auto routes = ip_json("-4 route show table main");
    struct stat before {};
    REQUIRE(::stat(n.resolv.c_str(), &before) == 0);

    auto again = apply_ipv4(*n.kernel, kDev, config());
    REQUIRE_MESSAGE(again.has_value(), (again ? "" : again.error().to_string()));
    CHECK_FALSE(again->link_brought_up);
    CHECK(again->addresses_removed.empty());
    CHECK(again->routes_removed.empty());
    CHECK_FALSE(again->resolv_conf_written);
    CHECK(ip_json(std::string("-4 addr show dev ") + kDev) == addresses);
    CHECK(ip_json("-4 route show table main") == routes);
    struct stat after {};
    REQUIRE(::stat(n.resolv.c_str(), &after) == 0);
    CHECK(after.st_ino == before.st_ino);
    check_exactly(n, config());
}

TEST_CASE("a fork's new address in another /30 replaces the old one entirely") {
    Net n;
    REQUIRE(apply_ipv4(*n.kernel, kDev, config("10.231.0.2/30", "10.231.0.1")));
    check_exactly(n, config("10.231.0.2/30", "10.231.0.1"));
    auto fork = apply_ipv4(*n.kernel, kDev, config("10.231.0.10/30", "10.231.0.9"));
    REQUIRE_MESSAGE(fork.has_value(), (fork ? "" : fork.error().to_string()));
    CHECK(fork->addresses_removed == std::vector<Ipv4Prefix>{config("10.231.0.2/30", "10.231.0.1").address});
    check_exactly(n, config("10.231.0.10/30", "10.231.0.9"));
    // A /31 (RFC 3021) and a larger network as well.
    REQUIRE(apply_ipv4(*n.kernel, kDev, config("10.231.0.0/31", "10.231.0.1")));
    check_exactly(n, config("10.231.0.0/31", "10.231.0.1"));
    REQUIRE(apply_ipv4(*n.kernel, kDev, config("192.0.2.10/24", "192.0.2.1")));
    check_exactly(n, config("192.0.2.10/24", "192.0.2.1"));
}

TEST_CASE("without carrier (the peer down) the settings still apply") {
    Net n;
    sh(std::string("ip link set ") + kPeer + " down");
    auto changes = apply_ipv4(*n.kernel, kDev, config());
    REQUIRE_MESSAGE(changes.has_value(), (changes ? "" : changes.error().to_string()));
    check_exactly(n, config());
}

TEST_CASE("a symbolic link at the resolver's path is replaced by a file; its target is left alone") {
    Net n;
    const auto target = n.dir.path / "stub-resolv.conf";
    std::ofstream(target) << "nameserver 127.0.0.53\n";
    std::filesystem::create_symlink(target, n.resolv);
    auto read = n.kernel->read_resolv_conf();
    REQUIRE(read.has_value());
    CHECK(read->symlink);
    CHECK(read->target == target.string());
    CHECK(read->text == "nameserver 127.0.0.53\n");
    auto changes = apply_ipv4(*n.kernel, kDev, config());
    REQUIRE_MESSAGE(changes.has_value(), (changes ? "" : changes.error().to_string()));
    CHECK(changes->resolv_conf_link == target.string());
    CHECK_FALSE(std::filesystem::is_symlink(n.resolv));
    CHECK(n.resolv_text() == kResolv);
    std::ifstream in(target);
    CHECK(std::string(std::istreambuf_iterator<char>(in), {}) == "nameserver 127.0.0.53\n");

    // dns absent: the file is not touched; dns []: written without nameservers.
    auto absent = apply_ipv4(*n.kernel, kDev, config("10.231.0.6/30", "10.231.0.5", std::nullopt));
    REQUIRE(absent);
    CHECK_FALSE(absent->resolv_conf_written);
    auto empty =
        apply_ipv4(*n.kernel, kDev, config("10.231.0.6/30", "10.231.0.5", std::vector<std::string>{}));
    REQUIRE(empty);
    CHECK(empty->resolv_conf_written);
    CHECK(n.resolv_text().find("nameserver") == std::string::npos);
}

TEST_CASE("the kernel's refusals come back with their errno and extended ACK text") {
    Net n;
    auto missing = n.kernel->add_ipv4_address("sbxnone0", config().address);
    REQUIRE_FALSE(missing);
    CHECK(missing.error().errno_value == ENODEV);
    CHECK(missing.error().message.find("no interface sbxnone0") != std::string::npos);

    auto socket = rtnl::Socket::open();
    REQUIRE(socket.has_value());
    const int index = static_cast<int>(::if_nametoindex(kDev));
    REQUIRE(index > 0);
    // No address in the gateway's network: not on-link (ENETUNREACH), with the kernel's reason.
    auto off_link = socket->replace_ipv4_default_route(index, config().gateway);
    REQUIRE_FALSE(off_link);
    CHECK(off_link.error().errno_value == ENETUNREACH);
    CHECK_MESSAGE(
        off_link.error().message.find("RTM_NEWROUTE): Nexthop has invalid gateway") != std::string::npos,
        off_link.error().to_string());
    // Deleting what is not there: EADDRNOTAVAIL / ESRCH, which the kernel interface takes as done.
    auto no_address = socket->delete_ipv4_address({index, config().address, config().address.address});
    REQUIRE_FALSE(no_address);
    CHECK(no_address.error().errno_value == EADDRNOTAVAIL);
    CHECK(n.kernel->delete_ipv4_address(kDev, config().address));
    rtnl::RouteEntry absent_route;
    absent_route.table = 254;
    absent_route.gateway = config().gateway;
    absent_route.oif = index;
    auto no_route = socket->delete_route(absent_route);
    REQUIRE_FALSE(no_route);
    CHECK(no_route.error().errno_value == ESRCH);
    // The socket is still usable after the refusals.
    REQUIRE(socket->add_ipv4_address(index, config().address));
    auto listed = socket->ipv4_addresses(index);
    REQUIRE(listed.has_value());
    CHECK(listed->size() == 1);
}

namespace {

// A real Agent over a socket pair whose identity op uses the real kernel calls.
struct RealAgent {
    std::unique_ptr<Agent> agent;
    std::vector<std::thread> threads;

    explicit RealAgent(Net& n) {
        AgentOptions options;
        options.token = std::string(kTestToken);
        options.identity_kernel = n.kernel;
        options.env_file = (n.dir.path / "env").string();
        agent = std::make_unique<Agent>(std::move(options));
    }
    ~RealAgent() {
        for (auto& t : threads) {
            t.join();
        }
    }
    RealAgent(const RealAgent&) = delete;
    RealAgent& operator=(const RealAgent&) = delete;
    RealAgent(RealAgent&&) = delete;
    RealAgent& operator=(RealAgent&&) = delete;
    AgentClient connect() {
        int fds[2];
        REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
        threads.emplace_back([this, fd = UniqueFd(fds[1])]() mutable { agent->serve(std::move(fd)); });
        auto client = AgentClient::handshake(UniqueFd(fds[0]), kTestToken);
        REQUIRE_MESSAGE(client.has_value(), (client ? "" : client.error().to_string()));
        return std::move(*client);
    }
};

}  // namespace

TEST_CASE("the identity op end to end: MAC then IPv4 on the real interface, confirmed by the client") {
    Net n;
    RealAgent a(n);
    auto client = a.connect();
    IdentityRequest boot;
    boot.generation = 1;
    boot.mac = "02:00:00:00:00:01";
    boot.ipv4 = config("10.231.0.2/30", "10.231.0.1");
    auto first = identity(client, boot);
    REQUIRE_MESSAGE(first.has_value(), (first ? "" : first.error().to_string()));
    CHECK(first->interface == kDev);
    CHECK(first->mac == "02:00:00:00:00:01");
    CHECK(first->ipv4_configured);
    check_exactly(n, *boot.ipv4);

    IdentityRequest fork;
    fork.generation = 2;
    fork.mac = "02:00:00:00:00:02";
    fork.ipv4 = config();
    auto second = identity(client, fork);
    REQUIRE_MESSAGE(second.has_value(), (second ? "" : second.error().to_string()));
    CHECK(second->generation == 2);
    CHECK(second->mac == "02:00:00:00:00:02");
    CHECK(second->ipv4->addresses == std::vector<Ipv4Prefix>{fork.ipv4->address});
    check_exactly(n, *fork.ipv4);
    auto link = ip_json(std::string("link show dev ") + kDev);
    CHECK(link.at(0).value("address", "") == "02:00:00:00:00:02");

    auto repeat = identity(client, fork);
    REQUIRE(repeat.has_value());
    CHECK(repeat->ipv4 == second->ipv4);
    auto query = identity(client, IdentityRequest{});
    REQUIRE(query.has_value());
    CHECK(query->ipv4 == second->ipv4);
    CHECK_FALSE(query->ipv4_configured);
}

int main(int argc, char** argv) {
    auto skip = [](const char* why) {
        std::printf("SKIP: %s\n", why);
        return 77;
    };
    if (::geteuid() != 0) {
        return skip("needs root (a network namespace and a veth pair of its own)");
    }
    if (::unshare(CLONE_NEWNET) != 0) {
        return skip("unshare(CLONE_NEWNET) failed: no network namespaces here");
    }
    if (run("ip link add sbxprobe0 type veth peer name sbxprobe1").status != 0) {
        return skip("no veth (or no ip(8)) here");
    }
    (void)run("ip link del sbxprobe0");
    doctest::Context context(argc, argv);
    return context.run();
}
