// sbx-vmm processes and the control client without a VMM: a dummy child
// stands in for the process, a tiny server for the control socket.
#include <doctest/doctest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/unix_socket.hpp"
#include "host-tools/sbxd/sandbox/process_identity.hpp"
#include "host-tools/sbxd/testing/temp_dir.hpp"
#include "host-tools/sbxd/vmm/control_client.hpp"
#include "host-tools/sbxd/vmm/vmm_process.hpp"

using namespace sbx;
using namespace sbx::sbxd;
using namespace std::chrono_literals;

namespace {

std::string read_file(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

// Serves one connection: reads a line, sends `reply` (or nothing).
std::thread serve_once(UniqueFd listener, std::string reply, std::string* request) {
    return std::thread([fd = std::move(listener), reply, request]() mutable {
        int client = ::accept(fd.get(), nullptr, nullptr);
        if (client < 0) {
            return;
        }
        std::string line;
        char c;
        while (::read(client, &c, 1) == 1 && c != '\n') {
            line += c;
        }
        *request = line;
        if (!reply.empty()) {
            (void)::write(client, reply.data(), reply.size());
        } else {
            std::this_thread::sleep_for(700ms);  // silent past the client's deadline
        }
        ::close(client);
    });
}

}  // namespace

TEST_CASE("a spawned process leads its own session, logs to its file and is recognised again") {
    testing::TempDir dir{"sbxd-vmm-test"};
    auto p = spawn_process({"/bin/sh", {"-c", "echo out; echo err >&2; read x; exec sleep 60"}, dir.path() + "/log"});
    REQUIRE(p.has_value());
    CHECK(::getsid(static_cast<pid_t>(p->pid)) == p->pid);  // POSIX_SPAWN_SETSID
    CHECK(::getpgid(static_cast<pid_t>(p->pid)) == p->pid);
    CHECK(is_same_process_alive(*p));
    CHECK_FALSE(poll_process_end(*p).has_value());
    // Another start time is another process, whatever the pid.
    VmmProcess other = *p;
    other.start_time += 1;
    CHECK_FALSE(is_same_process_alive(other));
    for (int i = 0; i < 100 && read_file(dir.path() + "/log").find("err") == std::string::npos; ++i) {
        std::this_thread::sleep_for(20ms);
    }
    CHECK(read_file(dir.path() + "/log") == "out\nerr\n");  // stdin is /dev/null: `read` ends at once
    kill_process_group(*p);
    CHECK_FALSE(is_same_process_alive(*p));
    CHECK(poll_process_end(*p).has_value());
}

TEST_CASE("the exit of a child is seen and described") {
    testing::TempDir dir{"sbxd-vmm-test"};
    auto p = spawn_process({"/bin/sh", {"-c", "exit 3"}, dir.path() + "/log"});
    REQUIRE(p.has_value());
    auto end = wait_process_end(*p, 10s);
    REQUIRE(end.has_value());
    REQUIRE(end->exit_code.has_value());
    CHECK(*end->exit_code == 3);
    CHECK(describe(*end) == "exit code 3");
    CHECK_FALSE(spawn_process({dir.path() + "/missing", {}, dir.path() + "/log"}).has_value());
}

TEST_CASE("a signal to the group also ends what the process started") {
    testing::TempDir dir{"sbxd-vmm-test"};
    auto p = spawn_process({"/bin/sh", {"-c", "sleep 60 & echo $! > " + dir.path() + "/grandchild; wait"},
                            dir.path() + "/log"});
    REQUIRE(p.has_value());
    std::string text;
    for (int i = 0; i < 200 && (text = read_file(dir.path() + "/grandchild")).empty(); ++i) {
        std::this_thread::sleep_for(10ms);
    }
    REQUIRE_FALSE(text.empty());
    pid_t grandchild = std::stoi(text);
    kill_process_group(*p);
    bool gone = false;
    for (int i = 0; i < 200 && !gone; ++i) {
        gone = ::kill(grandchild, 0) != 0;
        std::this_thread::sleep_for(10ms);
    }
    CHECK(gone);
}

TEST_CASE("the control client sends one line and reads one reply") {
    testing::TempDir dir{"sbxd-vmm-test"};
    const std::string path = dir.path() + "/control.sock";
    std::string request;
    {
        auto listener = listen_unix(path);
        REQUIRE(listener.has_value());
        auto server = serve_once(std::move(*listener), "{\"ok\":true,\"state\":\"paused\"}\n", &request);
        auto reply = control_call(path, {{"op", "pause"}});
        server.join();
        REQUIRE(reply.has_value());
        CHECK((*reply)["state"] == "paused");
        CHECK(request == "{\"op\":\"pause\"}");
    }
    {
        auto listener = listen_unix(path);
        REQUIRE(listener.has_value());
        auto server = serve_once(std::move(*listener),
                                 "{\"ok\":false,\"error\":\"vm_not_paused\",\"message\":\"pause first\"}\n", &request);
        auto reply = control_call(path, {{"op", "snapshot"}, {"path", "x"}});
        server.join();
        REQUIRE_FALSE(reply.has_value());
        CHECK(reply.error().code == "vm_not_paused");
        CHECK(reply.error().message.find("pause first") != std::string::npos);
    }
    {
        auto listener = listen_unix(path);
        REQUIRE(listener.has_value());
        auto server = serve_once(std::move(*listener), "", &request);
        auto start = std::chrono::steady_clock::now();
        auto reply = control_call(path, {{"op", "status"}}, 200ms);
        CHECK(std::chrono::steady_clock::now() - start < 5s);
        server.join();
        REQUIRE_FALSE(reply.has_value());
        CHECK(reply.error().code == "timeout");
    }
    {
        auto listener = listen_unix(path);
        REQUIRE(listener.has_value());
        auto server = serve_once(std::move(*listener), "not json\n", &request);
        auto reply = control_call(path, {{"op", "status"}});
        server.join();
        REQUIRE_FALSE(reply.has_value());
        CHECK(reply.error().code == "bad_reply");
    }
    ::unlink(path.c_str());
    auto none = control_call(path, {{"op", "status"}});
    REQUIRE_FALSE(none.has_value());
    CHECK(none.error().code == "vmm_unreachable");
}
