// rtnetlink's parsers on crafted messages: the fields they take, and
// messages that are cut, lie about their lengths or are of another family.
// (ipv4_netns_test.cpp runs the socket against the real kernel.)
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>

#include "guest-agent/identity/rtnetlink.hpp"

using namespace sbx;
using namespace sbx::agent;

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

struct MessageBytes {
    std::vector<std::uint8_t> bytes;
    MessageBytes(std::uint16_t type, const void* fixed, std::size_t size, std::uint16_t flags = 0) {
        nlmsghdr h{};
        h.nlmsg_type = type;
        h.nlmsg_flags = flags;
        h.nlmsg_seq = 9;
        append(&h, sizeof h);
        append(fixed, size);
    }
    MessageBytes& attr(std::uint16_t type, const void* data, std::size_t size, std::size_t claimed = 0) {
        rtattr a{};
        a.rta_len = static_cast<std::uint16_t>(claimed != 0 ? claimed : RTA_LENGTH(size));
        a.rta_type = type;
        append(&a, sizeof a);
        append(data, size);
        return *this;
    }
    MessageBytes& addr(std::uint16_t type, std::string_view text) {
        const std::uint32_t be = htonl(ip(text).value);
        return attr(type, &be, sizeof be);
    }
    MessageBytes& u32(std::uint16_t type, std::uint32_t v) { return attr(type, &v, sizeof v); }
    std::span<const std::uint8_t> done() {
        auto* h = reinterpret_cast<nlmsghdr*>(bytes.data());
        h->nlmsg_len = static_cast<std::uint32_t>(bytes.size());
        return bytes;
    }
    void append(const void* data, std::size_t size) {
        const auto* p = static_cast<const std::uint8_t*>(data);
        bytes.insert(bytes.end(), p, p + size);
        bytes.resize(NLMSG_ALIGN(bytes.size()), 0);
    }
};

}  // namespace

TEST_CASE("RTM_NEWADDR messages parse into their local address, prefix and peer") {
    ifaddrmsg ifa{};
    ifa.ifa_family = AF_INET;
    ifa.ifa_prefixlen = 30;
    ifa.ifa_index = 3;
    MessageBytes m(RTM_NEWADDR, &ifa, sizeof ifa);
    m.addr(IFA_ADDRESS, "10.231.0.5").addr(IFA_LOCAL, "10.231.0.6").attr(IFA_LABEL, "eth0", 5);
    auto entry = rtnl::parse_address_message(m.done());
    REQUIRE(entry.has_value());
    CHECK(entry->ifindex == 3);
    CHECK(entry->local == prefix("10.231.0.6/30"));
    CHECK(entry->address == ip("10.231.0.5"));

    MessageBytes only_address(RTM_NEWADDR, &ifa, sizeof ifa);
    only_address.addr(IFA_ADDRESS, "10.231.0.6");
    CHECK(rtnl::parse_address_message(only_address.done())->local == prefix("10.231.0.6/30"));

    MessageBytes cut(RTM_NEWADDR, &ifa, sizeof ifa);
    const std::uint32_t v = 0;
    cut.attr(IFA_LOCAL, &v, sizeof v, 64);  // claims more than there is
    CHECK_FALSE(rtnl::parse_address_message(cut.done()));
    MessageBytes none(RTM_NEWADDR, &ifa, sizeof ifa);
    CHECK_FALSE(rtnl::parse_address_message(none.done()));
    ifaddrmsg v6 = ifa;
    v6.ifa_family = AF_INET6;
    MessageBytes six(RTM_NEWADDR, &v6, sizeof v6);
    six.addr(IFA_ADDRESS, "10.0.0.1");
    CHECK_FALSE(rtnl::parse_address_message(six.done()));
    MessageBytes wrong_type(RTM_NEWROUTE, &ifa, sizeof ifa);
    CHECK_FALSE(rtnl::parse_address_message(wrong_type.done()));
    CHECK_FALSE(
        rtnl::parse_address_message(std::span<const std::uint8_t>(m.bytes).first(sizeof(nlmsghdr) + 3)));
}

