// The desktop ops' requests checked and turned into what to run
// (docs/agent-protocol.md, "Desktop"): desktop_start's fields, and each
// computer-use action as an xdotool or capture argument vector. Pure: no
// process is started here, so every action's argv is testable as data.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "guest-agent/protocol/messages.hpp"

namespace sbx::agent {

inline constexpr std::uint32_t kMaxDisplay = 99;
inline constexpr std::uint32_t kMinScreenSide = 64;
inline constexpr std::uint32_t kMaxScreenSide = 8192;
inline constexpr std::uint32_t kVncBasePort = 5900;  // Xtigervnc(1): -rfbport defaults to 5900 + display

struct DesktopRequest {
    std::uint32_t display = 1;
    std::uint32_t width = 1280;
    std::uint32_t height = 800;
    std::string user = "user";
};

// desktop_start's fields; a bad one is an Error with code bad_request.
[[nodiscard]] Result<DesktopRequest> parse_start_request(const Json& request);

struct ScreenSize {
    std::uint32_t width = 0;
    std::uint32_t height = 0;
    bool operator==(const ScreenSize&) const = default;
};

// What an action runs and what its output is.
struct ActionPlan {
    enum class Output {
        None,           // {} on success
        Png,            // stdout is the image
        MouseLocation,  // stdout is `getmouselocation --shell`
    };
    std::vector<std::string> argv;  // empty: nothing runs (wait)
    std::chrono::milliseconds deadline{0};
    std::chrono::milliseconds sleep{0};  // wait: how long the agent sleeps
    Output output = Output::None;
};

// Checks a desktop_action request against the screen of the running
// desktop on display `display`; a bad one is an Error with code bad_request.
[[nodiscard]] Result<ActionPlan> plan_action(const Json& request, ScreenSize screen, std::uint32_t display);

// The largest size within max_width x max_height (either may be absent)
// with the screen's aspect, at least 1x1; the screen itself when it fits.
[[nodiscard]] ScreenSize fit_within(ScreenSize screen, std::optional<std::uint32_t> max_width,
                                    std::optional<std::uint32_t> max_height);

// The size in a PNG's IHDR chunk (PNG spec, 5.2 and 11.2.2), or nullopt
// when `bytes` does not start like a PNG.
[[nodiscard]] std::optional<ScreenSize> png_size(std::string_view bytes);

// X and Y of `xdotool getmouselocation --shell` ("X=1\nY=2\nSCREEN=0\n...").
[[nodiscard]] std::optional<std::pair<std::int64_t, std::int64_t>> parse_mouse_location(std::string_view text);

}  // namespace sbx::agent
