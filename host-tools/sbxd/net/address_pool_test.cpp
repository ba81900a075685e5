// The address pool: parsing networks, the /30 of each slot, allocation
// over the used slots, exhaustion.
#include "host-tools/sbxd/net/address_pool.hpp"

#include <doctest/doctest.h>

using namespace sbx;
using namespace sbx::sbxd::net;

TEST_CASE("IPv4 addresses parse and print as dotted quads") {
    auto a = parse_ipv4("10.231.0.1");
    REQUIRE(a);
    CHECK(a->value == 0x0ae70001U);
    CHECK(format_ipv4(*a) == "10.231.0.1");
    CHECK(format_ipv4(*parse_ipv4("255.255.255.255")) == "255.255.255.255");
    CHECK(format_ipv4(*parse_ipv4("0.0.0.0")) == "0.0.0.0");
    for (const char* bad : {"", "10.231.0", "10.231.0.1.2", "10.231.0.256", "010.1.1.1", "10..0.1", "a.b.c.d",
                            "10.231.0.1 ", "-1.0.0.0", "10.231.0.1/30"}) {
        CAPTURE(bad);
        CHECK_FALSE(parse_ipv4(bad));
    }
}

TEST_CASE("a pool is a network of prefix 8 to 30 with its host bits clear") {
    auto pool = AddressPool::parse("10.231.0.0/16");
    REQUIRE(pool);
    CHECK(pool->cidr.to_string() == "10.231.0.0/16");
    CHECK(pool->slot_count() == 16384);
    CHECK(AddressPool::parse("198.18.0.0/30")->slot_count() == 1);
    CHECK(AddressPool::parse("10.0.0.0/8")->slot_count() == (1U << 22));

    for (const char* bad : {"10.231.0.0", "10.231.0.0/", "10.231.0.0/33", "10.231.0.0/-1", "10.231.0.0/016",
                            "10.231.0.0/31", "10.0.0.0/7", "0.0.0.0/0", "10.231.0.0/16x", "nonsense/16"}) {
        CAPTURE(bad);
        auto r = AddressPool::parse(bad);
        REQUIRE_FALSE(r);
        CHECK(r.error().code == "bad_cidr");
    }
    auto host_bits = AddressPool::parse("10.231.0.1/16");
    REQUIRE_FALSE(host_bits);
    CHECK(host_bits.error().code == "bad_cidr");
    CHECK(host_bits.error().message.find("did you mean 10.231.0.0/16?") != std::string::npos);
}

TEST_CASE("slot N is the pool's network + 4N: gateway +1, guest +2") {
    auto pool = *AddressPool::parse("10.231.0.0/16");
    auto first = address_of(pool, 0);
    REQUIRE(first);
    CHECK(format_ipv4(first->network) == "10.231.0.0");
    CHECK(format_ipv4(first->gateway) == "10.231.0.1");
    CHECK(format_ipv4(first->guest) == "10.231.0.2");
    CHECK(first->guest_cidr() == "10.231.0.2/30");
    CHECK(first->gateway_cidr() == "10.231.0.1/30");

    auto later = address_of(pool, 300);
    REQUIRE(later);
    CHECK(format_ipv4(later->gateway) == "10.231.4.177");  // 10.231.0.0 + 1200 + 1
    CHECK(later->guest_cidr() == "10.231.4.178/30");

    auto last = address_of(pool, 16383);
    REQUIRE(last);
    CHECK(format_ipv4(last->guest) == "10.231.255.254");
    auto past = address_of(pool, 16384);
    REQUIRE_FALSE(past);
    CHECK(past.error().code == "bad_slot");

    for (std::uint32_t slot : {0U, 1U, 77U, 16383U}) {
        auto a = *address_of(pool, slot);
        CHECK(pool.cidr.contains(a.guest));
        CHECK(Ipv4Cidr{a.network, kSandboxPrefix}.contains(a.gateway));
        CHECK(Ipv4Cidr{a.network, kSandboxPrefix}.contains(a.guest));
    }
}

TEST_CASE("allocation takes the lowest free slot and reports exhaustion with a code") {
    auto pool = *AddressPool::parse("10.231.0.0/28");  // four slots
    CHECK(*allocate_slot(pool, {}) == 0);
    CHECK(*allocate_slot(pool, {0}) == 1);
    CHECK(*allocate_slot(pool, {0, 1, 3}) == 2);
    CHECK(*allocate_slot(pool, {1, 2}) == 0);
    CHECK(*allocate_slot(pool, {0, 1, 2, 40}) ==
          3);  // a slot past the end (an older, larger pool) is ignored

    auto full = allocate_slot(pool, {0, 1, 2, 3});
    REQUIRE_FALSE(full);
    CHECK(full.error().code == "address_pool_exhausted");
    CHECK(full.error().message.find("10.231.0.0/28") != std::string::npos);

    auto one = *AddressPool::parse("198.18.0.4/30");
    CHECK(*allocate_slot(one, {}) == 0);
    CHECK(allocate_slot(one, {0}).error().code == "address_pool_exhausted");
}

TEST_CASE("interface names are the prefix and the slot, within IFNAMSIZ") {
    CHECK(interface_name(0) == "sbx0");
    CHECK(interface_name(4194303) == "sbx4194303");  // the last slot of a /8
    CHECK(interface_name(4194303).size() <= 15);
}
