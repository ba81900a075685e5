// The egress policy's JSON, as structure: the transaction shapes (replace
// the table, add or remove a member), the blocked ranges, and where the
// pool, the uplink and each member land. egress_table_test.cpp loads the
// same JSON into a kernel.
#include "host-tools/sbxd/net/egress_rules.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <map>

using namespace sbx;
using namespace sbx::sbxd::net;
using nlohmann::json;

namespace {

EgressPolicy policy() {
    return EgressPolicy{*parse_ipv4_cidr("10.231.0.0/16"), "uplink0"};
}

EgressMember member(std::uint32_t slot, const Egress& egress = {}) {
    return egress_member(*address_of(*AddressPool::parse("10.231.0.0/16"), slot), egress);
}

Egress allow(std::vector<std::string> networks) {
    return *egress_allow_list(networks);
}

// "verb set" for each element command of a batch.
std::vector<std::string> element_shape(const json& batch) {
    std::vector<std::string> shape;
    for (const auto& cmd : batch["nftables"]) {
        const std::string verb = cmd.begin().key();
        REQUIRE(cmd[verb].contains("element"));
        shape.push_back(verb + " " + cmd[verb]["element"]["name"].get<std::string>());
    }
    return shape;
}

// The rules of one chain, in order.
std::vector<json> rules_of(const json& batch, std::string_view chain) {
    std::vector<json> out;
    for (const auto& cmd : batch["nftables"]) {
        if (cmd.contains("add") && cmd["add"].contains("rule") && cmd["add"]["rule"]["chain"] == chain) {
            out.push_back(cmd["add"]["rule"]);
        }
    }
    return out;
}

std::string dump(const json& j) {
    return j.dump();
}

bool mentions(const json& rule, std::string_view text) {
    return dump(rule["expr"]).find(text) != std::string::npos;
}

std::string verdict(const json& rule) {
    const json& last = rule["expr"].back();
    return last.begin().key();
}

// A rule that denies: silently (drop) or out loud (a jump to "refuse").
bool refuses(const json& rule) {
    return rule["expr"].back() == json{{"jump", {{"target", "refuse"}}}};
}
bool denies(const json& rule) {
    return verdict(rule) == "drop" || refuses(rule);
}

}  // namespace

TEST_CASE("the table is replaced in one batch: add, delete, add, then its contents") {
    json batch = table_batch(policy(), {});
    REQUIRE(batch.contains("nftables"));
    const json& cmds = batch["nftables"];
    REQUIRE(cmds.size() > 3);
    const json table = {{"table", {{"family", "inet"}, {"name", "sbxd"}}}};
    CHECK(cmds[0] == json{{"add", table}});
    CHECK(cmds[1] == json{{"delete", table}});
    CHECK(cmds[2] == json{{"add", table}});
    for (std::size_t i = 3; i < cmds.size(); ++i) {
        CAPTURE(dump(cmds[i]));
        REQUIRE(cmds[i].contains("add"));  // nothing after the delete but adds
        const json& object = cmds[i]["add"].begin().value();
        CHECK(object["family"] == "inet");
        CHECK(object["table"] == "sbxd");
    }
}

TEST_CASE("the base chains accept by default and hook input, forward and NAT postrouting") {
    json batch = table_batch(policy(), {});
    int base = 0;
    for (const auto& cmd : batch["nftables"]) {
        if (!cmd.contains("add") || !cmd["add"].contains("chain") || !cmd["add"]["chain"].contains("hook")) {
            continue;
        }
        const json& c = cmd["add"]["chain"];
        ++base;
        CHECK(c["policy"] == "accept");
        if (c["hook"] == "postrouting") {
            CHECK(c["type"] == "nat");
            CHECK(c["prio"] == 100);
        } else {
            CHECK(c["type"] == "filter");
            CHECK(c["prio"] == 0);
        }
    }
    CHECK(base == 3);
    // Only packets of sandbox interfaces reach sbxd's chains.
    for (const char* chain : {"input", "forward"}) {
        for (const auto& r : rules_of(batch, chain)) {
            CHECK(mentions(r, "\"sbx*\""));
            CHECK(r["expr"].back().contains("jump"));
        }
    }
}

