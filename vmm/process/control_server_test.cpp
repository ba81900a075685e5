#include <doctest/doctest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "base/unix_socket.hpp"
#include "vmm/process/control_server.hpp"

using namespace sbx;

namespace {

std::string socket_path() {
    return "/tmp/sbx-control-test-" + std::to_string(::getpid()) + ".sock";
}

// Sends `text` and reads until `lines` reply lines arrived or the server closed.
std::string send_lines(const std::string& path, const std::string& text, int lines = 1) {
    auto fd = connect_unix(path);
    REQUIRE(fd);
    REQUIRE(::send(fd->get(), text.data(), text.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(text.size()));
    std::string reply;
    char buf[4096];
    while (std::count(reply.begin(), reply.end(), '\n') < lines) {
        ssize_t n = ::read(fd->get(), buf, sizeof buf);
        if (n <= 0) {
            break;
        }
        reply.append(buf, static_cast<std::size_t>(n));
    }
    return reply;
}

}  // namespace

TEST_CASE("the control socket answers each JSON line and refuses what is not a request") {
    const auto path = socket_path();
    int served = 0;
    auto server = ControlServer::start(path, [&](const nlohmann::json& request) {
        ++served;
        if (request.value("op", std::string()) == "fail") {
            return ControlServer::error_reply(make_coded_error("vm_not_paused", "pause first"));
        }
        return nlohmann::json{{"ok", true}, {"echo", request.at("op").get<std::string>()}};
    });
    REQUIRE(server);

    auto two = send_lines(path, "{\"op\":\"status\"}\n{\"op\":\"fail\"}\n", 2);
    auto newline = two.find('\n');
    REQUIRE(newline != std::string::npos);
    auto first = nlohmann::json::parse(two.substr(0, newline));
    auto second = nlohmann::json::parse(two.substr(newline + 1));
    CHECK(first["echo"].get<std::string>() == "status");
    CHECK_FALSE(second["ok"].get<bool>());
    CHECK(second["error"].get<std::string>() == "vm_not_paused");
    CHECK(served == 2);

    auto bad = nlohmann::json::parse(send_lines(path, "not json\n"));
    CHECK(bad["error"].get<std::string>() == "bad_request");
    auto not_object = nlohmann::json::parse(send_lines(path, "[1,2]\n"));
    CHECK(not_object["error"].get<std::string>() == "bad_request");
    auto wrong_type = nlohmann::json::parse(send_lines(path, "{\"op\":5}\n"));  // at("op").get<string> throws
    CHECK(wrong_type["error"].get<std::string>() == "bad_request");
    CHECK(served == 3);  // of the bad lines, only the object with a wrong-typed field reached it

    std::string huge(70 * 1024, 'x');
    auto long_line = nlohmann::json::parse(send_lines(path, huge));
    CHECK(long_line["error"].get<std::string>() == "bad_request");

    server->reset();
    CHECK(::access(path.c_str(), F_OK) != 0);  // the socket file is removed
}

TEST_CASE("error replies carry the error's code, or 'failed'") {
    auto coded = ControlServer::error_reply(make_coded_error("cpu_mismatch", "leaf {:#x}", 7));
    CHECK_FALSE(coded["ok"].get<bool>());
    CHECK(coded["error"].get<std::string>() == "cpu_mismatch");
    CHECK(coded["message"].get<std::string>() == "leaf 0x7");
    auto wrapped = ControlServer::error_reply(make_coded_error("vm_not_running", "exiting").context("pause"));
    CHECK(wrapped["error"].get<std::string>() == "vm_not_running");
    CHECK(wrapped["message"].get<std::string>() == "pause: exiting");
    // A message that looks like "code: text" is only a message.
    CHECK(ControlServer::error_reply(make_error("cpu_mismatch: leaf 7"))["error"].get<std::string>() == "failed");
    CHECK(ControlServer::error_reply(make_error("no colon"))["error"].get<std::string>() == "failed");
    auto sys = ControlServer::error_reply(errno_error("open /x", ENOENT).with_code("io"));
    CHECK(sys["error"].get<std::string>() == "io");
    CHECK(sys["message"].get<std::string>() == "open /x: No such file or directory");
}
