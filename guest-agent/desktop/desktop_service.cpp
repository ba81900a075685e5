#include "guest-agent/desktop/desktop_service.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <thread>

#include "base/unix_socket.hpp"
#include "guest-agent/desktop/desktop_run.hpp"
#include "guest-agent/exec/process_table.hpp"
#include "guest-agent/forward/tcp_socket.hpp"

namespace sbx::agent {
namespace {

constexpr std::chrono::milliseconds kPollInterval{50};
constexpr std::size_t kMaxStartOutput = 2048;  // of the X server's output, in start_failed

template <typename... Args>
Error coded(std::string_view error_code, fmt::format_string<Args...> format, Args&&... args) {
    return make_coded_error(error_code, format, std::forward<Args>(args)...);
}

std::uint16_t vnc_port_of(const DesktopRequest& request) {
    return static_cast<std::uint16_t>(kVncBasePort + request.display);
}

// exec's user, environment and working directory for `argv`, with
// DISPLAY when `display` is given.
Result<ExecSpec> spec_for(const AgentOptions& options, const std::string& user, std::vector<std::string> argv,
                          std::optional<std::uint32_t> display) {
    Json request{{"argv", std::move(argv)}, {"user", user}, {"detach", true}};
    if (display) {
        request["env"] = Json{{"DISPLAY", fmt::format(":{}", *display)}};
    }
    auto spec = parse_exec_request(request, options.env_file);
    if (!spec) {
        return spec.error();
    }
    spec->plan.oom_score_adj = options.child_oom_score_adj;
    return spec;
}

Result<void> require_program(const SpawnPlan& plan, const std::string& program) {
    if (!find_program(program, env_value(plan.env, "PATH").value_or(kDefaultPath))) {
        return coded(code::kNotInstalled, "{} is not installed (not on PATH)", program);
    }
    return ok();
}

bool accepts(const std::string& socket_path) {
    return connect_unix(socket_path).has_value();
}

bool accepts(std::uint16_t port) {
    auto address = parse_tcp_address("127.0.0.1", port);
    return address && connect_tcp(*address, std::chrono::milliseconds(1000)).has_value();
}

std::string program_name(const std::vector<std::string>& argv) {
    return argv.empty() ? std::string() : argv[0];
}

Error failed_run(const std::string& program, const ProgramRun& run, std::chrono::milliseconds deadline) {
    const std::string err = last_lines(run.err, kMaxErrTail);
    const std::string tail = err.empty() ? std::string() : ": " + err;
    if (run.out_over) {
        return coded(code::kActionFailed, "{} wrote more than the output bound", program);
    }
    if (run.status.timed_out) {
        return coded(code::kActionFailed, "{} did not finish within {} ms{}", program, deadline.count(), tail);
    }
    if (run.status.signal) {
        return coded(code::kActionFailed, "{} was killed by signal {}{}", program, *run.status.signal, tail);
    }
    return coded(code::kActionFailed, "{} failed with exit code {}{}", program, run.status.code.value_or(-1), tail);
}

}  // namespace

Result<std::string> prepare_runtime_dir(const std::string& base, uid_t uid, gid_t gid) {
    if (::mkdir(base.c_str(), 0755) != 0 && errno != EEXIST) {
        return coded(code::kStartFailed, "making {}: {}", base, std::strerror(errno));
    }
    const std::string dir = fmt::format("{}/{}", base, uid);
    if (::mkdir(dir.c_str(), 0700) == 0) {
        if (::lchown(dir.c_str(), uid, gid) != 0 || ::chmod(dir.c_str(), 0700) != 0) {
            const int err = errno;
            ::rmdir(dir.c_str());
            return coded(code::kStartFailed, "giving {} to uid {}: {}", dir, uid, std::strerror(err));
        }
        return dir;
    }
    if (errno != EEXIST) {
        return coded(code::kStartFailed, "making {}: {}", dir, std::strerror(errno));
    }
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0) {
        return coded(code::kStartFailed, "{}: {}", dir, std::strerror(errno));
    }
    if (!S_ISDIR(st.st_mode) || st.st_uid != uid || (st.st_mode & 07777) != 0700) {
        return coded(code::kStartFailed, "{} is not a 0700 directory of uid {}", dir, uid);
    }
    return dir;
}