TEST_CASE("the blocked ranges are the private, shared, loopback, link-local and reserved blocks") {
    std::vector<Ipv4Cidr> ranges;
    for (auto text : blocked_ipv4_ranges()) {
        auto cidr = parse_ipv4_cidr(text);
        REQUIRE(cidr);
        ranges.push_back(*cidr);
    }
    auto blocked = [&](const char* address) {
        auto a = *parse_ipv4(address);
        return std::any_of(ranges.begin(), ranges.end(), [&](const Ipv4Cidr& c) { return c.contains(a); });
    };
    for (const char* a :
         {"10.99.0.10", "172.16.0.1", "172.31.255.255", "192.168.1.1", "100.64.0.1", "127.0.0.1",
          "169.254.169.254", "0.1.2.3", "224.0.0.251", "240.0.0.1", "255.255.255.255"}) {
        CAPTURE(a);
        CHECK(blocked(a));
    }
    for (const char* a :
         {"198.51.100.10", "203.0.113.1", "1.1.1.1", "172.32.0.1", "100.128.0.1", "223.255.255.255"}) {
        CAPTURE(a);
        CHECK_FALSE(blocked(a));
    }
    // And the set in the table holds exactly these, as prefixes.
    json batch = table_batch(policy(), {});
    bool found = false;
    for (const auto& cmd : batch["nftables"]) {
        if (cmd.contains("add") && cmd["add"].contains("set") &&
            cmd["add"]["set"]["name"] == "blocked_ipv4") {
            found = true;
            const json& s = cmd["add"]["set"];
            CHECK(s["flags"] == json::array({"interval"}));
            REQUIRE(s["elem"].size() == blocked_ipv4_ranges().size());
            CHECK(s["elem"][1] == json{{"prefix", {{"addr", "10.0.0.0"}, {"len", 8}}}});
        }
    }
    CHECK(found);
}

TEST_CASE("traffic from a sandbox: every drop before the one accept out the uplink") {
    json batch = table_batch(policy(), {});
    auto rules = rules_of(batch, "from_sandbox");
    REQUIRE(rules.size() >= 8);
    auto uplink = std::find_if(rules.begin(), rules.end(), [](const json& r) {
        return verdict(r) == "accept" && mentions(r, "uplink0");
    });
    REQUIRE(uplink != rules.end());
    for (auto it = rules.begin(); it != rules.end(); ++it) {
        CAPTURE(dump(*it));
        if (it < uplink) {
            CHECK((denies(*it) || mentions(*it, "established")));
        }
    }
    CHECK(refuses(rules.back()));
    CHECK(rules.back()["expr"].size() == 1);  // unconditional
    auto drops = [&](std::string_view text) {
        return std::any_of(rules.begin(), uplink,
                           [&](const json& r) { return verdict(r) == "drop" && mentions(r, text); });
    };
    auto refused = [&](std::string_view text) {
        return std::any_of(rules.begin(), uplink,
                           [&](const json& r) { return refuses(r) && mentions(r, text); });
    };
    // Silent: IPv6 and spoofed sources (an answer would go to the address's owner).
    CHECK(drops("\"ipv6\""));
    CHECK(drops("@sources"));
    // Out loud: what the policy denies.
    CHECK(refused("@deny_all"));
    CHECK(refused("@blocked_ipv4"));
    CHECK(refused("\"10.231.0.0\""));  // the pool: other sandboxes by address
    CHECK(refused("\"oifname\""));     // other sandboxes by interface
    const json smtp = json::parse(
        R"({"match":{"op":"==","left":{"payload":{"protocol":"tcp","field":"dport"}},"right":25}})");
    CHECK(std::any_of(rules.begin(), uplink,
                      [&](const json& r) { return r["expr"][0] == smtp && refuses(r); }));
    // The source check comes before any rule that answers.
    auto source =
        std::find_if(rules.begin(), rules.end(), [](const json& r) { return mentions(r, "@sources"); });
    auto first_refusal = std::find_if(rules.begin(), rules.end(), refuses);
    CHECK(source < first_refusal);
}

