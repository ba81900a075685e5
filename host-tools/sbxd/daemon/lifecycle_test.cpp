#include "host-tools/sbxd/daemon/lifecycle.hpp"

#include <doctest/doctest.h>

#include "host-tools/sbxd/testing/temp_dir.hpp"

using namespace sbx;
using namespace sbx::sbxd;
using sbx::sbxd::testing::open_store;
using namespace std::chrono_literals;

namespace {

constexpr UnixMillis kT0 = 1'700'000'000'000;
constexpr UnixMillis kMinute = 60'000;

SandboxRecord running(const std::string& id, std::optional<std::int64_t> ttl_seconds,
                      std::optional<int> idle) {
    SandboxRecord s;
    s.id = id;
    s.name = id;
    s.state = SandboxState::Running;
    s.from = "default";
    s.size = "small";
    s.created_at = kT0;
    s.started_at = kT0;
    s.last_activity_at = kT0;
    s.ttl_seconds = ttl_seconds;
    if (ttl_seconds) {
        s.auto_stop_at = kT0 + *ttl_seconds * 1000;
    }
    s.idle_minutes = idle;
    return s;
}

// The store, a fake clock and a stop that does what the driver's does to
// the store (stopping, then stopped or paused, with the reason).
struct Fixture {
    testing::TempDir dir{"sbxd-lifecycle"};
    std::unique_ptr<Store> store = open_store(dir.db());
    UnixMillis now = kT0;
    std::vector<std::pair<std::string, LifecycleAction>> stops;
    bool fail_stops = false;
    LifecycleScheduler scheduler{*store,
                                 [this](const std::string& id, LifecycleAction a) { return stop(id, a); },
                                 LifecycleConfig{}, [this] { return now; }};

    Result<void> stop(const std::string& id, LifecycleAction action) {
        stops.emplace_back(id, action);
        if (fail_stops) {
            return make_coded_error("invalid_state", "another operation on sandbox {} is in progress", id);
        }
        const std::string reason(to_string(action));
        auto s = store->get_sandbox(id);
        REQUIRE(s.has_value());
        if (s->state != SandboxState::Paused) {
            REQUIRE(store->change_state(id, {SandboxState::Stopping, now, std::nullopt, reason}).has_value());
        }
        const bool pause = action == LifecycleAction::IdlePause && s->state != SandboxState::Paused;
        auto changed = store->change_state(
            id, {pause ? SandboxState::Paused : SandboxState::Stopped, now, std::nullopt, reason});
        if (!changed) {
            return changed.error();
        }
        return ok();
    }
    void add(const SandboxRecord& s) { REQUIRE(store->create_sandbox(s, std::nullopt).has_value()); }
    SandboxState state(const std::string& id) { return store->get_sandbox(id).value().state; }
};

}  // namespace