std::vector<std::string> x_server_argv(DesktopConfig::Server server, const DesktopRequest& request) {
    const std::string display = fmt::format(":{}", request.display);
    if (server == DesktopConfig::Server::Xvfb) {
        return {"Xvfb", display, "-screen", "0", fmt::format("{}x{}x24", request.width, request.height), "-nolisten",
                "tcp"};
    }
    // Xtigervnc(1): -localhost binds the VNC port to the loopback only;
    // -SecurityTypes None asks no password (only the agent's connect_tcp and
    // guest processes reach it); -AlwaysShared lets several viewers watch.
    return {"Xtigervnc",     display,         "-geometry", fmt::format("{}x{}", request.width, request.height),
            "-depth",        "24",            "-rfbport",  std::to_string(vnc_port_of(request)),
            "-localhost",    "-SecurityTypes", "None",     "-AlwaysShared",
            "-nolisten",     "tcp"};
}

Json status_fields(const DesktopStatus& status) {
    Json out{{"running", status.running}, {"session_running", status.session_running}};
    if (status.running) {
        out["display"] = status.desktop.display;
        out["vnc_port"] = status.vnc_port ? Json(*status.vnc_port) : Json();
        out["width"] = status.desktop.width;
        out["height"] = status.desktop.height;
    } else {
        out["display"] = out["vnc_port"] = out["width"] = out["height"] = Json();
    }
    return out;
}

DesktopService::DesktopService(DesktopConfig config) : config_(std::move(config)) {}

DesktopService::~DesktopService() = default;

DesktopStatus DesktopService::status() const {
    std::lock_guard lock(mutex_);
    return status_locked();
}

DesktopStatus DesktopService::status_locked() const {
    DesktopStatus s;
    if (!current_ || !current_->server->snapshot().running) {
        return s;
    }
    s.running = true;
    s.desktop = current_->desktop;
    if (config_.server == DesktopConfig::Server::Tigervnc) {
        s.vnc_port = vnc_port_of(current_->desktop);
    }
    s.session_running = current_->session && current_->session->snapshot().running;
    return s;
}

Result<std::pair<DesktopStatus, bool>> DesktopService::start(ProcessTable& processes, const AgentOptions& options,
                                                             const DesktopRequest& request) {
    std::lock_guard start_lock(start_mutex_);
    std::shared_ptr<DetachedProcess> old_session;
    {
        std::lock_guard lock(mutex_);
        if (auto s = status_locked(); s.running) {
            return std::pair{s, false};
        }
        if (current_) {
            old_session = current_->session;
        }
    }
    const auto argv = x_server_argv(config_.server, request);
    auto server_spec = spec_for(options, request.user, argv, std::nullopt);
    if (!server_spec) {
        return server_spec.error();
    }
    std::optional<ExecSpec> session_spec;
    if (!config_.session.empty()) {
        auto spec = spec_for(options, request.user, config_.session, request.display);
        if (!spec) {
            return spec.error();
        }
        const UserInfo& user = spec->plan.user;
        auto runtime_dir = prepare_runtime_dir(config_.runtime_dir_base, user.uid, user.gid);
        if (!runtime_dir) {
            return runtime_dir.error();
        }
        spec->plan.env.push_back("XDG_RUNTIME_DIR=" + *runtime_dir);
        session_spec = std::move(*spec);
    }
    if (auto r = require_program(server_spec->plan, argv[0]); !r) {
        return r.error();
    }
    for (const auto& program : config_.session_programs) {
        if (auto r = require_program(session_spec ? session_spec->plan : server_spec->plan, program); !r) {
            return r.error();
        }
    }
    const std::string socket_path = fmt::format("{}/X{}", config_.socket_dir, request.display);
    if (accepts(socket_path)) {
        return coded(code::kStartFailed, "display :{} is in use by another X server ({})", request.display,
                     socket_path);
    }
    if (config_.server == DesktopConfig::Server::Tigervnc && accepts(vnc_port_of(request))) {
        return coded(code::kStartFailed, "127.0.0.1:{} is in use", vnc_port_of(request));
    }
    // The X server runs as the user and could not make a root-owned,
    // sticky socket directory itself (its transport library warns then).
    if (::geteuid() == 0 && ::mkdir(config_.socket_dir.c_str(), 01777) == 0) {
        ::chmod(config_.socket_dir.c_str(), 01777);  // past the umask
    }
    if (old_session && old_session->snapshot().running) {
        old_session->signal_group(SIGTERM);  // its X server is gone
    }
    auto server = processes.start(*server_spec);
    if (!server) {
        return server.error().context(fmt::format("starting {}", argv[0]));
    }
    if (auto r = wait_until_ready(**server, request); !r) {
        (*server)->signal_group(SIGKILL);
        return r.error();
    }
    std::shared_ptr<DetachedProcess> session;
    if (session_spec) {
        auto started = processes.start(*session_spec);
        if (!started) {
            (*server)->signal_group(SIGKILL);
            return coded(code::kStartFailed, "starting the session ({}): {}", program_name(config_.session),
                         started.error().to_string());
        }
        session = std::move(*started);
    }
    std::lock_guard lock(mutex_);
    current_ = Running{request, std::move(*server), std::move(session)};
    return std::pair{status_locked(), true};
}

