// The egress table in a kernel (a private network namespace, so the host's
// rules are not touched): libnftables' check mode accepts the JSON, the
// table is made, replaced and deleted in single transactions, members come
// and go as set elements. Needs root: exits 77 without it.
#include "host-tools/sbxd/net/egress_table.hpp"

#include <doctest/doctest.h>

#include <algorithm>

#include "host-tools/sbxd/net/tests/private_netns.hpp"

using namespace sbx;
using namespace sbx::sbxd::net;
using nlohmann::json;

namespace {

void require_nftables() {
    testing::enter_private_netns_or_skip();
    auto nft = Nftables::open();
    REQUIRE(nft);
    if (auto tables = nft->list("tables"); !tables) {
        std::printf("SKIP: no nf_tables in this kernel: %s\n", tables.error().to_string().c_str());
        std::exit(77);
    }
}

EgressPolicy policy() {
    return EgressPolicy{*parse_ipv4_cidr("10.231.0.0/16"), "uplink0"};
}
EgressMember member(std::uint32_t slot, const Egress& egress = {}) {
    return egress_member(*address_of(*AddressPool::parse("10.231.0.0/16"), slot), egress);
}
EgressMember listed(std::uint32_t slot, std::vector<std::string> networks) {
    return member(slot, *egress_allow_list(networks));
}

int table_count() {
    auto nft = Nftables::open();
    REQUIRE(nft);
    auto tables = nft->list("tables");
    REQUIRE(tables);
    int n = 0;
    for (const auto& item : (*tables)["nftables"]) {
        if (item.contains("table") && item["table"]["family"] == "inet" && item["table"]["name"] == "sbxd") {
            ++n;
        }
    }
    return n;
}

// The elements of one of the table's sets as nft lists them.
json elements(std::string_view set) {
    auto nft = Nftables::open();
    REQUIRE(nft);
    auto listed = nft->list(fmt::format("set inet sbxd {}", set));
    REQUIRE(listed);
    for (const auto& item : (*listed)["nftables"]) {
        if (item.contains("set")) {
            return item["set"].value("elem", json::array());
        }
    }
    FAIL("no set ", set);
    return {};
}

int rules_in_batch(const json& batch) {
    return static_cast<int>(
        std::count_if(batch["nftables"].begin(), batch["nftables"].end(),
                      [](const json& c) { return c.contains("add") && c["add"].contains("rule"); }));
}

int count_of(const json& listing, std::string_view kind) {
    return static_cast<int>(std::count_if(listing["nftables"].begin(), listing["nftables"].end(),
                                          [&](const json& item) { return item.contains(kind); }));
}

}  // namespace

TEST_CASE("the kernel's check mode accepts the table, members and removals, and commits nothing") {
    require_nftables();
    auto nft = Nftables::open(/*dry_run=*/true);
    REQUIRE(nft);
    std::vector<EgressMember> members = {member(0), member(1, Egress::deny_all()), member(16383),
                                         listed(2, {"203.0.113.0/24", "198.51.100.10/32"})};
    auto r = nft->run(table_batch(policy(), members));
    CHECK_MESSAGE(r, (r ? "" : r.error().to_string()));
    CHECK(table_count() == 0);
    CHECK(nft->run(delete_table_batch()));
}

TEST_CASE("a batch the kernel refuses fails whole, with libnftables' reason and the code nftables") {
    require_nftables();
    auto table = EgressTable::create(policy());
    REQUIRE(table);
    auto nft = Nftables::open();
    REQUIRE(nft);
    // A good element, then one for a set that does not exist.
    json batch = add_member_batch(member(2));
    batch["nftables"].push_back({{"add",
                                  {{"element",
                                    {{"family", "inet"},
                                     {"table", "sbxd"},
                                     {"name", "nonesuch"},
                                     {"elem", json::array({"sbx2"})}}}}}});
    auto r = nft->run(batch);
    REQUIRE_FALSE(r);
    CHECK(r.error().code == "nftables");
    // libnftables reports JSON input's errors without a location:
    // "internal:0:0-0: Error: No such file or directory".
    CHECK(r.error().message.find("No such file or directory") != std::string::npos);
    CHECK(elements("sources").empty());  // the good part did not land either
}

