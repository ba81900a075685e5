// The identity op against a fake kernel: parsing and validation of its
// fields (clear bad_request errors, nothing applied), what it asks of the
// kernel (seed then reseed; the MAC live or with the link down), what it
// reports (also in health), and the client and kernel-side helpers.
#include <doctest/doctest.h>
#include <unistd.h>

#include <fstream>

#include "guest-agent/agent/agent_test_util.hpp"
#include "guest-agent/identity/identity_client.hpp"

using namespace sbx;
using namespace sbx::agent;
using namespace sbx::agent::testing;

namespace {

std::string hex_seed(std::size_t bytes, std::uint8_t first = 0) {
    std::vector<std::uint8_t> seed(bytes);
    for (std::size_t i = 0; i < bytes; ++i) {
        seed[i] = static_cast<std::uint8_t>(first + i);
    }
    return to_hex(seed);
}

void check_refused(AgentClient& client, Json fields, std::string_view mentions) {
    auto reply = client.call("identity", std::move(fields));
    REQUIRE_FALSE(reply);
    CHECK(error_code(reply.error()) == "bad_request");
    CHECK_MESSAGE(reply.error().message.find(mentions) != std::string::npos, reply.error().message);
}

}  // namespace

TEST_CASE("identity with no fields reports the identity and changes nothing") {
    AgentHarness h;
    h.identity_kernel->cid = 7;
    auto client = h.connect();
    auto reply = client.call("identity");
    REQUIRE_MESSAGE(reply.has_value(), (reply ? "" : reply.error().to_string()));
    CHECK((*reply)["type"] == "result");
    CHECK((*reply)["generation"] == 0);
    CHECK((*reply)["cid"] == 7);
    CHECK((*reply)["mac"].is_null());
    CHECK((*reply)["interface"].is_null());
    CHECK((*reply)["boot_id"].is_string());
    CHECK((*reply)["reseeded"] == false);
    CHECK((*reply)["link_restarted"] == false);
    CHECK(h.identity_kernel->entropy.empty());
    CHECK(h.identity_kernel->reseeds == 0);
    CHECK(h.identity_kernel->calls.empty());
}

TEST_CASE("the cid is null when neither the device nor the connection has one") {
    AgentHarness h;
    auto client = h.connect();
    auto reply = client.call("identity");
    REQUIRE(reply.has_value());
    CHECK((*reply)["cid"].is_null());
}

TEST_CASE("the generation is kept, reported by identity and health, and only replaced when given") {
    AgentHarness h;
    h.identity_kernel->cid = 42;
    auto client = h.connect();
    auto set = client.call("identity", Json{{"generation", 18446744073709551615ULL}});
    REQUIRE(set.has_value());
    CHECK((*set)["generation"].get<std::uint64_t>() == 18446744073709551615ULL);
    auto other = h.connect();
    auto query = other.call("identity", Json::object());
    REQUIRE(query.has_value());
    CHECK((*query)["generation"].get<std::uint64_t>() == 18446744073709551615ULL);
    REQUIRE(other.call("identity", Json{{"generation", 3}}).has_value());
    auto health = client.health();
    REQUIRE(health.has_value());
    CHECK((*health)["generation"] == 3);
    CHECK((*health)["cid"] == 42);
}

TEST_CASE("a seed is mixed into the kernel RNG, then the CRNG is reseeded") {
    AgentHarness h;
    auto client = h.connect();
    int calls = 0;
    for (std::size_t bytes : {kMinSeedBytes, std::size_t{64}, kMaxSeedBytes}) {
        CAPTURE(bytes);
        auto reply = client.call("identity", Json{{"seed", hex_seed(bytes, 0xf0)}});
        REQUIRE_MESSAGE(reply.has_value(), (reply ? "" : reply.error().to_string()));
        CHECK((*reply)["reseeded"] == true);
        ++calls;
        REQUIRE(h.identity_kernel->entropy.size() == static_cast<std::size_t>(calls));
        CHECK(to_hex(h.identity_kernel->entropy.back()) == hex_seed(bytes, 0xf0));
        CHECK(h.identity_kernel->reseeds == calls);
    }
}

TEST_CASE("upper-case hex seeds are accepted") {
    AgentHarness h;
    auto client = h.connect();
    std::string seed = hex_seed(32, 0xa0);
    for (auto& c : seed) {
        c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    }
    REQUIRE(client.call("identity", Json{{"seed", seed}}).has_value());
    CHECK(to_hex(h.identity_kernel->entropy.at(0)) == hex_seed(32, 0xa0));
}

