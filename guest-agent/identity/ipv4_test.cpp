// The identity op's "ipv4" against a fake kernel: the syntax and rules of
// the object (bad_request naming the field, nothing applied), the order of
// the kernel calls (after the MAC; link, addresses, route, resolver file),
// the replacement of a parent's address and routes, idempotence, a failure
// part-way and its repetition, the read-back in the reply; the client's
// side; and the rtnetlink parsers on crafted messages.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>

#include <cstring>

#include "guest-agent/agent/agent_test_util.hpp"
#include "guest-agent/identity/identity_client.hpp"
#include "guest-agent/identity/rtnetlink.hpp"

using namespace sbx;
using namespace sbx::agent;
using namespace sbx::agent::testing;

namespace {

Ipv4Address ip(std::string_view text) {
    auto a = parse_ipv4(text);
    REQUIRE_MESSAGE(a.has_value(), text);
    return *a;
}
Ipv4Prefix prefix(std::string_view text) {
    auto p = parse_ipv4_prefix(text);
    REQUIRE_MESSAGE(p.has_value(), text);
    return *p;
}

Json ipv4_object(std::string address = "10.231.0.6/30", std::string gateway = "10.231.0.5",
                 Json dns = Json::array({"10.231.0.5"})) {
    Json j{{"address", std::move(address)}, {"gateway", std::move(gateway)}};
    if (!dns.is_null()) {
        j["dns"] = std::move(dns);
    }
    return j;
}

void check_refused(AgentClient& client, Json fields, std::string_view mentions) {
    auto reply = client.call("identity", std::move(fields));
    REQUIRE_FALSE(reply);
    CHECK(error_code(reply.error()) == "bad_request");
    CHECK_MESSAGE(reply.error().message.find(mentions) != std::string::npos, reply.error().message);
}

const std::string kResolv =
    "# Written by sbx-agent (the identity op's \"ipv4\"): the sandbox's DNS as the host "
    "gave it.\nnameserver 10.231.0.5\noptions edns0 trust-ad\n";

// A harness whose fake has a virtio-net interface "eth0", up.
struct NetHarness : AgentHarness {
    NetHarness() { identity_kernel->ifname = "eth0"; }
};

}  // namespace

TEST_CASE("dotted quads and prefixes parse strictly") {
    CHECK(ip("10.231.0.6").value == 0x0ae70006);
    CHECK(ip("0.0.0.0").value == 0);
    CHECK(ip("255.255.255.255").value == 0xffffffff);
    CHECK(format_ipv4(ip("192.0.2.1")) == "192.0.2.1");
    for (std::string_view bad : {"", "10.231.0", "10.231.0.6.1", "10.231.0.256", "10.231.0.06", "010.1.1.1",
                                 "10.231.0.-1", "10.231.0.+1", " 10.231.0.6", "10.231.0.6 ", "10..0.6",
                                 "10.231.0.", "0x0a.1.1.1", "1e1.1.1.1", "10.231.0.6/30", "1000.1.1.1"}) {
        CAPTURE(bad);
        auto r = parse_ipv4(bad);
        REQUIRE_FALSE(r);
        CHECK(r.error().message.find("is not an IPv4 address") != std::string::npos);
    }
    CHECK(prefix("10.231.0.6/30") == Ipv4Prefix{ip("10.231.0.6"), 30});
    CHECK(prefix("0.0.0.0/0").length == 0);
    CHECK(prefix("10.0.0.1/32").length == 32);
    CHECK(format_ipv4_prefix(prefix("10.231.0.6/30")) == "10.231.0.6/30");
    for (std::string_view bad : {"10.231.0.6", "10.231.0.6/", "10.231.0.6/33", "10.231.0.6/030",
                                 "10.231.0.6/-1", "10.231.0.6/3 ", "10.231.0.6/30/1", "/30"}) {
        CAPTURE(bad);
        CHECK_FALSE(parse_ipv4_prefix(bad));
    }
    const Ipv4Prefix net = prefix("10.231.0.6/30");
    CHECK(format_ipv4(net.network()) == "10.231.0.4");
    CHECK(format_ipv4(net.broadcast()) == "10.231.0.7");
    CHECK(net.contains(ip("10.231.0.5")));
    CHECK_FALSE(net.contains(ip("10.231.0.9")));
    CHECK(prefix("1.2.3.4/0").contains(ip("200.1.1.1")));
}

