// The host side of the desktop ops (docs/agent-protocol.md, "Desktop"):
// start the guest's X server with its VNC server and XFCE session, ask
// whether it runs, and drive it with the computer-use actions (the action
// names and fields of Anthropic's computer-use tool). The VNC server
// listens on the guest's 127.0.0.1:vnc_port; the host reaches it with
// connect_tcp (forward_client.hpp's open_tcp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "guest-agent/client/agent_client.hpp"

namespace sbx::agent {

struct DesktopStartOptions {
    std::uint32_t display = 1;   // X display :N (0 to 99); the VNC server listens on 5900 + N
    std::uint32_t width = 1280;  // the screen, 64 to 8192 pixels each way
    std::uint32_t height = 800;
    std::string user = "user";   // the guest user the X server and the session run as
};

// The agent's reply, checked (the guest is untrusted); `raw` is the whole message.
struct DesktopInfo {
    bool running = false;  // desktop_start: always true on success
    bool started = false;  // desktop_start: this call started it (false: it ran already)
    // The X server's display, its VNC port and screen size; 0 when none runs.
    std::uint32_t display = 0;
    std::uint16_t vnc_port = 0;
    std::uint32_t width = 0;
    std::uint32_t height = 0;
    bool session_running = false;  // the XFCE session (it may have been logged out of)
    Json raw;
};

// The largest PNG a screenshot or zoom may bring (the agent's own bound).
inline constexpr std::uint64_t kMaxDesktopPng = 32ull << 20;

// Starts the desktop unless one runs. Errors carry the agent's code
// (error_code()): not_installed, start_failed, not_found (the user),
// bad_request.
[[nodiscard]] Result<DesktopInfo> desktop_start(AgentClient& client, const DesktopStartOptions& options = {});
[[nodiscard]] Result<DesktopInfo> desktop_status(AgentClient& client);

// One computer-use action, e.g. {"action":"left_click","coordinate":[640,400]}
// or {"action":"screenshot","max_width":1024}. Returns the reply's fields
// without "type": screenshot and zoom give {"png":"<base64>","width","height"}
// (the PNG's own size), cursor_position {"x","y"}, the others {}. Errors
// carry the agent's code: not_running, not_installed, action_failed,
// bad_request.
[[nodiscard]] Result<Json> desktop_action(AgentClient& client, const Json& action,
                                          std::uint64_t max_png_bytes = kMaxDesktopPng);

// screenshot and zoom with the PNG as bytes (no base64).
struct DesktopImage {
    std::string png;
    std::uint32_t width = 0;
    std::uint32_t height = 0;
};
[[nodiscard]] Result<DesktopImage> desktop_image(AgentClient& client, const Json& action,
                                                 std::uint64_t max_png_bytes = kMaxDesktopPng);

}  // namespace sbx::agent
