// The vCPU run states with plain threads standing in for vCPU threads: each
// "runs" by counting, and a kick ends its current "KVM_RUN" as the signal
// does (the loop then parks if a pause is asked, as Vm::vcpu_loop does).
#include <doctest/doctest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "vmm/vcpu_run_states.hpp"

using namespace sbx;
using namespace std::chrono_literals;
using State = VcpuRunStates::State;

namespace {

struct FakeVcpus {
    explicit FakeVcpus(std::size_t n) : states(n), counts(n), kicked(n) {
        for (std::size_t i = 0; i < n; ++i) {
            threads.emplace_back([this, i] { loop(i); });
        }
    }
    ~FakeVcpus() { stop(); }

    void loop(std::size_t i) {
        while (!states.stopping()) {
            counts[i]++;
            if (kicked[i].exchange(false) && states.pause_requested()) {  // "EINTR"
                if (!states.park(i)) {
                    break;
                }
            }
            if (i == 1 && leave_after >= 0 && counts[i] >= static_cast<std::uint64_t>(leave_after.load())) {
                break;
            }
            std::this_thread::yield();
        }
        states.exited(i);
    }
    void kick() {
        for (auto& k : kicked) {
            k = true;
        }
    }
    void stop() {
        states.stop();
        kick();
        for (auto& t : threads) {
            if (t.joinable()) {
                t.join();
            }
        }
    }
    std::uint64_t total() const {
        std::uint64_t sum = 0;
        for (const auto& c : counts) {
            sum += c.load();
        }
        return sum;
    }
    void wait_for_counts(std::uint64_t over) const {
        for (int i = 0; i < 2000 && total() <= over; ++i) {
            std::this_thread::sleep_for(1ms);
        }
    }

    VcpuRunStates states;
    std::vector<std::atomic<std::uint64_t>> counts;
    std::vector<std::atomic<bool>> kicked;
    std::atomic<long> leave_after{-1};      // vCPU 1 exits by itself
    std::vector<std::thread> threads;
};

}  // namespace

TEST_CASE("pause parks every vCPU, nothing runs until resume, then all run on") {
    FakeVcpus v(4);
    v.wait_for_counts(1000);
    REQUIRE(v.states.pause([&] { v.kick(); }, 5000ms));
    for (std::size_t i = 0; i < 4; ++i) {
        CHECK(v.states.state(i) == State::Parked);
    }
    auto frozen = v.total();
    std::this_thread::sleep_for(20ms);
    CHECK(v.total() == frozen);

    v.states.resume();
    v.wait_for_counts(frozen + 1000);
    CHECK(v.total() > frozen);
    for (std::size_t i = 0; i < 4; ++i) {
        CHECK(v.states.state(i) == State::Running);
    }
}

TEST_CASE("pause and resume many times in a row") {
    FakeVcpus v(3);
    for (int round = 0; round < 200; ++round) {
        REQUIRE(v.states.pause([&] { v.kick(); }, 5000ms));
        auto frozen = v.total();
        CHECK(v.total() == frozen);
        v.states.resume();
    }
    auto before = v.total();
    v.wait_for_counts(before + 100);
    CHECK(v.total() > before);
}

TEST_CASE("stop releases parked vCPUs: every thread ends as Exited") {
    FakeVcpus v(2);
    REQUIRE(v.states.pause([&] { v.kick(); }, 5000ms));
    v.stop();
    CHECK(v.states.state(0) == State::Exited);
    CHECK(v.states.state(1) == State::Exited);
    auto paused = v.states.pause([&] { v.kick(); }, 100ms);
    REQUIRE_FALSE(paused);
    CHECK(paused.error().code == "vm_not_running");
}

TEST_CASE("a vCPU that has exited does not hold a pause up") {
    FakeVcpus v(2);
    v.leave_after = 10;
    for (int i = 0; i < 2000 && v.states.state(1) != State::Exited; ++i) {
        std::this_thread::sleep_for(1ms);
    }
    REQUIRE(v.states.state(1) == State::Exited);
    REQUIRE(v.states.pause([&] { v.kick(); }, 5000ms));
    CHECK(v.states.state(0) == State::Parked);
    v.states.resume();
}

TEST_CASE("a vCPU that never parks: pause_timeout, and the others run on") {
    // vCPU 0 has no thread: it stays Running, like a vCPU stuck in KVM_RUN.
    VcpuRunStates states(2);
    std::atomic<bool> kicked{false};
    std::thread vcpu1([&] {
        while (!states.stopping()) {
            if (kicked.exchange(false) && states.pause_requested() && !states.park(1)) {
                break;
            }
            std::this_thread::yield();
        }
        states.exited(1);
    });
    auto paused = states.pause([&] { kicked = true; }, 100ms);
    REQUIRE_FALSE(paused);
    CHECK(paused.error().code == "pause_timeout");
    CHECK(states.state(0) == State::Running);
    // The request was withdrawn: vCPU 1 does not stay parked.
    CHECK_FALSE(states.pause_requested());
    for (int i = 0; i < 2000 && states.state(1) != State::Running; ++i) {
        std::this_thread::sleep_for(1ms);
    }
    CHECK(states.state(1) == State::Running);
    states.stop();
    vcpu1.join();
    CHECK(states.state(1) == State::Exited);
}