TEST_CASE(
    "the ipv4 rules: unicast, the gateway inside the network and not the address, at most 3 DNS servers") {
    auto check = [](std::string address, std::string gateway, Json dns = Json::array()) {
        return parse_ipv4_config(ipv4_object(std::move(address), std::move(gateway), std::move(dns)));
    };
    CHECK(check("10.231.0.6/30", "10.231.0.5", Json::array({"10.231.0.5", "192.0.2.53", "127.0.0.53"})));
    CHECK(check("10.231.0.0/31", "10.231.0.1"));  // RFC 3021: both addresses of a /31 are hosts
    CHECK(check("10.231.0.1/31", "10.231.0.0"));
    CHECK(check("192.0.2.10/24", "192.0.2.1"));
    CHECK(check("192.0.2.10/0", "198.51.100.1"));  // on-link everything
    struct Case {
        std::string address, gateway;
        Json dns;
        std::string_view mentions;
    };
    for (const Case& c : std::vector<Case>{
             {"10.231.0.6/30", "10.231.0.9", {}, "\"gateway\" 10.231.0.9 is outside 10.231.0.4/30"},
             {"10.231.0.6/30", "10.231.0.6", {}, "\"gateway\" 10.231.0.6 is the address itself"},
             {"10.231.0.6/32", "10.231.0.5", {}, "is outside 10.231.0.6/32"},
             {"10.231.0.4/30",
              "10.231.0.5",
              {},
              "\"address\" 10.231.0.4 is the network address of 10.231.0.4/30"},
             {"10.231.0.7/30", "10.231.0.5", {}, "\"address\" 10.231.0.7 is the broadcast address"},
             {"10.231.0.6/30", "10.231.0.4", {}, "\"gateway\" 10.231.0.4 is the network address"},
             {"10.231.0.6/30", "10.231.0.7", {}, "\"gateway\" 10.231.0.7 is the broadcast address"},
             {"127.0.0.2/8", "127.0.0.1", {}, "\"address\" 127.0.0.2 is not a unicast address"},
             {"0.0.0.1/8", "0.0.0.2", {}, "\"address\" 0.0.0.1 is not a unicast address"},
             {"224.0.0.6/30", "224.0.0.5", {}, "\"address\" 224.0.0.6 is not a unicast"},
             {"250.0.0.6/30", "250.0.0.5", {}, "\"address\" 250.0.0.6 is not a unicast"},
             {"10.231.0.6/0", "0.0.0.1", {}, "\"gateway\" 0.0.0.1 is not a unicast address"},
             {"10.231.0.6/30", "10.231.0.5", Json::array({"1.1.1.1", "2.2.2.2", "3.3.3.3", "4.4.4.4"}),
              "\"dns\" lists 4 servers; at most 3"},
             {"10.231.0.6/30", "10.231.0.5", Json::array({"1.1.1.1", "1.1.1.1"}),
              "\"dns\" lists 1.1.1.1 twice"},
             {"10.231.0.6/30", "10.231.0.5", Json::array({"224.0.0.251"}),
              "\"dns\" 224.0.0.251 is not a unicast"},
             {"10.231.0.6/30", "10.231.0.5", Json::array({"0.0.0.0"}), "\"dns\" 0.0.0.0 is not a unicast"},
             {"10.231.0.6/30", "10.231.0.5", Json::array({"10.231.0.256"}),
              "\"dns\": \"10.231.0.256\" is not"},
             {"10.231.0.6/30", "10.231.0.5", Json::array({5}), "\"dns\" must be an array of strings"},
             {"10.231.0.6", "10.231.0.5", {}, "\"address\": \"10.231.0.6\" has no prefix length"},
             {"10.231.0.6/31/", "10.231.0.5", {}, "no prefix length from 0 to 32"},
             {"10.231.0.6/30", "10.231.0.5/30", {}, "\"gateway\": \"10.231.0.5/30\" is not an IPv4 address"},
         }) {
        CAPTURE(c.address);
        CAPTURE(c.gateway);
        auto r = check(c.address, c.gateway, c.dns.is_null() ? Json::array() : c.dns);
        REQUIRE_FALSE(r);
        CHECK_MESSAGE(r.error().message.find(c.mentions) != std::string::npos, r.error().message);
    }
}

