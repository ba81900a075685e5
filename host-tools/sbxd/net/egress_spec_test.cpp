// A sandbox's egress policy as a value: the text form both ways, and what
// an allow list takes and refuses.
#include "host-tools/sbxd/net/egress_spec.hpp"

#include <doctest/doctest.h>

using namespace sbx;
using namespace sbx::sbxd::net;

TEST_CASE("the text form, both ways") {
    CHECK(format_egress(Egress{}) == "internet");
    CHECK(format_egress(Egress::deny_all()) == "deny-all");
    CHECK(*parse_egress("internet") == Egress{});
    CHECK(*parse_egress("deny-all") == Egress::deny_all());
    auto listed = parse_egress("allow:203.0.113.0/24,198.51.100.10/32");
    REQUIRE(listed);
    CHECK(listed->mode == EgressMode::allow_list);
    CHECK(format_egress(*listed) == "allow:198.51.100.10/32,203.0.113.0/24");  // ascending
    CHECK(*parse_egress(format_egress(*listed)) == *listed);
    CHECK(egress_mode_name(listed->mode) == "allow-list");
}

TEST_CASE("an allow list keeps the outermost of nested networks") {
    std::vector<std::string> nets = {"203.0.113.128/25", "203.0.113.0/24", "203.0.113.7/32", "198.51.100.0/24"};
    auto egress = egress_allow_list(nets);
    REQUIRE(egress);
    CHECK(format_egress(*egress) == "allow:198.51.100.0/24,203.0.113.0/24");
    std::vector<std::string> everything = {"0.0.0.0/0", "203.0.113.0/24"};
    CHECK(format_egress(*egress_allow_list(everything)) == "allow:0.0.0.0/0");
}

TEST_CASE("refused, with the code bad_egress") {
    for (const char* text : {"", "Internet", "deny", "allow:", "allow:,", "allow:203.0.113.5/24",
                             "allow:203.0.113.0", "allow:203.0.113.0/33", "allow:10.1.0.0/16",
                             "allow:203.0.113.0/24,169.254.169.254/32", "allow:127.0.0.1/32",
                             "allow:192.168.1.0/24"}) {
        CAPTURE(text);
        auto r = parse_egress(text);
        REQUIRE_FALSE(r);
        CHECK(r.error().code == "bad_egress");
    }
    // Host bits set: the message says what was meant.
    CHECK(parse_egress("allow:203.0.113.5/24").error().to_string().find("203.0.113.0/24") != std::string::npos);
    // A blocked range: the message names it.
    CHECK(parse_egress("allow:10.1.0.0/16").error().to_string().find("10.0.0.0/8") != std::string::npos);
    std::vector<std::string> too_many(kMaxEgressAllow + 1, "203.0.113.0/24");
    CHECK(egress_allow_list(too_many).error().code == "bad_egress");
    std::vector<std::string> none;
    CHECK(egress_allow_list(none).error().code == "bad_egress");
}

TEST_CASE("the blocked ranges parse, and a network overlapping one is not refused") {
    for (auto text : blocked_ipv4_ranges()) {
        CAPTURE(text);
        CHECK(parse_ipv4_cidr(text));
    }
    // 8.0.0.0/5 holds 10.0.0.0/8 but is not inside it: the table's own
    // blocked rule still drops the private part.
    CHECK(parse_egress("allow:8.0.0.0/5"));
}
