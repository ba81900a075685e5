// The agent's one desktop (docs/agent-protocol.md, "Desktop"): the X
// server with its VNC server and the session on it, both detached
// processes of exec's ProcessTable (so they belong to no connection, are
// reaped, and show in proc_list), and the actions run on it. One object
// per agent, held by the desktop ops (desktop_ops.cpp).
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "guest-agent/agent/agent.hpp"
#include "guest-agent/desktop/desktop_request.hpp"

namespace sbx::agent {

class DetachedProcess;

struct DesktopConfig {
    // Xvfb: for tests on hosts without TigerVNC; it has no VNC port.
    enum class Server { Tigervnc, Xvfb };
    Server server = Server::Tigervnc;
    // Started on the new display; empty: none. Each of session_programs
    // must be on PATH (else not_installed).
    std::vector<std::string> session{"dbus-launch", "--exit-with-session", "startxfce4"};
    std::vector<std::string> session_programs{"dbus-launch", "startxfce4"};
    std::chrono::milliseconds start_timeout{60'000};
    std::string socket_dir = "/tmp/.X11-unix";  // where X servers put their sockets (X<display>)
    // The session's XDG_RUNTIME_DIR is <runtime_dir_base>/<uid>, as
    // pam_systemd makes it at a login (the images run no logind).
    std::string runtime_dir_base = "/run/user";
};

// The user's runtime directory under `base` (XDG Base Directory spec:
// owned by the user, mode 0700, on a local file system): made when
// missing (`base` too, 0755), reused when it is already the user's own
// 0700 directory, refused (start_failed) when it is anything else.
[[nodiscard]] Result<std::string> prepare_runtime_dir(const std::string& base, uid_t uid, gid_t gid);

// The X server's argument vector (Xtigervnc(1), Xvfb(1), xserver(1)).
[[nodiscard]] std::vector<std::string> x_server_argv(DesktopConfig::Server server, const DesktopRequest& request);

struct DesktopStatus {
    bool running = false;                   // the X server
    DesktopRequest desktop;                 // its display, size and user, when running
    std::optional<std::uint16_t> vnc_port;  // when running (not with Xvfb)
    bool session_running = false;
};

// desktop_status's fields (numbers null when none runs).
[[nodiscard]] Json status_fields(const DesktopStatus& status);

// What an action gives back: its result fields and, for an image, the PNG.
struct ActionResult {
    Json fields = Json::object();
    std::string png;
};

// The largest image an action may produce, and other programs' output.
inline constexpr std::size_t kMaxPngBytes = 32u << 20;
inline constexpr std::size_t kMaxTextOutput = 64u << 10;

class DesktopService {
public:
    explicit DesktopService(DesktopConfig config = {});
    ~DesktopService();
    DesktopService(const DesktopService&) = delete;
    DesktopService& operator=(const DesktopService&) = delete;

    // Starts the desktop unless one runs; `second` is true when this call
    // started it. Errors carry their code (not_installed, start_failed,
    // bad_request) or an errno (an unknown user: ENOENT).
    [[nodiscard]] Result<std::pair<DesktopStatus, bool>> start(ProcessTable& processes, const AgentOptions& options,
                                                               const DesktopRequest& request);
    [[nodiscard]] DesktopStatus status() const;
    // One desktop_action request. Errors carry their code (not_running,
    // bad_request, not_installed, action_failed) or an errno.
    [[nodiscard]] Result<ActionResult> act(const AgentOptions& options, const Json& request);

private:
    struct Running {
        DesktopRequest desktop;
        std::shared_ptr<DetachedProcess> server;
        std::shared_ptr<DetachedProcess> session;
    };
    [[nodiscard]] DesktopStatus status_locked() const;
    [[nodiscard]] Result<void> wait_until_ready(DetachedProcess& server, const DesktopRequest& request) const;

    const DesktopConfig config_;
    std::mutex start_mutex_;  // one start at a time
    mutable std::mutex mutex_;
    std::optional<Running> current_;
};

}  // namespace sbx::agent