TEST_CASE("the ipv4 object: its shape, unknown keys, and dns absent versus empty") {
    CHECK(parse_ipv4_config(Json("10.231.0.6/30")).error().message.find("must be an object") !=
          std::string::npos);
    CHECK(parse_ipv4_config(Json{{"address", "10.231.0.6/30"}})
              .error()
              .message.find("\"gateway\" must be a string") != std::string::npos);
    CHECK(parse_ipv4_config(Json{{"gateway", "10.231.0.5"}})
              .error()
              .message.find("\"address\" must be a string") != std::string::npos);
    Json typo = ipv4_object();
    typo["nameservers"] = Json::array();
    CHECK(parse_ipv4_config(typo).error().message.find("unknown field \"nameservers\"") != std::string::npos);
    Json not_array = ipv4_object();
    not_array["dns"] = "10.231.0.5";
    CHECK(parse_ipv4_config(not_array).error().message.find("\"dns\" must be an array") != std::string::npos);

    auto absent = parse_ipv4_config(ipv4_object("10.231.0.6/30", "10.231.0.5", nullptr));
    REQUIRE(absent);
    CHECK_FALSE(absent->dns.has_value());
    Json null_dns = ipv4_object();
    null_dns["dns"] = nullptr;
    CHECK_FALSE(parse_ipv4_config(null_dns)->dns.has_value());
    auto empty = parse_ipv4_config(ipv4_object("10.231.0.6/30", "10.231.0.5", Json::array()));
    REQUIRE(empty);
    REQUIRE(empty->dns.has_value());
    CHECK(empty->dns->empty());

    auto full = parse_ipv4_config(ipv4_object());
    REQUIRE(full);
    CHECK(ipv4_config_json(*full) == ipv4_object());
    CHECK(*parse_ipv4_config(ipv4_config_json(*full)) == *full);
    auto settings =
        parse_ipv4_settings("10.231.0.6/30", "10.231.0.5", std::vector<std::string>{"10.231.0.5"});
    REQUIRE(settings);
    CHECK(*settings == *full);
    CHECK_FALSE(parse_ipv4_settings("10.231.0.6/30", "10.231.0.9", std::nullopt));
}

TEST_CASE("resolv.conf is written with nameserver lines and read back by them") {
    const std::vector<Ipv4Address> servers{ip("10.231.0.5"), ip("192.0.2.53")};
    const std::string text = resolv_conf_text(servers);
    CHECK(text.find("nameserver 10.231.0.5\nnameserver 192.0.2.53\noptions edns0 trust-ad\n") !=
          std::string::npos);
    CHECK(resolv_conf_nameservers(text) == servers);
    CHECK(resolv_conf_text({}).find("nameserver") == std::string::npos);
    CHECK(
        resolv_conf_nameservers("nameserver\t10.0.0.1 # comment\n"
                                "  nameserver 10.0.0.9\n"  // not at the start of the line: glibc skips it too
                                "nameserver ::1\n"         // IPv6: not ours to report
                                "nameservers 10.0.0.2\n"
                                "#nameserver 10.0.0.3\n"
                                "nameserver 10.0.0.4;x\r\n"
                                "nameserver 10.0.0.5") ==
        std::vector<Ipv4Address>{ip("10.0.0.1"), ip("10.0.0.4"), ip("10.0.0.5")});
}