TEST_CASE("malformed fields are bad_request and nothing is applied") {
    AgentHarness h;
    h.identity_kernel->ifname = "eth0";
    auto client = h.connect();
    check_refused(client, Json{{"seed", hex_seed(31)}}, "32 to 512 bytes, got 31");
    check_refused(client, Json{{"seed", hex_seed(513)}}, "32 to 512 bytes, got 513");
    check_refused(client, Json{{"seed", hex_seed(32) + "a"}}, "odd length");
    check_refused(client, Json{{"seed", "zz" + hex_seed(32).substr(2)}}, "bad character at 0");
    check_refused(client, Json{{"seed", 12}}, "\"seed\" must be a string");
    check_refused(client, Json{{"mac", "52:54:00:12:34"}}, "is not six colon-separated hex octets");
    check_refused(client, Json{{"mac", "52-54-00-12-34-56"}}, "is not six colon-separated hex octets");
    check_refused(client, Json{{"mac", "52:54:00:12:34:5g"}}, "is not six colon-separated hex octets");
    check_refused(client, Json{{"mac", "01:00:5e:00:00:01"}}, "multicast");
    check_refused(client, Json{{"mac", "00:00:00:00:00:00"}}, "all zeros");
    check_refused(client, Json{{"mac", true}}, "\"mac\" must be a string");
    check_refused(client, Json{{"generation", -1}}, "\"generation\" must be an integer");
    check_refused(client, Json{{"generation", "1"}}, "\"generation\" must be an integer");
    check_refused(client, Json{{"generation", 1.5}}, "\"generation\" must be an integer");
    // A bad field refuses the whole request, including the good ones.
    check_refused(client, Json{{"generation", 9}, {"seed", hex_seed(32)}, {"mac", "ff:ff:ff:ff:ff:ff"}},
                  "multicast");
    CHECK(h.identity_kernel->entropy.empty());
    CHECK(h.identity_kernel->calls.empty());
    auto query = client.call("identity");
    REQUIRE(query.has_value());
    CHECK((*query)["generation"] == 0);
}

TEST_CASE("a failing kernel call is reported by errno and the generation is not stored") {
    AgentHarness h;
    auto client = h.connect();
    SUBCASE("RNDADDENTROPY without CAP_SYS_ADMIN") {
        h.identity_kernel->entropy_errno = EPERM;
        auto reply = client.call("identity", Json{{"generation", 5}, {"seed", hex_seed(32)}});
        REQUIRE_FALSE(reply);
        CHECK(error_code(reply.error()) == "permission_denied");
        CHECK(reply.error().message.find("RNDADDENTROPY") != std::string::npos);
        CHECK(h.identity_kernel->reseeds == 0);
    }
    SUBCASE("RNDRESEEDCRNG before the CRNG is ready") {
        h.identity_kernel->reseed_errno = ENODEV;
        auto reply = client.call("identity", Json{{"generation", 5}, {"seed", hex_seed(32)}});
        REQUIRE_FALSE(reply);
        CHECK(error_code(reply.error()) == "io_error");
        CHECK(reply.error().message.find("RNDRESEEDCRNG") != std::string::npos);
    }
    auto query = client.call("identity");
    REQUIRE(query.has_value());
    CHECK((*query)["generation"] == 0);
}

TEST_CASE("a MAC without a virtio-net interface is no_net_device") {
    AgentHarness h;
    auto client = h.connect();
    auto reply = client.call("identity", Json{{"generation", 2}, {"mac", "52:54:00:aa:bb:cc"}});
    REQUIRE_FALSE(reply);
    CHECK(error_code(reply.error()) == "no_net_device");
    CHECK(client.call("identity").value()["generation"] == 0);
}

TEST_CASE("a MAC is set live when the driver allows it") {
    AgentHarness h;
    h.identity_kernel->ifname = "eth0";
    auto client = h.connect();
    auto reply = client.call("identity", Json{{"generation", 2}, {"mac", "52:54:00:AA:BB:CC"}});
    REQUIRE_MESSAGE(reply.has_value(), (reply ? "" : reply.error().to_string()));
    CHECK((*reply)["mac"] == "52:54:00:aa:bb:cc");
    CHECK((*reply)["interface"] == "eth0");
    CHECK((*reply)["generation"] == 2);
    CHECK((*reply)["link_restarted"] == false);
    CHECK(h.identity_kernel->calls == std::vector<std::string>{"set_hw_address"});
}

TEST_CASE("a driver that refuses a live change gets the link taken down and up again") {
    AgentHarness h;
    h.identity_kernel->ifname = "eth0";
    h.identity_kernel->live_change = false;
    const std::uint32_t flags = h.identity_kernel->flags;
    auto client = h.connect();
    auto reply = client.call("identity", Json{{"mac", "52:54:00:00:00:99"}});
    REQUIRE_MESSAGE(reply.has_value(), (reply ? "" : reply.error().to_string()));
    CHECK((*reply)["mac"] == "52:54:00:00:00:99");
    CHECK((*reply)["link_restarted"] == true);
    CHECK(h.identity_kernel->calls ==
          std::vector<std::string>{"set_hw_address", "set_flags down", "set_hw_address", "set_flags up"});
    CHECK(h.identity_kernel->flags == flags);
}