TEST_CASE("a refusal: a TCP reset, else ICMP administratively prohibited") {
    json batch = table_batch(policy(), {});
    bool defined = false;
    for (const auto& cmd : batch["nftables"]) {
        defined =
            defined || (cmd.contains("add") && cmd["add"].contains("chain") &&
                        cmd["add"]["chain"]["name"] == "refuse" && !cmd["add"]["chain"].contains("hook"));
    }
    CHECK(defined);
    auto rules = rules_of(batch, "refuse");
    REQUIRE(rules.size() == 2);
    CHECK(rules[0]["expr"] ==
          json::parse(R"([{"match":{"op":"==","left":{"meta":{"key":"l4proto"}},"right":"tcp"}},
                                               {"reject":{"type":"tcp reset"}}])"));
    CHECK(rules[1]["expr"] == json::parse(R"([{"reject":{"type":"icmpx","expr":"admin-prohibited"}}])"));
}

TEST_CASE("to the host, only DNS and ping to the sandbox's own gateway") {
    json batch = table_batch(policy(), {});
    auto rules = rules_of(batch, "sandbox_to_host");
    REQUIRE_FALSE(rules.empty());
    CHECK(refuses(rules.back()));
    CHECK(rules.back()["expr"].size() == 1);
    int accepts = 0;
    for (const auto& r : rules) {
        if (verdict(r) != "accept") {
            continue;
        }
        ++accepts;
        CAPTURE(dump(r));
        CHECK((mentions(r, "@gateways") || mentions(r, "established")));
        if (mentions(r, "@gateways")) {
            CHECK((mentions(r, "53") || mentions(r, "echo-request")));
        }
    }
    CHECK(accepts == 3);
    auto to_sandbox = rules_of(batch, "to_sandbox");
    REQUIRE(to_sandbox.size() == 2);
    CHECK(mentions(to_sandbox[0], "established"));
    CHECK(verdict(to_sandbox[1]) == "drop");
}

TEST_CASE("NAT: the pool masqueraded out the uplink") {
    auto rules = rules_of(table_batch(policy(), {}), "postrouting");
    REQUIRE(rules.size() == 1);
    CHECK(verdict(rules[0]) == "masquerade");
    CHECK(mentions(rules[0], "\"10.231.0.0\",\"len\":16"));
    CHECK(mentions(rules[0], "\"uplink0\""));
}

TEST_CASE("members: their tap with the guest and the gateway address, deny-all by tap") {
    std::vector<EgressMember> members = {member(0), member(5, Egress::deny_all())};
    CHECK(members[1].interface == "sbx5");
    CHECK(format_ipv4(members[1].guest) == "10.231.0.22");
    CHECK(format_ipv4(members[1].gateway) == "10.231.0.21");
    json batch = table_batch(policy(), members);
    std::map<std::string, json> elements;
    for (const auto& cmd : batch["nftables"]) {
        if (cmd.contains("add") && cmd["add"].contains("element")) {
            elements[cmd["add"]["element"]["name"]] = cmd["add"]["element"]["elem"];
        }
    }
    CHECK(elements["sources"] ==
          json::parse(R"([{"concat":["sbx0","10.231.0.2"]},{"concat":["sbx5","10.231.0.22"]}])"));
    CHECK(elements["gateways"] ==
          json::parse(R"([{"concat":["sbx0","10.231.0.1"]},{"concat":["sbx5","10.231.0.21"]}])"));
    CHECK(elements["deny_all"] == json::array({"sbx5"}));

    // No member: no element commands (an empty one is a syntax error).
    const json empty = table_batch(policy(), {});
    for (const auto& cmd : empty["nftables"]) {
        CHECK_FALSE((cmd.contains("add") && cmd["add"].contains("element")));
    }
}