TEST_CASE("a malformed ipv4 is bad_request and nothing is applied") {
    NetHarness h;
    auto client = h.connect();
    check_refused(client, Json{{"ipv4", "10.231.0.6/30"}}, "\"ipv4\": must be an object");
    check_refused(client, Json{{"ipv4", ipv4_object("10.231.0.6/30", "10.231.0.9")}},
                  "\"ipv4\": \"gateway\" 10.231.0.9 is outside");
    check_refused(client,
                  Json{{"generation", 4}, {"mac", "02:00:00:00:00:02"}, {"ipv4", ipv4_object("10.231.0.6")}},
                  "\"ipv4\": \"address\"");
    CHECK(h.identity_kernel->calls.empty());
    auto query = client.call("identity");
    REQUIRE(query);
    CHECK((*query)["generation"] == 0);
    CHECK((*query)["ipv4_configured"] == false);
}

TEST_CASE("ipv4 without a virtio-net interface is no_net_device") {
    AgentHarness h;
    auto client = h.connect();
    auto reply = client.call("identity", Json{{"generation", 3}, {"ipv4", ipv4_object()}});
    REQUIRE_FALSE(reply);
    CHECK(error_code(reply.error()) == "no_net_device");
    CHECK(reply.error().message.find("10.231.0.6/30") != std::string::npos);
    auto query = client.call("identity");
    REQUIRE(query);
    CHECK((*query)["generation"] == 0);
    CHECK((*query)["ipv4"].is_null());  // nothing to report either
}

TEST_CASE("a first configuration: link up, the address, the default route, the resolver file") {
    NetHarness h;
    h.identity_kernel->flags = 0;  // down, as a freshly booted guest's eth0
    auto client = h.connect();
    auto reply = client.call("identity", Json{{"ipv4", ipv4_object()}});
    REQUIRE_MESSAGE(reply.has_value(), (reply ? "" : reply.error().to_string()));
    CHECK(h.identity_kernel->calls == std::vector<std::string>{"set_flags up", "add_address 10.231.0.6/30",
                                                               "replace_route via 10.231.0.5",
                                                               "write_resolv_conf"});
    CHECK((*reply)["ipv4_configured"] == true);
    CHECK((*reply)["interface"] == "eth0");
    CHECK((*reply)["ipv4"] == Json{{"link_up", true},
                                   {"addresses", {"10.231.0.6/30"}},
                                   {"gateway", "10.231.0.5"},
                                   {"dns", {"10.231.0.5"}}});
    CHECK(h.identity_kernel->resolv.text == kResolv);
    CHECK(h.identity_kernel->routes == std::vector<DefaultRoute>{{ip("10.231.0.5"), "eth0", 0, 0}});
}

TEST_CASE("a fork's parent address and routes are replaced, and a resolver symlink by a file") {
    NetHarness h;
    auto& k = *h.identity_kernel;
    k.addresses = {prefix("10.231.0.2/30"), prefix("10.231.0.6/24"), prefix("192.0.2.7/24")};
    k.routes = {
        {ip("10.231.0.1"), "eth0", 0, 0}, {ip("192.0.2.1"), "eth0", 100, 0}, {std::nullopt, "", 50, 0}};
    k.resolv = ResolvConf{true, true, "../run/systemd/resolve/stub-resolv.conf", "nameserver 127.0.0.53\n"};
    auto client = h.connect();
    auto reply = client.call("identity", Json{{"generation", 8}, {"ipv4", ipv4_object()}});
    REQUIRE_MESSAGE(reply.has_value(), (reply ? "" : reply.error().to_string()));
    CHECK(k.calls == std::vector<std::string>{"delete_address 10.231.0.2/30", "delete_address 10.231.0.6/24",
                                              "delete_address 192.0.2.7/24", "add_address 10.231.0.6/30",
                                              "replace_route via 10.231.0.5",
                                              "delete_route via 192.0.2.1 metric 100",
                                              "delete_route via - metric 50", "write_resolv_conf"});
    CHECK(k.addresses == std::vector<Ipv4Prefix>{prefix("10.231.0.6/30")});
    CHECK(k.routes == std::vector<DefaultRoute>{{ip("10.231.0.5"), "eth0", 0, 0}});
    CHECK_FALSE(k.resolv.symlink);
    CHECK(k.resolv.text == kResolv);
    CHECK((*reply)["generation"] == 8);
    CHECK((*reply)["ipv4"]["addresses"] == Json::array({"10.231.0.6/30"}));
}

