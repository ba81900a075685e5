#include "host-tools/sbxd/net/egress_rules.hpp"

#include <array>

namespace sbx::sbxd::net {
namespace {

using nlohmann::json;

// Set and chain names, shared by the rules and the element batches.
constexpr const char* kSources = "sources";    // ifname . ipv4_addr: a sandbox's tap and its guest address
constexpr const char* kGateways = "gateways";  // ifname . ipv4_addr: a sandbox's tap and its gateway address
constexpr const char* kDenyAll = "deny_all";   // ifname: sandboxes with no egress at all
constexpr const char* kBlocked = "blocked_ipv4";
constexpr const char* kAllowOnly = "allow_only";  // ifname: sandboxes with an allow list
constexpr const char* kAllowed = "allowed";       // ifname . ipv4_addr interval: their networks

std::string wildcard() {
    return std::string(kInterfacePrefix) + "*";
}

json base_object() {
    return {{"family", kTableFamily}, {"table", kTableName}};
}

json table_object() {
    return {{"table", {{"family", kTableFamily}, {"name", kTableName}}}};
}

json command(std::string_view verb, json object) {
    return {{verb, std::move(object)}};
}

json meta(std::string_view key) {
    return {{"meta", {{"key", key}}}};
}
json payload(std::string_view protocol, std::string_view field) {
    return {{"payload", {{"protocol", protocol}, {"field", field}}}};
}
json ct_state() {
    return {{"ct", {{"key", "state"}}}};
}
json concat(json a, json b) {
    return {{"concat", json::array({std::move(a), std::move(b)})}};
}
json prefix(const Ipv4Cidr& cidr) {
    return {{"prefix", {{"addr", format_ipv4(cidr.network)}, {"len", cidr.prefix}}}};
}
json set_ref(const char* name) {
    return std::string("@") + name;
}

json match(std::string_view op, json left, json right) {
    return {{"match", {{"op", op}, {"left", std::move(left)}, {"right", std::move(right)}}}};
}
json eq(json left, json right) {
    return match("==", std::move(left), std::move(right));
}

json accept() {
    return {{"accept", nullptr}};
}
json drop() {
    return {{"drop", nullptr}};
}
json jump(std::string_view chain) {
    return {{"jump", {{"target", chain}}}};
}
// What the policy denies is refused out loud, so a program in the guest
// fails at once instead of waiting out its timeout (the "refuse" chain).
// Packets with a spoofed source, IPv6 and unasked inbound traffic are
// dropped silently instead: an answer to a spoofed source would go to
// whoever owns that address.
constexpr const char* kRefuse = "refuse";
json refuse() {
    return jump(kRefuse);
}

json established_or_related() {
    return match("in", ct_state(), json::array({"established", "related"}));
}
// In the inet family an `ip` payload match implies IPv4; IPv6 is dropped
// first in each chain that sees a sandbox's packets.
json is_ipv6() {
    return eq(meta("nfproto"), "ipv6");
}
json not_own_source() {
    return match("!=", concat(meta("iifname"), payload("ip", "saddr")), set_ref(kSources));
}
json to_own_gateway() {
    return eq(concat(meta("iifname"), payload("ip", "daddr")), set_ref(kGateways));
}

json rule(std::string_view chain, std::string_view comment, json expr) {
    json r = base_object();
    r["chain"] = chain;
    r["expr"] = std::move(expr);
    r["comment"] = comment;
    return command("add", {{"rule", std::move(r)}});
}

json base_chain(std::string_view name, std::string_view type, std::string_view hook, int priority) {
    json c = {{"family", kTableFamily}, {"table", kTableName}, {"name", name},      {"type", type},
              {"hook", hook},           {"prio", priority},    {"policy", "accept"}};
    return command("add", {{"chain", std::move(c)}});
}

json regular_chain(std::string_view name) {
    return command("add", {{"chain", {{"family", kTableFamily}, {"table", kTableName}, {"name", name}}}});
}

json set_definition(const char* name, json type, json extra = json::object()) {
    json s = {{"family", kTableFamily}, {"table", kTableName}, {"name", name}, {"type", std::move(type)}};
    s.update(extra);
    return command("add", {{"set", std::move(s)}});
}

json element(std::string_view verb, const char* set, json elements) {
    json e = {{"family", kTableFamily}, {"table", kTableName}, {"name", set}, {"elem", std::move(elements)}};
    return command(verb, {{"element", std::move(e)}});
}

// The elements a member has in each set.
json source_element(const EgressMember& m) {
    return json::array({concat(m.interface, format_ipv4(m.guest))});
}
json gateway_element(const EgressMember& m) {
    return json::array({concat(m.interface, format_ipv4(m.gateway))});
}
json interface_element(const EgressMember& m) {
    return json::array({m.interface});
}
// An interval set's element: the tap and one network of its allow list.
json allowed_elements(const EgressMember& m) {
    json out = json::array();
    for (const auto& cidr : m.egress.allow) {
        out.push_back(concat(m.interface, prefix(cidr)));
    }
    return out;
}
bool denies_all(const EgressMember& m) {
    return m.egress.mode == EgressMode::deny_all;
}
bool has_allow_list(const EgressMember& m) {
    return m.egress.mode == EgressMode::allow_list && !m.egress.allow.empty();
}

void append_definitions(json& batch, const EgressPolicy& policy) {
    const json ifname_addr = json::array({"ifname", "ipv4_addr"});
    batch.push_back(set_definition(kSources, ifname_addr));
    batch.push_back(set_definition(kGateways, ifname_addr));
    batch.push_back(set_definition(kDenyAll, "ifname"));
    batch.push_back(set_definition(kAllowOnly, "ifname"));
    batch.push_back(set_definition(kAllowed, ifname_addr, {{"flags", json::array({"interval"})}}));
    json blocked = json::array();
    for (std::string_view range : blocked_ipv4_ranges()) {
        blocked.push_back(prefix(*parse_ipv4_cidr(range)));  // constants, checked by the unit test
    }
    batch.push_back(
        set_definition(kBlocked, "ipv4_addr", {{"flags", json::array({"interval"})}, {"elem", blocked}}));

    // Base chains: policy accept, so the host's own traffic is left to its
    // own rules; everything from or to a sandbox interface jumps to ours.
    batch.push_back(base_chain("input", "filter", "input", 0));
    batch.push_back(base_chain("forward", "filter", "forward", 0));
    batch.push_back(base_chain("postrouting", "nat", "postrouting", 100));  // srcnat
    for (const char* chain : {"sandbox_to_host", "from_sandbox", "to_sandbox", kRefuse}) {
        batch.push_back(regular_chain(chain));
    }
    // TCP gets a reset (RFC 9293 §3.10.7.1: ECONNREFUSED, and an open
    // connection that a narrowed allow list ends is reset, not left to
    // retransmit); anything else ICMP destination unreachable, code 13
    // "communication administratively prohibited" (RFC 1812 §5.2.7.1).
    batch.push_back(
        rule(kRefuse, "TCP: a reset", {eq(meta("l4proto"), "tcp"), {{"reject", {{"type", "tcp reset"}}}}}));
    batch.push_back(rule(kRefuse, "else: administratively prohibited",
                         {{{"reject", {{"type", "icmpx"}, {"expr", "admin-prohibited"}}}}}));

    batch.push_back(rule("input", "a sandbox reaches the host",
                         {eq(meta("iifname"), wildcard()), jump("sandbox_to_host")}));
    batch.push_back(
        rule("forward", "a sandbox's traffic out", {eq(meta("iifname"), wildcard()), jump("from_sandbox")}));
    batch.push_back(
        rule("forward", "traffic to a sandbox", {eq(meta("oifname"), wildcard()), jump("to_sandbox")}));

    // To the host: DNS (and ping) to the sandbox's own gateway, replies to
    // connections the host opened (the port proxy), nothing else.
    const char* in = "sandbox_to_host";
    batch.push_back(rule(in, "no IPv6 from sandboxes", {is_ipv6(), drop()}));
    batch.push_back(rule(in, "only its own address (also: not attached)", {not_own_source(), drop()}));
    batch.push_back(rule(in, "deny-all: not even DNS", {eq(meta("iifname"), set_ref(kDenyAll)), refuse()}));
    batch.push_back(rule(in, "replies to the host's connections", {established_or_related(), accept()}));
    batch.push_back(rule(in, "DNS to its own gateway",
                         {to_own_gateway(), eq(meta("l4proto"), {{"set", json::array({"tcp", "udp"})}}),
                          eq(payload("th", "dport"), 53), accept()}));
    batch.push_back(rule(in, "ping its own gateway",
                         {to_own_gateway(), eq(payload("icmp", "type"), "echo-request"), accept()}));
    batch.push_back(rule(in, "nothing else on the host", {refuse()}));

    // Forwarded from a sandbox: the internet by the uplink, nothing private.
    const char* out = "from_sandbox";
    batch.push_back(rule(out, "no IPv6 from sandboxes", {is_ipv6(), drop()}));
    batch.push_back(rule(out, "only its own address (also: not attached)", {not_own_source(), drop()}));
    batch.push_back(rule(out, "deny-all", {eq(meta("iifname"), set_ref(kDenyAll)), refuse()}));
    batch.push_back(rule(out, "not to another sandbox", {eq(meta("oifname"), wildcard()), refuse()}));
    batch.push_back(
        rule(out, "not to the pool", {eq(payload("ip", "daddr"), prefix(policy.pool)), refuse()}));
    batch.push_back(rule(out, "no private, loopback, link-local, CGNAT, multicast",
                         {eq(payload("ip", "daddr"), set_ref(kBlocked)), refuse()}));
    batch.push_back(rule(out, "no SMTP", {eq(payload("tcp", "dport"), 25), refuse()}));
    // Before the conntrack accept, so a narrowed list also ends the
    // connections already open to what it no longer names.
    batch.push_back(
        rule(out, "allow list: only its own networks",
             {eq(meta("iifname"), set_ref(kAllowOnly)),
              match("!=", concat(meta("iifname"), payload("ip", "daddr")), set_ref(kAllowed)), refuse()}));
    batch.push_back(rule(out, "established and related", {established_or_related(), accept()}));
    batch.push_back(rule(out, "the internet, by the uplink", {eq(meta("oifname"), policy.uplink), accept()}));
    batch.push_back(rule(out, "nowhere else", {refuse()}));

    // Forwarded to a sandbox: replies only; hosted ports come through sbxd.
    batch.push_back(rule("to_sandbox", "replies only", {established_or_related(), accept()}));
    batch.push_back(rule("to_sandbox", "nothing unasked", {drop()}));

    batch.push_back(rule("postrouting", "sandboxes share the uplink's address",
                         {eq(payload("ip", "saddr"), prefix(policy.pool)),
                          eq(meta("oifname"), policy.uplink),
                          {{"masquerade", nullptr}}}));
}

json wrap(json batch) {
    return {{"nftables", std::move(batch)}};
}

}  // namespace

EgressMember egress_member(const SandboxAddress& address, const Egress& egress) {
    return EgressMember{interface_name(address.slot), address.guest, address.gateway, egress};
}

json table_batch(const EgressPolicy& policy, std::span<const EgressMember> members) {
    json batch = json::array();
    batch.push_back(command("add", table_object()));
    batch.push_back(command("delete", table_object()));
    batch.push_back(command("add", table_object()));
    append_definitions(batch, policy);
    json sources = json::array();
    json gateways = json::array();
    json denied = json::array();
    json allow_only = json::array();
    json allowed = json::array();
    for (const auto& m : members) {
        sources.push_back(source_element(m)[0]);
        gateways.push_back(gateway_element(m)[0]);
        if (denies_all(m)) {
            denied.push_back(m.interface);
        }
        if (has_allow_list(m)) {
            allow_only.push_back(m.interface);
            for (auto& e : allowed_elements(m)) {
                allowed.push_back(std::move(e));
            }
        }
    }
    // An element command with no elements is a syntax error.
    if (!sources.empty()) {
        batch.push_back(element("add", kSources, sources));
        batch.push_back(element("add", kGateways, gateways));
    }
    if (!denied.empty()) {
        batch.push_back(element("add", kDenyAll, denied));
    }
    if (!allow_only.empty()) {
        batch.push_back(element("add", kAllowOnly, allow_only));
        batch.push_back(element("add", kAllowed, allowed));
    }
    return wrap(std::move(batch));
}

namespace {

// A membership set (deny_all, allow_only) is added, then taken out again
// unless wanted, so the batch holds whether or not it was there before.
void append_membership(json& batch, const char* set, const EgressMember& member, bool wanted) {
    batch.push_back(element("add", set, interface_element(member)));
    if (!wanted) {
        batch.push_back(element("delete", set, interface_element(member)));
    }
}

void append_additions(json& batch, const EgressMember& member) {
    append_membership(batch, kDenyAll, member, denies_all(member));
    // The networks before the membership: from the first packet the list
    // applies to, the list is whole.
    if (has_allow_list(member)) {
        batch.push_back(element("add", kAllowed, allowed_elements(member)));
    }
    append_membership(batch, kAllowOnly, member, has_allow_list(member));
    batch.push_back(element("add", kSources, source_element(member)));
    batch.push_back(element("add", kGateways, gateway_element(member)));
}

void append_removals(json& batch, const EgressMember& member) {
    std::vector<std::pair<const char*, json>> sets = {{kSources, source_element(member)},
                                                      {kGateways, gateway_element(member)},
                                                      {kDenyAll, interface_element(member)},
                                                      {kAllowOnly, interface_element(member)}};
    if (has_allow_list(member)) {
        sets.emplace_back(kAllowed, allowed_elements(member));
    }
    for (auto& [set, elem] : sets) {
        batch.push_back(element("add", set, elem));
        batch.push_back(element("delete", set, std::move(elem)));
    }
}

}  // namespace

json add_member_batch(const EgressMember& member) {
    json batch = json::array();
    append_additions(batch, member);
    return wrap(std::move(batch));
}

json change_member_batch(const EgressMember& from, const EgressMember& to) {
    json batch = json::array();
    append_removals(batch, from);
    append_additions(batch, to);
    return wrap(std::move(batch));
}

json remove_member_batch(const EgressMember& member) {
    json batch = json::array();
    append_removals(batch, member);
    return wrap(std::move(batch));
}

json delete_table_batch() {
    return wrap(json::array({command("add", table_object()), command("delete", table_object())}));
}

}  // namespace sbx::sbxd::net
