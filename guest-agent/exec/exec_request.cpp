#include "guest-agent/exec/exec_request.hpp"

#include <sys/stat.h>

namespace sbx::agent {
namespace {

constexpr std::size_t kMaxEnvFile = 1 << 20;

bool has_nul(std::string_view s) {
    return s.find('\0') != std::string_view::npos;
}

Result<std::vector<std::string>> parse_argv(const Json& request, Json& command) {
    const bool has_argv = request.contains("argv") && !request["argv"].is_null();
    const bool has_shell = request.contains("shell") && !request["shell"].is_null();
    if (has_argv == has_shell) {
        return make_error("exactly one of \"argv\" and \"shell\" is required");
    }
    if (has_shell) {
        auto shell = get_string(request, "shell");
        if (!shell) {
            return shell.error();
        }
        if (has_nul(*shell)) {
            return make_error("\"shell\" must not contain NUL");
        }
        command = Json{{"shell", *shell}};
        return std::vector<std::string>{"/bin/sh", "-c", *shell};
    }
    const Json& argv = request["argv"];
    if (!argv.is_array() || argv.empty()) {
        return make_error("\"argv\" must be a non-empty array of strings");
    }
    std::vector<std::string> out;
    for (const auto& arg : argv) {
        if (!arg.is_string()) {
            return make_error("\"argv\" must be a non-empty array of strings");
        }
        out.push_back(arg.get<std::string>());
        if (has_nul(out.back())) {
            return make_error("\"argv\" strings must not contain NUL");
        }
    }
    if (out[0].empty()) {
        return make_error("argv[0] must not be empty");
    }
    command = Json{{"argv", argv}};
    return out;
}

Result<void> add_request_env(const Json& request, std::vector<std::string>& env) {
    auto it = request.find("env");
    if (it == request.end() || it->is_null()) {
        return ok();
    }
    if (!it->is_object()) {
        return make_error("\"env\" must be an object of strings");
    }
    for (const auto& [key, value] : it->items()) {
        if (!value.is_string()) {
            return make_error("\"env\": the value of \"{}\" must be a string", key);
        }
        const auto& text = value.get_ref<const std::string&>();
        if (key.empty() || key.find('=') != std::string::npos || has_nul(key) || has_nul(text)) {
            return make_error(
                "\"env\": \"{}\" is not a valid variable (no '=' or NUL in names, no NUL in values)", key);
        }
        env.push_back(fmt::format("{}={}", key, text));
    }
    return ok();
}

Result<std::optional<WindowSize>> parse_pty(const Json& request) {
    auto it = request.find("pty");
    if (it == request.end() || it->is_null()) {
        return std::optional<WindowSize>();
    }
    if (!it->is_object()) {
        return make_error("\"pty\" must be an object {{\"rows\",\"cols\"}}");
    }
    auto rows = get_int(*it, "rows", 24);
    auto cols = get_int(*it, "cols", 80);
    if (!rows || !cols) {
        return (!rows ? rows : cols).error().context("pty");
    }
    if (*rows < 0 || *rows > 0xffff || *cols < 0 || *cols > 0xffff) {
        return make_error("pty rows and cols must be between 0 and 65535");
    }
    return std::optional<WindowSize>(
        WindowSize{static_cast<std::uint16_t>(*rows), static_cast<std::uint16_t>(*cols)});
}

bool is_directory(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

std::vector<std::string> read_env_file(const std::string& path) {
    std::vector<std::string> env;
    auto text = read_file(path, kMaxEnvFile);
    if (!text) {
        return env;
    }
    std::string_view rest = *text;
    while (!rest.empty()) {
        auto nl = rest.find('\n');
        std::string_view line = rest.substr(0, nl);
        rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
        if (!line.empty() && line.back() == '\r') {
            line.remove_suffix(1);
        }
        line.remove_prefix(std::min(line.find_first_not_of(" \t"), line.size()));
        auto eq = line.find('=');
        if (line.empty() || line.front() == '#' || eq == std::string_view::npos || eq == 0 || has_nul(line)) {
            continue;
        }
        env.emplace_back(line);
    }
    return env;
}

Result<ExecSpec> parse_exec_request(const Json& request, const std::string& env_file,
                                    const AccountFiles& accounts, const std::string& default_user) {
    ExecSpec spec;
    auto argv = parse_argv(request, spec.command);
    auto user_name = get_string(request, "user", default_user);
    auto cwd = get_string(request, "cwd", "");
    auto stdin_pipe = get_bool(request, "stdin", false);
    auto timeout = get_int(request, "timeout_ms", 0);
    auto detach = get_bool(request, "detach", false);
    auto pty = parse_pty(request);
    for (const Error* e : {argv ? nullptr : &argv.error(), user_name ? nullptr : &user_name.error(),
                           cwd ? nullptr : &cwd.error(), stdin_pipe ? nullptr : &stdin_pipe.error(),
                           timeout ? nullptr : &timeout.error(), detach ? nullptr : &detach.error(),
                           pty ? nullptr : &pty.error()}) {
        if (e != nullptr) {
            return *e;
        }
    }
    if (*timeout < 0 || *timeout > kMaxTimeoutMs) {
        return make_error("\"timeout_ms\" must be between 0 and {}", kMaxTimeoutMs);
    }
    if (*detach && *stdin_pipe && *pty) {
        return make_error("a detached process on a pseudo-terminal takes no stdin: \"stdin\" must be false");
    }
    if (has_nul(*user_name) || has_nul(*cwd)) {
        return make_error("\"user\" and \"cwd\" must not contain NUL");
    }
    auto user = lookup_user(*user_name, accounts);
    if (!user) {
        return user.error();
    }

    SpawnPlan& plan = spec.plan;
    plan.argv = std::move(*argv);
    plan.env = {fmt::format("PATH={}", kDefaultPath), "HOME=" + user->home, "USER=" + user->name,
                "LOGNAME=" + user->name, "SHELL=" + user->shell};
    if (*pty) {
        plan.env.emplace_back("TERM=xterm-256color");
    }
    for (auto& entry : read_env_file(env_file)) {
        plan.env.push_back(std::move(entry));
    }
    if (auto r = add_request_env(request, plan.env); !r) {
        return r.error();
    }
    // A relative cwd is taken from the home directory; with none given, a
    // home that does not exist (nobody's /nonexistent) falls back to "/".
    if (cwd->empty()) {
        plan.cwd = is_directory(user->home) ? user->home : "/";
    } else if (cwd->front() == '/') {
        plan.cwd = *cwd;
    } else {
        plan.cwd = user->home + "/" + *cwd;
    }
    plan.user = std::move(*user);
    plan.stdin_pipe = *stdin_pipe;
    plan.pty = *pty;
    plan.timeout = std::chrono::milliseconds(*timeout);
    spec.detach = *detach;
    return spec;
}

}  // namespace sbx::agent