TEST_CASE("the same ipv4 twice leaves the same state and rewrites nothing") {
    NetHarness h;
    auto client = h.connect();
    auto first = client.call("identity", Json{{"ipv4", ipv4_object()}});
    REQUIRE(first);
    const auto addresses = h.identity_kernel->addresses;
    const auto routes = h.identity_kernel->routes;
    h.identity_kernel->calls.clear();
    auto second = client.call("identity", Json{{"ipv4", ipv4_object()}});
    REQUIRE_MESSAGE(second.has_value(), (second ? "" : second.error().to_string()));
    // The add and the replace are sent again (NLM_F_REPLACE keeps what is there); no delete, no write.
    CHECK(h.identity_kernel->calls ==
          std::vector<std::string>{"add_address 10.231.0.6/30", "replace_route via 10.231.0.5"});
    CHECK(h.identity_kernel->addresses == addresses);
    CHECK(h.identity_kernel->routes == routes);
    CHECK((*second)["ipv4"] == (*first)["ipv4"]);
}

TEST_CASE("the MAC is changed first; a link restarted for it gets its route back") {
    NetHarness h;
    auto& k = *h.identity_kernel;
    k.live_change = false;
    k.addresses = {prefix("10.231.0.2/30")};
    k.routes = {{ip("10.231.0.1"), "eth0", 0, 0}};
    auto client = h.connect();
    auto reply = client.call("identity", Json{{"mac", "02:00:00:00:00:07"}, {"ipv4", ipv4_object()}});
    REQUIRE_MESSAGE(reply.has_value(), (reply ? "" : reply.error().to_string()));
    CHECK(k.calls == std::vector<std::string>{"set_hw_address", "set_flags down", "set_hw_address",
                                              "set_flags up", "delete_address 10.231.0.2/30",
                                              "add_address 10.231.0.6/30", "replace_route via 10.231.0.5",
                                              "write_resolv_conf"});
    CHECK((*reply)["link_restarted"] == true);
    CHECK((*reply)["mac"] == "02:00:00:00:00:07");
    CHECK(k.routes == std::vector<DefaultRoute>{{ip("10.231.0.5"), "eth0", 0, 0}});
}

TEST_CASE("a call failing part-way keeps the generation and token, and repeated whole it converges") {
    NetHarness h;
    auto& k = *h.identity_kernel;
    k.addresses = {prefix("10.231.0.2/30")};
    k.routes = {{ip("10.231.0.1"), "eth0", 0, 0}};
    const std::string token = "00112233445566778899aabbccddeeff";
    const Json request{{"generation", 5}, {"token", token}, {"ipv4", ipv4_object()}};
    auto client = h.connect();
    for (std::string_view step : {"delete_address", "add_address", "replace_route", "write_resolv_conf"}) {
        CAPTURE(step);
        k.fail_call = std::string(step);
        auto failed = client.call("identity", request);
        REQUIRE_FALSE(failed);
        CHECK(error_code(failed.error()) == "permission_denied");
        CHECK(failed.error().message.find("setting 10.231.0.6/30 on eth0") != std::string::npos);
        CHECK(k.calls.back().starts_with(step));  // the step failed was reached
        CHECK(h.connect().health().has_value());  // the old token still opens sessions
        CHECK(client.call("identity").value()["generation"] == 0);
    }
    k.fail_call.clear();
    auto again = client.call("identity", request);
    REQUIRE_MESSAGE(again.has_value(), (again ? "" : again.error().to_string()));
    CHECK((*again)["generation"] == 5);
    CHECK((*again)["token_replaced"] == true);
    CHECK(k.addresses == std::vector<Ipv4Prefix>{prefix("10.231.0.6/30")});
    CHECK(k.routes == std::vector<DefaultRoute>{{ip("10.231.0.5"), "eth0", 0, 0}});
    CHECK(k.resolv.text == kResolv);
}

