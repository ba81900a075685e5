#include <doctest/doctest.h>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <new>
#include <stdexcept>
#include <string>

#include "base/unix_socket.hpp"
#include "host-tools/sbx-vmm/control_request.hpp"
#include "host-tools/sbx-vmm/control_server.hpp"

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

nlohmann::json reply_to(const std::string& path, const std::string& line) {
    auto text = send_lines(path, line + "\n");
    REQUIRE_MESSAGE(!text.empty(), "no reply to ", line);
    return nlohmann::json::parse(text);
}

// A directory with a subdirectory and a symlink leading out of it.
struct SnapshotDirs {
    std::string root, dir, outside;
    SnapshotDirs() {
        char templ[] = "/tmp/sbx-control-test-XXXXXX";
        REQUIRE(::mkdtemp(templ) != nullptr);
        root = templ;
        dir = root + "/snaps";
        outside = root + "/elsewhere";
        std::filesystem::create_directories(dir + "/sub");
        std::filesystem::create_directories(outside);
        std::filesystem::create_directory_symlink(outside, dir + "/out");
    }
    ~SnapshotDirs() { std::filesystem::remove_all(root); }
    SnapshotDirs(const SnapshotDirs&) = delete;
    SnapshotDirs& operator=(const SnapshotDirs&) = delete;
};

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

TEST_CASE("the control socket file is 0600 whatever the umask") {
    const auto path = socket_path();
    const mode_t old_umask = ::umask(0);
    auto server = ControlServer::start(path, [](const nlohmann::json&) { return nlohmann::json{{"ok", true}}; });
    ::umask(old_umask);
    REQUIRE(server);
    struct stat st {};
    REQUIRE(::lstat(path.c_str(), &st) == 0);
    CHECK(S_ISSOCK(st.st_mode));
    CHECK((st.st_mode & 07777) == 0600);
}