TEST_CASE("create, add, remove, destroy") {
    require_nftables();
    {
        auto table = EgressTable::create(policy());
        REQUIRE(table);
        CHECK(table_count() == 1);
        CHECK(*egress_table_exists());

        auto nft = Nftables::open();
        auto listing = nft->list("table inet sbxd");
        REQUIRE(listing);
        CHECK(count_of(*listing, "set") == 6);
        CHECK(count_of(*listing, "chain") == 7);  // 3 base, 3 per direction, refuse
        CHECK(count_of(*listing, "rule") == rules_in_batch(table_batch(policy(), {})));

        REQUIRE(table->add(member(4)));
        CHECK(elements("sources") == json::parse(R"([{"concat":["sbx4","10.231.0.18"]}])"));
        CHECK(elements("gateways") == json::parse(R"([{"concat":["sbx4","10.231.0.17"]}])"));
        CHECK(elements("deny_all").empty());

        // again, now deny-all: no error, one element each
        REQUIRE(table->add(member(4, Egress::deny_all())));
        CHECK(elements("sources").size() == 1);
        CHECK(elements("deny_all") == json::array({"sbx4"}));
        REQUIRE(table->add(member(4)));
        CHECK(elements("deny_all").empty());

        REQUIRE(table->add(member(9)));
        REQUIRE(table->remove(member(4)));
        CHECK(elements("sources") == json::parse(R"([{"concat":["sbx9","10.231.0.38"]}])"));
        CHECK(table->remove(member(4)));  // not there: still fine

        REQUIRE(table->destroy());
        CHECK(table_count() == 0);
        CHECK_FALSE(*egress_table_exists());
        CHECK(table->destroy());  // twice: nothing to do
    }
    {
        auto table = EgressTable::create(policy());
        REQUIRE(table);
    }
    CHECK(table_count() == 0);  // the owner's end deletes it
}

TEST_CASE("a released table stays, and the next create replaces it in one transaction") {
    require_nftables();
    {
        std::vector<EgressMember> before = {member(0), member(1)};
        auto table = EgressTable::create(policy(), before);
        REQUIRE(table);
        table->release();
    }
    CHECK(table_count() == 1);
    CHECK(elements("sources").size() == 2);

    std::vector<EgressMember> after = {member(1, Egress::deny_all()), member(7),
                                       listed(8, {"203.0.113.0/24"})};
    auto table = EgressTable::create(policy(), after);
    REQUIRE(table);
    CHECK(table_count() == 1);
    CHECK(elements("sources").size() == 3);
    CHECK(elements("deny_all") == json::array({"sbx1"}));
    CHECK(elements("allow_only") == json::array({"sbx8"}));
    CHECK(elements("allowed").size() == 1);

    REQUIRE(table->rebuild(policy(), {}));
    CHECK(table_count() == 1);
    CHECK(elements("sources").empty());
}

TEST_CASE("a create the kernel refuses leaves the table that was there") {
    require_nftables();
    auto first = EgressTable::create(policy(), std::vector<EgressMember>{member(3)});
    REQUIRE(first);
    EgressPolicy bad = policy();
    bad.uplink = std::string(20, 'x');  // longer than an interface name: refused
    auto second = EgressTable::create(bad);
    REQUIRE_FALSE(second);
    CHECK(second.error().code == "nftables");
    CHECK(table_count() == 1);
    CHECK(elements("sources").size() == 1);
}

TEST_CASE("an allow list in the kernel: added, replaced whole, removed") {
    require_nftables();
    auto table = EgressTable::create(policy());
    REQUIRE(table);
    const EgressMember first = listed(5, {"203.0.113.0/24", "198.51.100.10/32", "192.0.2.0/25"});
    REQUIRE(table->add(first));
    CHECK(elements("allow_only") == json::array({"sbx5"}));
    CHECK(elements("allowed").size() == 3);
    REQUIRE(table->add(first));  // again: no error, nothing doubled
    CHECK(elements("allowed").size() == 3);
    // Another sandbox may list the same networks: the tap keeps them apart.
    REQUIRE(table->add(listed(6, {"203.0.113.0/24"})));
    CHECK(elements("allowed").size() == 4);

    const EgressMember second = listed(5, {"198.51.100.0/24"});
    REQUIRE(table->change(first, second));
    CHECK(elements("allowed").size() == 2);  // sbx5's one network and sbx6's
    const std::string dumped = elements("allowed").dump();
    CHECK(dumped.find("198.51.100.0") != std::string::npos);
    CHECK(dumped.find("192.0.2.0") == std::string::npos);

    REQUIRE(table->change(second, member(5, Egress::deny_all())));
    CHECK(elements("allow_only") == json::array({"sbx6"}));
    CHECK(elements("deny_all") == json::array({"sbx5"}));
    REQUIRE(table->remove(listed(6, {"203.0.113.0/24"})));
    CHECK(elements("allowed").empty());
    CHECK(elements("allow_only").empty());
}