TEST_CASE("the deadlines of one sandbox, by state") {
    SandboxRecord s = running("sbx_a", 3600, 5);
    auto both = deadlines_of(s, 60s, false);
    REQUIRE(both.size() == 2);
    CHECK(both[0] == Deadline{"sbx_a", LifecycleAction::IdlePause, kT0 + 5 * kMinute});
    CHECK(both[1] == Deadline{"sbx_a", LifecycleAction::AutoStop, kT0 + 3'600'000});
    CHECK(deadlines_of(s, 2s, false)[0].at == kT0 + 10'000);  // --idle-minute-seconds 2
    CHECK(deadlines_of(s, 60s, true).size() == 1);            // leased: never idle
    s.state = SandboxState::Paused;
    CHECK(deadlines_of(s, 60s, false) ==
          std::vector<Deadline>{{"sbx_a", LifecycleAction::AutoStop, kT0 + 3'600'000}});
    for (auto state :
         {SandboxState::Stopped, SandboxState::Crashed, SandboxState::Creating, SandboxState::Stopping}) {
        s.state = state;
        CHECK(deadlines_of(s, 60s, false).empty());
    }
}

TEST_CASE("the auto-stop fires at its deadline, stopped with the reason in the events") {
    Fixture f;
    f.add(running("sbx_a", 600, std::nullopt));
    f.now = kT0 + 600'000 - 1;
    CHECK(f.scheduler.run_due().empty());
    CHECK(f.stops.empty());
    f.now = kT0 + 600'000;
    auto done = f.scheduler.run_due();
    REQUIRE(done.size() == 1);
    CHECK(done[0] == Deadline{"sbx_a", LifecycleAction::AutoStop, kT0 + 600'000});
    CHECK(f.state("sbx_a") == SandboxState::Stopped);
    auto events = f.store->list_events(0, 100).value();
    CHECK(events.back().data == R"({"from":"stopping","reason":"auto_stop","to":"stopped"})");
    f.now += kMinute;
    CHECK(f.scheduler.run_due().empty());  // stopped: no deadline left
    CHECK(f.stops.size() == 1);
}

TEST_CASE("a renewal moves the auto-stop and off cancels it") {
    Fixture f;
    f.add(running("sbx_a", 600, std::nullopt));
    f.now = kT0 + 500'000;
    REQUIRE(f.store->set_auto_stop("sbx_a", AutoStop{f.now + 600'000, 600}, f.now).has_value());
    f.now = kT0 + 600'000;
    CHECK(f.scheduler.run_due().empty());
    CHECK(f.scheduler.deadlines().value() ==
          std::vector<Deadline>{{"sbx_a", LifecycleAction::AutoStop, kT0 + 1'100'000}});
    REQUIRE(f.store->set_auto_stop("sbx_a", AutoStop{}, f.now).has_value());
    CHECK(f.scheduler.deadlines().value().empty());
    f.now = kT0 + 30LL * 24 * 3600 * 1000;
    CHECK(f.scheduler.run_due().empty());
    CHECK(f.state("sbx_a") == SandboxState::Running);
}

TEST_CASE("the idle pause fires after its minutes without activity; activity moves it") {
    Fixture f;
    f.add(running("sbx_a", std::nullopt, 3));
    f.now = kT0 + 3 * kMinute - 1;
    CHECK(f.scheduler.run_due().empty());
    f.scheduler.touch("sbx_a");  // an exec, just in time
    f.now = kT0 + 3 * kMinute;
    CHECK(f.scheduler.run_due().empty());
    f.now = kT0 + 6 * kMinute - 1;
    auto done = f.scheduler.run_due();
    REQUIRE(done.size() == 1);
    CHECK(done[0].action == LifecycleAction::IdlePause);
    CHECK(f.state("sbx_a") == SandboxState::Paused);
    CHECK(f.store->list_events(0, 100)->back().data ==
          R"({"from":"stopping","reason":"idle","to":"paused"})");
    f.now += 10 * kMinute;
    CHECK(f.scheduler.run_due().empty());  // paused: not paused again
}

TEST_CASE("a held lease blocks the idle pause until it is released") {
    Fixture f;
    f.add(running("sbx_a", std::nullopt, 3));
    auto lease = f.scheduler.lease("sbx_a");
    auto second = f.scheduler.lease("sbx_a");
    CHECK(f.scheduler.leased("sbx_a"));
    f.now = kT0 + 60 * kMinute;  // a long exec stream
    CHECK(f.scheduler.run_due().empty());
    second.release();
    CHECK(f.scheduler.leased("sbx_a"));
    CHECK(f.scheduler.run_due().empty());
    {
        LifecycleScheduler::Lease moved = std::move(lease);
        f.now = kT0 + 61 * kMinute;
    }  // released here: the idle time starts again
    CHECK_FALSE(f.scheduler.leased("sbx_a"));
    CHECK(f.store->get_sandbox("sbx_a")->last_activity_at == kT0 + 61 * kMinute);
    f.now = kT0 + 64 * kMinute - 1;
    CHECK(f.scheduler.run_due().empty());
    f.now = kT0 + 64 * kMinute;
    CHECK(f.scheduler.run_due().size() == 1);
    CHECK(f.state("sbx_a") == SandboxState::Paused);
}

TEST_CASE("the auto-stop of a paused sandbox stops it; a lease does not hold off the auto-stop") {
    Fixture f;
    SandboxRecord paused = running("sbx_p", 600, 3);
    paused.state = SandboxState::Paused;
    f.add(paused);
    f.add(running("sbx_r", 600, std::nullopt));
    auto lease = f.scheduler.lease("sbx_r");
    f.now = kT0 + 600'000;
    CHECK(f.scheduler.run_due().size() == 2);
    CHECK(f.state("sbx_p") == SandboxState::Stopped);
    CHECK(f.state("sbx_r") == SandboxState::Stopped);
}

TEST_CASE("after a restart the store gives the same deadlines") {
    testing::TempDir dir{"sbxd-lifecycle"};
    std::vector<Deadline> before;
    UnixMillis now = kT0 + 2 * kMinute;
    auto no_stop = [](const std::string&, LifecycleAction) -> Result<void> { return ok(); };
    {
        auto store = open_store(dir.db());
        REQUIRE(store->create_sandbox(running("sbx_a", 3600, 5), std::nullopt).has_value());
        REQUIRE(store->create_sandbox(running("sbx_b", std::nullopt, 10), std::nullopt).has_value());
        REQUIRE(store->create_sandbox(running("sbx_c", 120, std::nullopt), std::nullopt).has_value());
        LifecycleScheduler scheduler(*store, no_stop, LifecycleConfig{}, [&] { return now; });
        scheduler.touch("sbx_b");
        REQUIRE(store->set_auto_stop("sbx_a", AutoStop{now + 7'200'000, 7200}, now).has_value());
        before = scheduler.deadlines().value();
    }
    REQUIRE(before.size() == 4);
    CHECK(before[0] == Deadline{"sbx_c", LifecycleAction::AutoStop, kT0 + 120'000});
    CHECK(before[1] == Deadline{"sbx_a", LifecycleAction::IdlePause, kT0 + 5 * kMinute});
    CHECK(before[2] == Deadline{"sbx_b", LifecycleAction::IdlePause, now + 10 * kMinute});
    CHECK(before[3] == Deadline{"sbx_a", LifecycleAction::AutoStop, now + 7'200'000});
    auto store = open_store(dir.db());
    LifecycleScheduler again(*store, no_stop, LifecycleConfig{}, [&] { return now; });
    CHECK(again.deadlines().value() == before);
}

TEST_CASE("a stop that fails is tried again after retry_after, not at once") {
    Fixture f;
    f.add(running("sbx_a", 600, std::nullopt));
    f.fail_stops = true;
    f.now = kT0 + 600'000;
    CHECK(f.scheduler.run_due().size() == 1);
    CHECK(f.scheduler.run_due().empty());
    CHECK(f.scheduler.deadlines().value()[0].at == f.now + 10'000);
    f.now += 10'000;
    f.fail_stops = false;
    CHECK(f.scheduler.run_due().size() == 1);
    CHECK(f.state("sbx_a") == SandboxState::Stopped);
    CHECK(f.stops.size() == 2);
}

TEST_CASE("on an io_context the timer wakes at the earliest deadline") {
    testing::TempDir dir{"sbxd-lifecycle"};
    auto store = open_store(dir.db());
    boost::asio::io_context io;
    auto now = [] {
        return std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::system_clock::now().time_since_epoch())
            .count();
    };
    SandboxRecord s = running("sbx_a", std::nullopt, std::nullopt);
    s.auto_stop_at = now() + 200;
    s.ttl_seconds = 1;
    REQUIRE(store->create_sandbox(s, std::nullopt).has_value());
    std::vector<std::string> stopped;
    LifecycleScheduler scheduler(
        *store,
        [&](const std::string& id, LifecycleAction) -> Result<void> {
            stopped.push_back(id);
            io.stop();
            return ok();
        },
        LifecycleConfig{}, now);
    scheduler.start(io, [](std::function<void()> work) { work(); });
    const auto started = std::chrono::steady_clock::now();
    io.run_for(10s);
    CHECK(stopped == std::vector<std::string>{"sbx_a"});
    CHECK(std::chrono::steady_clock::now() - started >= 150ms);
    CHECK(std::chrono::steady_clock::now() - started < 5s);
}