TEST_CASE("a read-back that is not what was asked fails the call before the token is stored") {
    NetHarness h;
    h.identity_kernel->ignore_address_adds = true;  // as if something took the address away at once
    auto client = h.connect();
    const std::string token = "00112233445566778899aabbccddeeff";
    auto failed = client.call("identity", Json{{"generation", 6}, {"token", token}, {"ipv4", ipv4_object()}});
    REQUIRE_FALSE(failed);
    CHECK(error_code(failed.error()) == "io_error");
    CHECK_MESSAGE(
        failed.error().message.find("eth0 after setting 10.231.0.6/30: the interface has the addresses [], "
                                    "not [10.231.0.6/30]") != std::string::npos,
        failed.error().message);
    CHECK(h.connect().health().has_value());
    CHECK(client.call("identity").value()["generation"] == 0);
}

TEST_CASE("dns absent leaves the resolver file alone; dns [] writes it without nameservers") {
    NetHarness h;
    auto& k = *h.identity_kernel;
    k.resolv = ResolvConf{true, false, {}, "nameserver 192.0.2.53\n"};
    auto client = h.connect();
    auto absent =
        client.call("identity", Json{{"ipv4", ipv4_object("10.231.0.6/30", "10.231.0.5", nullptr)}});
    REQUIRE(absent);
    CHECK(k.resolv.text == "nameserver 192.0.2.53\n");
    CHECK((*absent)["ipv4"]["dns"] == Json::array({"192.0.2.53"}));
    auto empty =
        client.call("identity", Json{{"ipv4", ipv4_object("10.231.0.6/30", "10.231.0.5", Json::array())}});
    REQUIRE(empty);
    CHECK(k.resolv.text.find("nameserver") == std::string::npos);
    CHECK(k.resolv.text.find("options edns0 trust-ad") != std::string::npos);
    CHECK((*empty)["ipv4"]["dns"] == Json::array());
}

TEST_CASE("a query reports the interface's IPv4 state, null \"ipv4\" being no change") {
    NetHarness h;
    auto& k = *h.identity_kernel;
    k.addresses = {prefix("10.231.0.2/30"), prefix("192.0.2.7/24")};
    k.routes = {{ip("192.0.2.1"), "eth0", 10, 0},
                {ip("10.231.0.1"), "eth0", 5, 0},
                {ip("198.51.100.1"), "eth1", 0, 0}};
    k.flags = 0;
    auto client = h.connect();
    auto reply = client.call("identity", Json{{"ipv4", nullptr}});
    REQUIRE(reply);
    CHECK(k.calls.empty());
    CHECK((*reply)["ipv4_configured"] == false);
    CHECK((*reply)["ipv4"] == Json{{"link_up", false},
                                   {"addresses", {"10.231.0.2/30", "192.0.2.7/24"}},
                                   {"gateway", "10.231.0.1"},  // the lowest metric through eth0
                                   {"dns", Json::array()}});
}