TEST_CASE("adding and removing a member are element changes that hold either way") {
    json add = add_member_batch(member(3));
    CHECK(element_shape(add) == std::vector<std::string>{"add deny_all", "delete deny_all", "add allow_only",
                                                         "delete allow_only", "add sources", "add gateways"});

    json add_denied = add_member_batch(member(3, Egress::deny_all()));
    CHECK(element_shape(add_denied) == std::vector<std::string>{"add deny_all", "add allow_only",
                                                                "delete allow_only", "add sources",
                                                                "add gateways"});
    CHECK(add_denied["nftables"][0]["add"]["element"]["elem"] == json::array({"sbx3"}));

    json remove = remove_member_batch(member(3));
    CHECK(element_shape(remove) ==
          std::vector<std::string>{"add sources", "delete sources", "add gateways", "delete gateways",
                                   "add deny_all", "delete deny_all", "add allow_only", "delete allow_only"});
    CHECK(remove["nftables"][1]["delete"]["element"]["elem"] ==
          json::parse(R"([{"concat":["sbx3","10.231.0.14"]}])"));

    json gone = delete_table_batch();
    REQUIRE(gone["nftables"].size() == 2);
    CHECK(gone["nftables"][0].contains("add"));
    CHECK(gone["nftables"][1].contains("delete"));
}

TEST_CASE("an allow list: its networks by tap in an interval set, then the membership") {
    const EgressMember listed = member(2, allow({"203.0.113.0/24", "198.51.100.10/32"}));
    json add = add_member_batch(listed);
    CHECK(element_shape(add) == std::vector<std::string>{"add deny_all", "delete deny_all", "add allowed",
                                                         "add allow_only", "add sources", "add gateways"});
    CHECK(add["nftables"][2]["add"]["element"]["elem"] == json::parse(R"([
        {"concat":["sbx2",{"prefix":{"addr":"198.51.100.10","len":32}}]},
        {"concat":["sbx2",{"prefix":{"addr":"203.0.113.0","len":24}}]}])"));

    // A change takes the old list out whole before the new one goes in.
    const EgressMember next = member(2, allow({"192.0.2.0/24"}));
    json change = change_member_batch(listed, next);
    auto expected = element_shape(remove_member_batch(listed));
    CHECK(std::find(expected.begin(), expected.end(), "delete allowed") != expected.end());
    for (auto& verb_set : element_shape(add_member_batch(next))) {
        expected.push_back(verb_set);
    }
    CHECK(element_shape(change) == expected);

    // In the whole table, and in the rule that drops what it does not name.
    json batch = table_batch(policy(), std::vector<EgressMember>{member(0), listed});
    std::map<std::string, json> elements;
    for (const auto& cmd : batch["nftables"]) {
        if (cmd.contains("add") && cmd["add"].contains("element")) {
            elements[cmd["add"]["element"]["name"]] = cmd["add"]["element"]["elem"];
        }
    }
    CHECK(elements["allow_only"] == json::array({"sbx2"}));
    CHECK(elements["allowed"].size() == 2);
    const auto out = rules_of(batch, "from_sandbox");
    auto it = std::find_if(out.begin(), out.end(), [](const json& r) { return mentions(r, "@allow_only"); });
    REQUIRE(it != out.end());
    CHECK(mentions(*it, "@allowed"));
    CHECK(refuses(*it));
    auto established =
        std::find_if(out.begin(), out.end(), [](const json& r) { return mentions(r, "established"); });
    CHECK(it < established);  // a narrowed list ends open connections too
}