TEST_CASE("the client checks its request, sends it and reads the reply") {
    AgentHarness h;
    h.identity_kernel->cid = 9;
    h.identity_kernel->ifname = "eth0";
    auto client = h.connect();
    IdentityRequest bad_mac;
    bad_mac.mac = "not a mac";
    auto refused = identity(client, bad_mac);
    REQUIRE_FALSE(refused);
    CHECK(refused.error().message.find("\"mac\"") != std::string::npos);
    IdentityRequest short_seed;
    short_seed.seed.resize(16);
    CHECK_FALSE(identity(client, short_seed));

    auto seed = random_seed(64);
    REQUIRE(seed.has_value());
    CHECK(seed->size() == 64);
    IdentityRequest request;
    request.generation = 11;
    request.seed = *seed;
    request.mac = "52:54:00:12:34:56";
    auto reply = identity(client, request);
    REQUIRE_MESSAGE(reply.has_value(), (reply ? "" : reply.error().to_string()));
    CHECK(reply->generation == 11);
    CHECK(reply->cid == 9u);
    CHECK(reply->mac == "52:54:00:12:34:56");
    CHECK(reply->interface == "eth0");
    CHECK(reply->reseeded);
    CHECK(h.identity_kernel->entropy.at(0) == *seed);

    auto query = identity(client, IdentityRequest{});
    REQUIRE(query.has_value());
    CHECK(query->generation == 11);
    CHECK_FALSE(query->reseeded);
}

TEST_CASE("hostile identity replies are refused") {
    Json good{{"type", "result"},     {"generation", 1u}, {"cid", 3u},        {"mac", nullptr},
              {"interface", nullptr}, {"boot_id", "b"},   {"reseeded", false}};
    CHECK(parse_identity_reply(good).has_value());
    auto with = [&](std::string_view key, Json value) {
        Json j = good;
        j[std::string(key)] = std::move(value);
        return parse_identity_reply(j);
    };
    CHECK_FALSE(with("generation", "1"));
    CHECK_FALSE(with("generation", -1));
    CHECK_FALSE(with("cid", 4294967296ULL));
    CHECK_FALSE(with("cid", "3"));
    CHECK_FALSE(with("mac", 5));
    CHECK_FALSE(with("type", "error"));
}

TEST_CASE("MAC addresses parse and print lower-case") {
    auto mac = parse_mac("02:AB:cd:00:ff:10");
    REQUIRE(mac.has_value());
    CHECK(format_mac(*mac) == "02:ab:cd:00:ff:10");
    CHECK_FALSE(parse_mac("02:ab:cd:00:ff:10:"));
    CHECK_FALSE(parse_mac("02:ab:cd:00:ff:1"));
    CHECK_FALSE(parse_mac("02:ab:cd:00:ff:+1"));
}

TEST_CASE("the RNDADDENTROPY argument counts bits of entropy and bytes of buffer") {
    std::vector<std::uint8_t> seed(33);
    for (std::size_t i = 0; i < seed.size(); ++i) {
        seed[i] = static_cast<std::uint8_t>(0x80 + i);
    }
    auto words = rand_pool_info_words(seed);
    REQUIRE(words.size() == 2 + 9);
    CHECK(static_cast<int>(words[0]) == 33 * 8);  // entropy_count, bits
    CHECK(static_cast<int>(words[1]) == 33);      // buf_size, bytes
    CHECK(std::memcmp(words.data() + 2, seed.data(), seed.size()) == 0);
    const auto* tail = reinterpret_cast<const std::uint8_t*>(words.data() + 2) + seed.size();
    CHECK(tail[0] == 0);
    CHECK(tail[1] == 0);
    CHECK(tail[2] == 0);
}

TEST_CASE("the virtio-net interface is found by its driver link, lowest ifindex first") {
    TempDir sys;
    auto add = [&](const std::string& name, int ifindex, const std::string& driver) {
        auto dir = sys.path / "class/net" / name;
        std::filesystem::create_directories(dir);
        std::ofstream(dir / "ifindex") << ifindex << "\n";
        if (!driver.empty()) {
            auto device = sys.path / "devices" / name;
            std::filesystem::create_directories(device);
            std::filesystem::create_directories(sys.path / "bus/drivers" / driver);
            std::filesystem::create_directory_symlink(sys.path / "bus/drivers" / driver, device / "driver");
            std::filesystem::create_directory_symlink(device, dir / "device");
        }
    };
    add("lo", 1, "");
    add("eth1", 4, "virtio_net");
    add("eth0", 3, "virtio_net");
    add("eth2", 2, "e1000");
    CHECK(virtio_net_interfaces(sys.path / "class/net") == std::vector<std::string>{"eth0", "eth1"});
    CHECK(make_system_identity_kernel(sys.path / "class/net")->virtio_net_interface() == "eth0");
    CHECK(virtio_net_interfaces(sys.path / "missing").empty());
}

