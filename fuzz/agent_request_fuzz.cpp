// libFuzzer target: the layer above agent_frame. A JSON frame's text as
// sbx-agent turns it into an operation (agent.cpp Agent::serve:
// parse_message, the "type", the "op" looked up in the real op table),
// then the field parsers the ops run on the request
// (docs/agent-protocol.md): exec's parse_exec_request over a fixed passwd,
// group and env file; the file ops' paths, modes and owners; the
// forwards' addresses; the identity op's seed, MAC, token and IPv4
// settings. Nothing may throw or crash; a refusal is bad_request (or
// not_found for an unknown user); what is accepted is inside the
// protocol's bounds and, where the protocol has one spelling, reads back
// the same.
#include <arpa/inet.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>

#include "base/mac_address.hpp"
#include "fuzz/fuzz_util.hpp"
#include "guest-agent/agent/agent.hpp"
#include "guest-agent/exec/exec_request.hpp"
#include "guest-agent/files/request_fields.hpp"
#include "guest-agent/forward/tcp_socket.hpp"
#include "guest-agent/identity/identity_fields.hpp"
#include "guest-agent/identity/ipv4_fields.hpp"

namespace {

using namespace sbx;
using namespace sbx::agent;

using sbx::fuzz::check;

// The accounts and env file the exec and file ops read, once for the run.
struct Accounts {
    Accounts() : run("agent"), dir(run.path()) {
        std::ofstream(dir + "/passwd") << "root:x:0:0:root:/root:/bin/sh\n"
                                          "alice:x:1000:1000:Alice:/home/alice:/bin/bash\n"
                                          "nobody:x:65534:65534::/nonexistent:/usr/sbin/nologin\n"
                                          "broken line\n";
        std::ofstream(dir + "/group") << "root:x:0:\nstaff:x:50:alice\n";
        std::ofstream(dir + "/env") << "# the env file\nLANG=C.UTF-8\n\n=nokey\nnovalue\nSANDBOX=1\r\n";
    }
    fuzz::RunDir run;
    std::string dir;
};

const Accounts& accounts() {
    static const Accounts files;
    return files;
}

// The ops sbx-agent registers (Agent::Agent), for the lookup serve() does.
const OpTable& op_table() {
    static const OpTable ops = [] {
        OpTable t;
        for (auto add : {register_exec_ops, register_file_ops, register_tar_ops, register_forward_ops,
                         register_health_ops, register_identity_ops, register_freeze_ops}) {
            add(t);
        }
        return t;
    }();
    return ops;
}

bool has_nul(std::string_view s) { return s.find('\0') != std::string_view::npos; }

// What the session sends back for a refusal (messages.cpp error_message).
void check_refusal(const Error& e) { check(e.errno_value == 0 || e.errno_value == ENOENT); }

void check_exec(const Json& request) {
    auto spec = parse_exec_request(request, accounts().dir + "/env",
                                   AccountFiles{accounts().dir + "/passwd", accounts().dir + "/group"});
    if (!spec) {
        return check_refusal(spec.error());
    }
    const SpawnPlan& plan = spec->plan;
    check(!plan.argv.empty() && !plan.argv[0].empty());
    if (spec->command.contains("shell")) {
        check(plan.argv.size() == 3 && plan.argv[0] == "/bin/sh" && plan.argv[2] == request["shell"]);
    } else {
        check(spec->command["argv"] == request["argv"]);
    }
    for (const std::string& arg : plan.argv) {
        check(!has_nul(arg));
    }
    // The fixed variables first, the env file's, then the request's.
    check(plan.env.size() >= 7 && plan.env[0].starts_with("PATH=") && plan.env[1] == "HOME=" + plan.user.home);
    for (const std::string& entry : plan.env) {
        const auto eq = entry.find('=');
        check(eq != std::string::npos && eq > 0 && !has_nul(entry));
    }
    check(!plan.cwd.empty() && plan.cwd.front() == '/' && !has_nul(plan.cwd));
    check(plan.timeout.count() >= 0 && plan.timeout.count() <= kMaxTimeoutMs);
    check(!(spec->detach && plan.stdin_pipe));
    // The user by name, or by a uid that need not be in the passwd file.
    const auto it = request.find("user");
    const std::string user = it == request.end() || it->is_null() ? "root" : it->get<std::string>();
    check(plan.user.name == user || (!user.empty() && user.find_first_not_of("0123456789") == std::string::npos));
}

void check_files(const Json& request) {
    for (const char* key : {"path", "from", "to"}) {
        auto path = files::get_path(request, key);
        if (path) {
            check(!path->empty() && path->front() == '/' && !has_nul(*path) && request[key] == *path);
        } else {
            check_refusal(path.error());
        }
    }
    if (auto mode = files::get_mode(request, "mode", 0644); mode) {
        check(*mode <= 07777 && (!request.contains("mode") || request["mode"].is_null() || request["mode"] == *mode));
    }
    auto owner = files::get_owner(request, accounts().dir + "/passwd");
    if (!owner) {
        return check_refusal(owner.error());
    }
    // "uid" and "gid" win over the user's (request_fields.hpp).
    for (const auto& [key, id] : {std::pair{"uid", owner->uid}, std::pair{"gid", owner->gid}}) {
        if (request.contains(key) && !request[key].is_null()) {
            check(id && *id != 0xffffffffU && request[key] == *id);
        }
    }
}

void check_forward(const Json& request) {
    auto host = get_string(request, "host", std::string("127.0.0.1"));
    auto port = get_int(request, "port", 0);
    if (!host || !port || *port < 0 || *port > std::numeric_limits<std::uint16_t>::max()) {
        return;
    }
    auto address = parse_tcp_address(*host, static_cast<std::uint16_t>(*port));
    if (address) {
        const auto* in = reinterpret_cast<const sockaddr_in*>(address->get());  // sin6_port is at the same place
        check((address->family() == AF_INET || address->family() == AF_INET6) && ntohs(in->sin_port) == *port &&
              !has_nul(*host));
    }
}

void check_identity(const Json& request) {
    auto text = [&](const char* key) -> std::optional<std::string> {
        auto it = request.find(key);
        return it != request.end() && it->is_string() ? std::optional(it->get<std::string>()) : std::nullopt;
    };
    auto lower = [](std::string s) {
        for (char& c : s) {
            c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
        }
        return s;
    };
    if (auto seed_text = text("seed")) {
        if (auto seed = parse_seed_hex(*seed_text)) {
            check(seed->size() >= kMinSeedBytes && seed->size() <= kMaxSeedBytes && to_hex(*seed) == lower(*seed_text));
        }
    }
    if (auto token_text = text("token")) {
        if (auto token = check_token(*token_text)) {
            check(*token == *token_text && token->size() >= kMinTokenDigits && token->size() <= kMaxTokenDigits);
        }
    }
    if (auto mac_text = text("mac")) {
        if (auto mac = parse_mac(*mac_text)) {
            check(format_mac(*mac) == lower(*mac_text) && (*mac)[0] % 2 == 0);
        }
    }
    if (auto it = request.find("ipv4"); it != request.end()) {
        if (auto config = parse_ipv4_config(*it)) {
            check(check_ipv4_config(*config).has_value());
            auto again = parse_ipv4_config(ipv4_config_json(*config));
            check(again && *again == *config);
        }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    auto message = parse_message(text);
    if (!message) {
        check_refusal(message.error());
        return 0;
    }
    const Json& request = *message;
    check(request.is_object() && request["type"].is_string());
    // What serve() does before an op runs: a request with a string op that
    // names a registered handler.
    auto op = get_string(request, "op");
    if (request["type"] != "request" || !op) {
        return 0;
    }
    auto handler = op_table().find(*op);
    if (handler == op_table().end()) {
        return 0;
    }
    const std::string& name = handler->first;
    if (name == "exec") {
        check_exec(request);
    } else if (name == "connect_tcp" || name == "listen_tcp") {
        check_forward(request);
    } else if (name == "identity") {
        check_identity(request);
    } else {
        check_files(request);  // and proc_*, freeze, thaw and health, which read no more than these
    }
    for (const char* key : {"offset", "length", "id", "follow", "append", "mkdirs", "recursive", "parents"}) {
        // Typed access: absent or null gives the default, anything else its own type.
        auto it = request.find(key);
        const bool absent = it == request.end() || it->is_null();
        check(get_int(request, key, 0).has_value() == (absent || it->is_number_integer()));
        check(get_bool(request, key, false).has_value() == (absent || it->is_boolean()));
        check(get_string(request, key, "").has_value() == (absent || it->is_string()));
    }
    return 0;
}
