// Admission control on its own: limits, the sliding start window with a
// fake clock, reservations given back, a reserved sandbox the store shows
// running counted once, and check-and-reserve racing.
#include "host-tools/sbxd/daemon/admission.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

using namespace sbx;
using namespace sbx::sbxd;

namespace {

struct Fixture {
    UnixMillis now = 1'000'000;
    Usage usage;
    Admission admission;
    explicit Fixture(AdmissionLimits limits)
        : admission(
              limits, [this]() -> Result<Usage> { return usage; }, [this] { return now; }) {}
};

const Admission::Refusal* refusal(const Admission::Decision& d) {
    return std::get_if<Admission::Refusal>(&d);
}

// Demands for sandboxes no other demand names.
std::string fresh_id() {
    static std::atomic<int> next{0};
    return "sbx_" + std::to_string(++next);
}
Demand starts(int count, std::int64_t memory_each) {
    Demand d{count, {}};
    for (int i = 0; i < count; ++i) {
        d.slots.push_back({fresh_id(), memory_each});
    }
    return d;
}
Demand one(std::int64_t memory = 256) {
    return starts(1, memory);
}

}  // namespace

TEST_CASE("limit_reached counts running sandboxes and reservations in flight") {
    Fixture f({2, 100, 100'000});
    f.usage.memory_mib_by_id = {{"sbx_running", 256}};
    auto first = f.admission.admit(one());
    REQUIRE(std::holds_alternative<Admission::Ticket>(first));
    auto second = f.admission.admit(one());  // 1 running + 1 starting
    REQUIRE(refusal(second));
    CHECK(refusal(second)->error.code == "limit_reached");
    CHECK(refusal(second)->error.message.find("limit is 2") != std::string::npos);
    CHECK(refusal(second)->retry_after_seconds == 0);
    CHECK(f.admission.report().value().running == 2);
    first = Admission::Decision{Admission::Refusal{}};  // the ticket goes: its slot is free
    CHECK(f.admission.report().value().running == 1);
    CHECK(std::holds_alternative<Admission::Ticket>(f.admission.admit(one())));
}

TEST_CASE("capacity_exceeded when memoryMib would pass the budget; held memory counts for later starts") {
    Fixture f({10, 100, 2048});
    f.usage.memory_mib_by_id = {{"sbx_parent", 1024}};
    auto fits = f.admission.admit(one(1024));
    REQUIRE(std::holds_alternative<Admission::Ticket>(fits));
    auto full = f.admission.admit(one(1));
    REQUIRE(refusal(full));
    CHECK(refusal(full)->error.code == "capacity_exceeded");
    fits = Admission::Decision{Admission::Refusal{}};
    // A fork's running parent is held (it is in the usage) but not checked twice.
    Demand fork_demand = one(1024);
    fork_demand.slots.push_back({"sbx_parent", 1024});
    auto fork = f.admission.admit(fork_demand);
    REQUIRE(std::holds_alternative<Admission::Ticket>(fork));
    CHECK(f.admission.report().value().memory_mib == 2048);
    // While the parent is stopped inside the fork, its held slot counts.
    f.usage.memory_mib_by_id.clear();
    CHECK(f.admission.report().value().memory_mib == 2048);
    CHECK(f.admission.report().value().running == 2);
}

TEST_CASE("rate_limited in a sliding 60 s window, with the seconds until a start fits") {
    Fixture f({100, 2, 100'000});
    auto a = f.admission.admit(one());
    std::get<Admission::Ticket>(a).commit();
    f.now += 10'000;
    auto b = f.admission.admit(one());
    std::get<Admission::Ticket>(b).commit();
    f.now += 5'500;
    auto c = f.admission.admit(one());
    REQUIRE(refusal(c));
    CHECK(refusal(c)->error.code == "rate_limited");
    CHECK(refusal(c)->retry_after_seconds == 45);  // the first start leaves at +60 s: 44.5 s, rounded up
    // Two at once wait for both to leave.
    auto two = f.admission.admit(starts(2, 256));
    REQUIRE(refusal(two));
    CHECK(refusal(two)->retry_after_seconds == 55);
    CHECK(f.admission.report().value().starts_last_minute == 2);
    f.now += 44'500;  // exactly 60 s after the first
    CHECK(std::holds_alternative<Admission::Ticket>(f.admission.admit(one())));
    // More starts at once than a minute allows never fit.
    auto never = f.admission.admit(starts(3, 256));
    REQUIRE(refusal(never));
    CHECK(refusal(never)->error.code == "limit_reached");
}

TEST_CASE("a ticket never committed gives its starts back; a committed one keeps them") {
    Fixture f({100, 1, 100'000});
    {
        auto failed = f.admission.admit(one());
        REQUIRE(std::holds_alternative<Admission::Ticket>(failed));
        CHECK(f.admission.report().value().starts_last_minute == 1);
    }
    CHECK(f.admission.report().value().starts_last_minute == 0);
    {
        auto started = f.admission.admit(one());
        std::get<Admission::Ticket>(started).commit();
    }
    CHECK(f.admission.report().value().starts_last_minute == 1);
    CHECK(refusal(f.admission.admit(one()))->error.code == "rate_limited");
}

TEST_CASE("a reserved sandbox the store already shows running is counted once") {
    Fixture f({2, 100, 100'000});
    const Demand create = one(512);
    auto first = f.admission.admit(create);
    REQUIRE(std::holds_alternative<Admission::Ticket>(first));
    CHECK(f.admission.report().value().running == 1);
    // The driver marked it running before the create returned: still one.
    f.usage.memory_mib_by_id = {{create.slots[0].sandbox_id, 512}};
    CHECK(f.admission.report().value().running == 1);
    CHECK(f.admission.report().value().memory_mib == 512);
    auto second = f.admission.admit(one());
    REQUIRE(std::holds_alternative<Admission::Ticket>(second));
    CHECK(f.admission.report().value().running == 2);
    CHECK(refusal(f.admission.admit(one()))->error.code == "limit_reached");
}

TEST_CASE("a failing usage source refuses with its error") {
    Admission broken(
        {10, 10, 10'000}, []() -> Result<Usage> { return make_coded_error("store", "disk I/O"); },
        [] { return UnixMillis{0}; });
    auto d = broken.admit(one());
    REQUIRE(refusal(d));
    CHECK(refusal(d)->error.code == "store");
}

TEST_CASE("concurrent admits never take more slots than the limit") {
    Fixture f({3, 1000, 1'000'000});
    std::atomic<int> admitted{0};
    std::vector<Admission::Ticket> kept[8];
    std::vector<std::thread> threads;
    for (auto& mine : kept) {
        threads.emplace_back([&f, &admitted, &mine] {
            for (int i = 0; i < 50; ++i) {
                auto d = f.admission.admit(one());
                if (auto* t = std::get_if<Admission::Ticket>(&d)) {
                    ++admitted;
                    mine.push_back(std::move(*t));
                }
            }
        });
    }
    for (auto& t : threads) {
        t.join();
    }
    CHECK(admitted == 3);
    CHECK(f.admission.report().value().running == 3);
}