TEST_CASE("the real kernel finds no vsock CID on a Unix socket") {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
    UniqueFd a(fds[0]), b(fds[1]);
    CHECK_FALSE(make_system_identity_kernel()->socket_cid(a.get()).has_value());
}

namespace {

const std::string kNewToken = "00112233445566778899aabbccddeeff";

void check_hello_refused(AgentHarness& h, std::string_view token) {
    auto refused = AgentClient::handshake(h.connect_raw(), token);
    REQUIRE_FALSE(refused);
    CHECK(error_code(refused.error()) == "unauthorized");
}

}  // namespace

TEST_CASE("identity replaces the token: new hellos need the new one, open sessions stay") {
    AgentHarness h;
    auto client = h.connect();
    auto other = h.connect();
    auto reply = client.call("identity", Json{{"token", kNewToken}});
    REQUIRE_MESSAGE(reply.has_value(), (reply ? "" : reply.error().to_string()));
    CHECK((*reply)["token_replaced"] == true);
    CHECK(reply->dump().find(kNewToken) == std::string::npos);  // never echoed
    check_hello_refused(h, kTestToken);
    auto fresh = h.connect(kNewToken);
    CHECK(fresh.health().has_value());
    CHECK(client.health().has_value());  // the sessions authenticated before
    CHECK(other.health().has_value());
    auto query = client.call("identity");
    REQUIRE(query.has_value());
    CHECK((*query)["token_replaced"] == false);
    check_hello_refused(h, kTestToken);
}

TEST_CASE("a malformed token is bad_request and the old token stays") {
    AgentHarness h;
    auto client = h.connect();
    check_refused(client, Json{{"token", 12}}, "\"token\"");
    check_refused(client, Json{{"token", std::string(31, 'a')}}, "\"token\"");
    check_refused(client, Json{{"token", std::string(129, 'a')}}, "\"token\"");
    check_refused(client, Json{{"token", "00112233445566778899AABBCCDDEEFF"}}, "\"token\"");
    check_refused(client, Json{{"token", "0011223344556677 8899aabbccddeeff"}}, "\"token\"");
    check_refused(client, Json{{"token", kNewToken}, {"generation", -1}}, "generation");
    CHECK(h.connect().health().has_value());
    check_hello_refused(h, kNewToken);
}

TEST_CASE("an identity call that fails keeps the old token, and can be repeated with it") {
    AgentHarness h;
    auto client = h.connect();
    auto failed = client.call("identity", Json{{"token", kNewToken}, {"mac", "02:00:00:00:00:01"}});
    REQUIRE_FALSE(failed);
    CHECK(error_code(failed.error()) == "no_net_device");
    auto again = h.connect();
    h.identity_kernel->ifname = "eth0";
    REQUIRE(again.call("identity", Json{{"token", kNewToken}, {"mac", "02:00:00:00:00:01"}}).has_value());
    check_hello_refused(h, kTestToken);
    CHECK(h.connect(kNewToken).health().has_value());
}

TEST_CASE("an agent started without a token gets one from identity") {
    AgentHarness h("");
    auto client = h.connect("");
    auto health = client.health();
    REQUIRE(health.has_value());
    CHECK((*health)["authenticated"] == false);
    REQUIRE(client.call("identity", Json{{"token", kNewToken}}).has_value());
    check_hello_refused(h, "");
    auto fresh = h.connect(kNewToken);
    auto after = fresh.health();
    REQUIRE(after.has_value());
    CHECK((*after)["authenticated"] == true);
}

TEST_CASE("the client sends a new token, checks it first and wants it confirmed") {
    AgentHarness h;
    auto client = h.connect();
    auto token = random_token();
    REQUIRE(token.has_value());
    CHECK(token->size() == 32);
    CHECK(check_token(*token).has_value());
    CHECK(*token != *random_token());

    IdentityRequest bad;
    bad.token = "short";
    auto refused = identity(client, bad);
    REQUIRE_FALSE(refused);
    CHECK(refused.error().message.find("\"token\"") != std::string::npos);

    IdentityRequest request;
    request.token = *token;
    auto reply = identity(client, request);
    REQUIRE_MESSAGE(reply.has_value(), (reply ? "" : reply.error().to_string()));
    CHECK(reply->token_replaced);
    CHECK(h.connect(*token).health().has_value());
    check_hello_refused(h, kTestToken);
}