TEST_CASE("hostile requests get a JSON error with a stable code, and the server keeps serving") {
    const auto path = socket_path();
    SnapshotDirs dirs;
    auto snapshot_dir = canonical_snapshot_dir(dirs.dir);
    REQUIRE(snapshot_dir);
    // The dispatch sbx-vmm does, with the snapshot's fields echoed instead of saved.
    auto server = ControlServer::start(path, [&](const nlohmann::json& request) {
        auto op = request_op(request);
        if (!op) {
            return ControlServer::error_reply(op.error());
        }
        if (*op == "throw") {
            throw std::runtime_error("a bug");
        }
        if (*op == "alloc") {
            throw std::bad_alloc();
        }
        if (*op == "nodir") {
            auto r = parse_snapshot_request(request, "");
            return r ? nlohmann::json{{"ok", true}} : ControlServer::error_reply(r.error());
        }
        auto r = parse_snapshot_request(request, *snapshot_dir);
        if (!r) {
            return ControlServer::error_reply(r.error());
        }
        return nlohmann::json{{"ok", true}, {"path", r->path}, {"threads", r->threads}, {"level", r->level},
                              {"raw", r->raw}, {"working_set_ms", r->working_set_ms}, {"resume", r->resume}};
    });
    REQUIRE(server);
    auto code = [&](const std::string& line) {
        auto reply = reply_to(path, line);
        CHECK_FALSE_MESSAGE(reply.value("ok", true), line);
        return reply.value("error", std::string("(none)"));
    };
    const std::string p = "\"path\":\"" + dirs.dir + "/vm.snap\"";

    SUBCASE("good requests are read with their defaults and bounds") {
        auto reply = reply_to(path, "{\"op\":\"snapshot\"," + p + "}");
        REQUIRE(reply["ok"].get<bool>());
        CHECK(reply["path"] == *snapshot_dir + "/vm.snap");
        CHECK(reply["threads"] == 0);
        CHECK(reply["level"] == 1);
        CHECK(reply["raw"] == false);
        reply = reply_to(path, "{\"op\":\"snapshot\"," + p +
                                   ",\"threads\":64,\"level\":19,\"mode\":\"raw\",\"working_set_ms\":60000,"
                                   "\"resume\":true}");
        REQUIRE(reply["ok"].get<bool>());
        CHECK(reply["threads"] == 64);
        CHECK(reply["working_set_ms"] == 60000);
        CHECK(reply["raw"] == true);
        CHECK(reply["resume"] == true);
        reply = reply_to(path, "{\"op\":\"snapshot\",\"path\":\"sub/../sub/x\"}");  // relative: in the dir
        REQUIRE(reply["ok"].get<bool>());
        CHECK(reply["path"] == *snapshot_dir + "/sub/x");
    }
    SUBCASE("numbers out of range or of the wrong type") {
        CHECK(code("{\"op\":\"snapshot\"," + p + ",\"threads\":4000000000}") == "bad_request");
        CHECK(code("{\"op\":\"snapshot\"," + p + ",\"threads\":65}") == "bad_request");
        CHECK(code("{\"op\":\"snapshot\"," + p + ",\"threads\":-1}") == "bad_request");
        CHECK(code("{\"op\":\"snapshot\"," + p + ",\"threads\":1.5}") == "bad_request");
        CHECK(code("{\"op\":\"snapshot\"," + p + ",\"threads\":\"4\"}") == "bad_request");
        CHECK(code("{\"op\":\"snapshot\"," + p + ",\"threads\":1e300}") == "bad_request");
        CHECK(code("{\"op\":\"snapshot\"," + p + ",\"threads\":18446744073709551615}") == "bad_request");
        CHECK(code("{\"op\":\"snapshot\"," + p + ",\"working_set_ms\":60001}") == "bad_request");
        CHECK(code("{\"op\":\"snapshot\"," + p + ",\"working_set_ms\":null}") == "bad_request");
        CHECK(code("{\"op\":\"snapshot\"," + p + ",\"level\":0}") == "bad_request");
        CHECK(code("{\"op\":\"snapshot\"," + p + ",\"level\":20}") == "bad_request");
        CHECK(code("{\"op\":\"snapshot\"," + p + ",\"level\":[1]}") == "bad_request");
        CHECK(code("{\"op\":\"snapshot\"," + p + ",\"mode\":\"zip\"}") == "bad_request");
        CHECK(code("{\"op\":\"snapshot\"," + p + ",\"mode\":1}") == "bad_request");
        CHECK(code("{\"op\":\"snapshot\"," + p + ",\"resume\":1}") == "bad_request");
        CHECK(code("{\"op\":5}") == "bad_request");
        CHECK(code("{\"op\":null}") == "bad_request");
        CHECK(code("{}") == "bad_request");
    }
    SUBCASE("paths outside the snapshot directory, or not paths") {
        CHECK(code("{\"op\":\"snapshot\"}") == "bad_request");
        CHECK(code("{\"op\":\"snapshot\",\"path\":7}") == "bad_request");
        CHECK(code("{\"op\":\"snapshot\",\"path\":\"\"}") == "bad_request");
        CHECK(code("{\"op\":\"snapshot\",\"path\":\"/etc/passwd\"}") == "bad_request");
        CHECK(code("{\"op\":\"snapshot\",\"path\":\"" + dirs.dir + "/../x\"}") == "bad_request");
        CHECK(code("{\"op\":\"snapshot\",\"path\":\"../x\"}") == "bad_request");
        CHECK(code("{\"op\":\"snapshot\",\"path\":\"" + dirs.dir + "/sub/../../x\"}") == "bad_request");
        CHECK(code("{\"op\":\"snapshot\",\"path\":\"" + dirs.dir + "/out/x\"}") == "bad_request");  // symlink
        CHECK(code("{\"op\":\"snapshot\",\"path\":\"" + dirs.dir + "/..\"}") == "bad_request");
        CHECK(code("{\"op\":\"snapshot\",\"path\":\"" + dirs.dir + "/\"}") == "bad_request");
        CHECK(code("{\"op\":\"snapshot\",\"path\":\"" + dirs.dir + "/nodir/x\"}") == "bad_request");
        CHECK(code("{\"op\":\"snapshot\",\"path\":\"" + dirs.dir + "/a\\u0000b\"}") == "bad_request");
        CHECK(code("{\"op\":\"snapshot\",\"path\":\"" + dirs.dir + "/" + std::string(5000, 'a') + "\"}") ==
              "bad_request");
        CHECK(code("{\"op\":\"nodir\"," + p + "}") == "snapshot_dir_unset");
    }
    SUBCASE("what is not a request, and handlers that throw") {
        CHECK(code("[1,2]") == "bad_request");
        CHECK(code("\"snapshot\"") == "bad_request");
        CHECK(code("42") == "bad_request");
        CHECK(code("{\"op\":") == "bad_request");
        CHECK(code("{\"op\":\"\xff\xfe\"}") == "bad_request");  // invalid UTF-8
        CHECK(code("{\"op\":\"throw\"}") == "internal");
        CHECK(code("{\"op\":\"alloc\"}") == "internal");
        std::string huge = "{\"op\":\"" + std::string(70 * 1024, 'x');
        auto reply = nlohmann::json::parse(send_lines(path, huge));
        CHECK(reply["error"] == "bad_request");
    }
    // Whatever came before, the server still answers.
    auto reply = reply_to(path, "{\"op\":\"snapshot\"," + p + "}");
    CHECK(reply["ok"].get<bool>());
}

TEST_CASE("a peer of another uid is refused with a JSON error") {
    if (::geteuid() != 0) {
        MESSAGE("skipped: needs root to connect as another uid");
        return;
    }
    const auto path = socket_path();
    int served = 0;
    auto server = ControlServer::start(path, [&](const nlohmann::json&) {
        ++served;
        return nlohmann::json{{"ok", true}};
    });
    REQUIRE(server);
    REQUIRE(::chmod(path.c_str(), 0666) == 0);  // past the file mode, to the peer check
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        // As nobody: connect, ask, and exit 0 only if refused with permission_denied.
        if (::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0) {
            ::_exit(2);
        }
        auto fd = connect_unix(path);
        if (!fd) {
            ::_exit(3);
        }
        const char request[] = "{\"op\":\"status\"}\n";
        [[maybe_unused]] auto sent = ::send(fd->get(), request, sizeof request - 1, MSG_NOSIGNAL);
        std::string reply;
        char buf[512];
        ssize_t n;
        while ((n = ::read(fd->get(), buf, sizeof buf)) > 0) {
            reply.append(buf, static_cast<std::size_t>(n));
        }
        auto json = nlohmann::json::parse(reply, nullptr, false);
        ::_exit(json.is_object() && json.value("error", std::string()) == "permission_denied" ? 0 : 4);
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK(served == 0);
    CHECK(reply_to(path, "{\"op\":\"status\"}")["ok"].get<bool>());  // root still may
}