TEST_CASE("the client sends ipv4, checks it first and wants the read-back to match") {
    NetHarness h;
    auto client = h.connect();
    IdentityRequest bad;
    bad.ipv4 = Ipv4Config{prefix("10.231.0.6/30"), ip("10.231.0.6"), std::nullopt};
    auto refused = identity(client, bad);
    REQUIRE_FALSE(refused);
    CHECK(refused.error().message.find("\"ipv4\": \"gateway\" 10.231.0.6 is the address itself") !=
          std::string::npos);
    CHECK(h.identity_kernel->calls.empty());

    IdentityRequest request;
    request.generation = 2;
    request.ipv4 =
        *parse_ipv4_settings("10.231.0.6/30", "10.231.0.5", std::vector<std::string>{"10.231.0.5"});
    auto reply = identity(client, request);
    REQUIRE_MESSAGE(reply.has_value(), (reply ? "" : reply.error().to_string()));
    CHECK(reply->ipv4_configured);
    REQUIRE(reply->ipv4.has_value());
    CHECK(reply->ipv4->addresses == std::vector<Ipv4Prefix>{prefix("10.231.0.6/30")});
    CHECK(reply->ipv4->gateway == ip("10.231.0.5"));
    CHECK(reply->ipv4->dns == std::vector<Ipv4Address>{ip("10.231.0.5")});
    CHECK(reply->ipv4->link_up);

    auto query = identity(client, IdentityRequest{});
    REQUIRE(query);
    CHECK_FALSE(query->ipv4_configured);
    CHECK(query->ipv4 == reply->ipv4);
}

TEST_CASE("the read-back check names what differs") {
    const Ipv4Config config = *parse_ipv4_config(ipv4_object());
    Ipv4State state{true, {prefix("10.231.0.6/30")}, ip("10.231.0.5"), {ip("10.231.0.5")}};
    CHECK(check_ipv4_state(config, state));
    auto differs = [&](const Ipv4State& s, std::string_view mentions) {
        auto r = check_ipv4_state(config, s);
        REQUIRE_FALSE(r);
        CHECK_MESSAGE(r.error().message.find(mentions) != std::string::npos, r.error().message);
    };
    differs({false, state.addresses, state.gateway, state.dns}, "the link is down");
    differs({true, {prefix("10.231.0.6/30"), prefix("10.231.0.2/30")}, state.gateway, state.dns},
            "the addresses [10.231.0.6/30, 10.231.0.2/30], not [10.231.0.6/30]");
    differs({true, state.addresses, std::nullopt, state.dns}, "the default gateway is none");
    differs({true, state.addresses, state.gateway, {}}, "the DNS servers are [], not [10.231.0.5]");
    Ipv4Config no_dns = config;
    no_dns.dns.reset();
    CHECK(check_ipv4_state(no_dns, {true, state.addresses, state.gateway, {}}));
}

TEST_CASE("hostile ipv4 read-backs are refused") {
    const Json good{{"type", "result"},
                    {"generation", 1},
                    {"ipv4",
                     {{"link_up", true},
                      {"addresses", {"10.231.0.6/30"}},
                      {"gateway", nullptr},
                      {"dns", Json::array()}}}};
    auto parsed = parse_identity_reply(good);
    REQUIRE_MESSAGE(parsed.has_value(), (parsed ? "" : parsed.error().to_string()));
    CHECK_FALSE(parsed->ipv4->gateway.has_value());
    auto with = [&](std::string_view key, Json value) {
        Json j = good;
        j["ipv4"][std::string(key)] = std::move(value);
        return parse_identity_reply(j);
    };
    CHECK_FALSE(with("link_up", "yes"));
    CHECK_FALSE(with("addresses", "10.231.0.6/30"));
    CHECK_FALSE(with("addresses", Json::array({"10.231.0.6"})));
    CHECK_FALSE(with("addresses", Json::array({7})));
    CHECK_FALSE(with("addresses", Json(std::vector<std::string>(257, "10.0.0.1/8"))));
    CHECK_FALSE(with("gateway", 5));
    CHECK_FALSE(with("gateway", "10.231.0.5/30"));
    CHECK_FALSE(with("dns", Json::array({"::1"})));
    Json not_object = good;
    not_object["ipv4"] = Json::array();
    CHECK_FALSE(parse_identity_reply(not_object));
    Json bad_flag = good;
    bad_flag["ipv4_configured"] = "true";
    CHECK_FALSE(parse_identity_reply(bad_flag));
}