Result<void> DesktopService::wait_until_ready(DetachedProcess& server, const DesktopRequest& request) const {
    const std::string socket_path = fmt::format("{}/X{}", config_.socket_dir, request.display);
    const bool vnc = config_.server == DesktopConfig::Server::Tigervnc;
    const auto deadline = std::chrono::steady_clock::now() + config_.start_timeout;
    auto output = [&] {
        auto tail = server.tail(kMaxStartOutput * 2);
        return last_lines(std::string_view(reinterpret_cast<const char*>(tail.data()), tail.size()), kMaxStartOutput);
    };
    bool x_ready = false;
    while (true) {
        if (!server.snapshot().running) {
            return coded(code::kStartFailed, "the X server exited: {}", output());
        }
        x_ready = x_ready || accepts(socket_path);
        if (x_ready && (!vnc || accepts(vnc_port_of(request)))) {
            return ok();
        }
        if (std::chrono::steady_clock::now() >= deadline) {
            return coded(code::kStartFailed, "the X server was not ready within {} ms: {}",
                         config_.start_timeout.count(), output());
        }
        std::this_thread::sleep_for(kPollInterval);
    }
}

Result<ActionResult> DesktopService::act(const AgentOptions& options, const Json& request) {
    const DesktopStatus s = status();
    if (!s.running) {
        return coded(code::kNotRunning, "no desktop runs (desktop_start starts one)");
    }
    auto plan = plan_action(request, ScreenSize{s.desktop.width, s.desktop.height}, s.desktop.display);
    if (!plan) {
        return plan.error();
    }
    ActionResult result;
    if (plan->argv.empty()) {
        std::this_thread::sleep_for(plan->sleep);
        return result;
    }
    const std::string program = plan->argv[0];
    auto spec = spec_for(options, s.desktop.user, plan->argv, s.desktop.display);
    if (!spec) {
        return spec.error();
    }
    if (auto r = require_program(spec->plan, program); !r) {
        return r.error();
    }
    spec->plan.timeout = plan->deadline;
    const bool png = plan->output == ActionPlan::Output::Png;
    auto run = run_program(spec->plan, png ? kMaxPngBytes : kMaxTextOutput);
    if (!run) {
        return run.error().context(fmt::format("starting {}", program));
    }
    if (run->out_over || run->status.timed_out || run->status.signal || run->status.code.value_or(0) != 0) {
        return failed_run(program, *run, plan->deadline);
    }
    if (png) {
        auto size = png_size(run->out);
        if (!size) {
            return coded(code::kActionFailed, "{} wrote no PNG: {}", program, last_lines(run->err, kMaxErrTail));
        }
        result.fields = Json{{"width", size->width}, {"height", size->height}, {"bytes", run->out.size()}};
        result.png = std::move(run->out);
    } else if (plan->output == ActionPlan::Output::MouseLocation) {
        auto location = parse_mouse_location(run->out);
        if (!location) {
            return coded(code::kActionFailed, "{} gave no X= and Y=: {}", program, last_lines(run->out, 256));
        }
        result.fields = Json{{"x", location->first}, {"y", location->second}};
    }
    if (!run->err.empty()) {
        result.fields["stderr"] = last_lines(run->err, kMaxErrTail);  // xdotool's "No such key name", say
    }
    return result;
}

}  // namespace sbx::agent