TEST_CASE("RTM_NEWROUTE messages parse into table, destination, gateway, interface and metric") {
    rtmsg rt{};
    rt.rtm_family = AF_INET;
    rt.rtm_table = RT_TABLE_MAIN;
    rt.rtm_type = RTN_UNICAST;
    rt.rtm_protocol = RTPROT_STATIC;
    MessageBytes m(RTM_NEWROUTE, &rt, sizeof rt);
    m.u32(RTA_TABLE, RT_TABLE_MAIN).addr(RTA_GATEWAY, "10.231.0.5").u32(RTA_OIF, 2).u32(RTA_PRIORITY, 100);
    auto route = rtnl::parse_route_message(m.done());
    REQUIRE(route.has_value());
    CHECK(route->table == RT_TABLE_MAIN);
    CHECK(route->destination_length == 0);
    CHECK(route->gateway == ip("10.231.0.5"));
    CHECK(route->oif == 2);
    CHECK(route->metric == 100);
    CHECK(route->type == RTN_UNICAST);
    CHECK_FALSE(route->multipath);

    rtmsg big = rt;
    big.rtm_table = RT_TABLE_COMPAT;
    big.rtm_dst_len = 24;
    MessageBytes table(RTM_NEWROUTE, &big, sizeof big);
    table.u32(RTA_TABLE, 1000).addr(RTA_DST, "192.0.2.0").attr(RTA_MULTIPATH, "\0\0\0\0", 4);
    auto r = rtnl::parse_route_message(table.done());
    REQUIRE(r.has_value());
    CHECK(r->table == 1000);  // RTA_TABLE over rtm_table
    CHECK(r->destination == ip("192.0.2.0"));
    CHECK(r->destination_length == 24);
    CHECK(r->multipath);

    MessageBytes short_gateway(RTM_NEWROUTE, &rt, sizeof rt);
    short_gateway.attr(RTA_GATEWAY, "\x0a\x00", 2);
    CHECK_FALSE(rtnl::parse_route_message(short_gateway.done()));
    rtmsg long_dst = rt;
    long_dst.rtm_dst_len = 33;
    MessageBytes bad_len(RTM_NEWROUTE, &long_dst, sizeof long_dst);
    CHECK_FALSE(rtnl::parse_route_message(bad_len.done()));
}

TEST_CASE("ACKs: the error, and the extended ACK text with and without the echoed request") {
    nlmsgerr plain{};
    MessageBytes ack(NLMSG_ERROR, &plain, sizeof plain);
    auto parsed = rtnl::parse_ack(ack.done());
    REQUIRE(parsed.has_value());
    CHECK(parsed->error == 0);
    CHECK(parsed->sequence == 9);

    nlmsgerr capped{};
    capped.error = -EINVAL;
    capped.msg.nlmsg_len = 60;  // the request's length, not echoed
    MessageBytes c(NLMSG_ERROR, &capped, sizeof capped, NLM_F_CAPPED | NLM_F_ACK_TLVS);
    c.attr(NLMSGERR_ATTR_MSG, "Nexthop has invalid gateway", 28);
    parsed = rtnl::parse_ack(c.done());
    REQUIRE(parsed.has_value());
    CHECK(parsed->error == -EINVAL);
    CHECK(parsed->message == "Nexthop has invalid gateway");

    nlmsgerr echoed{};
    echoed.error = -EEXIST;
    echoed.msg.nlmsg_len = sizeof(nlmsghdr) + 6;  // six bytes of request payload, padded to 8
    MessageBytes e(NLMSG_ERROR, &echoed, sizeof echoed, NLM_F_ACK_TLVS);
    e.append("\1\2\3\4\5\6", 6);
    e.attr(NLMSGERR_ATTR_MSG, "exists", 7);
    parsed = rtnl::parse_ack(e.done());
    REQUIRE(parsed.has_value());
    CHECK(parsed->message == "exists");

    nlmsgerr lying{};
    lying.msg.nlmsg_len = 4000;  // echoes more than the message holds
    MessageBytes l(NLMSG_ERROR, &lying, sizeof lying, NLM_F_ACK_TLVS);
    CHECK_FALSE(rtnl::parse_ack(l.done()));
    CHECK_FALSE(rtnl::parse_ack(std::span<const std::uint8_t>(ack.bytes).first(sizeof(nlmsghdr) + 2)));
}
