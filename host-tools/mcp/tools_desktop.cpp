// The sandbox's graphical desktop (docs/api.md "The desktop"): started or
// shown, and driven by the actions of Anthropic's computer-use tool
// (computer_20250124, zoom of computer_20251124), whose names and fields
// desktop_action takes as they are, so that a model that knows that tool
// knows this one. Screenshots come back as MCP image content.
#include "base/base64.hpp"
#include "host-tools/mcp/tools.hpp"

namespace sbx::mcp {

namespace {

// A screenshot's answer: at most 32 MiB of PNG (docs/api.md), as base64 in JSON.
constexpr std::size_t kMaxActionAnswer = 48u << 20;

// docs/api.md POST …/desktop/actions: the fields, their JSON types and the API's bounds.
constexpr const char* kActionFields = R"js(,
  "action":{"type":"string","enum":["screenshot","zoom","mouse_move","left_click","right_click","middle_click",
            "double_click","triple_click","left_click_drag","left_mouse_down","left_mouse_up","scroll","type","key",
            "hold_key","cursor_position","wait"]},
  "coordinate":{"type":"array","items":{"type":"integer","minimum":0,"maximum":8191},"minItems":2,"maxItems":2,
                "description":"[x, y] in screen pixels: where mouse_move goes, where a click, scroll or left_mouse_down/up happens (default: where the pointer is), where left_click_drag ends"},
  "start_coordinate":{"type":"array","items":{"type":"integer","minimum":0,"maximum":8191},"minItems":2,"maxItems":2,
                      "description":"left_click_drag: [x, y] where it starts"},
  "region":{"type":"array","items":{"type":"integer","minimum":0,"maximum":8192},"minItems":4,"maxItems":4,
            "description":"zoom: [x0, y0, x1, y1], the part of the screen to show at full resolution"},
  "text":{"type":"string","maxLength":4096,
          "description":"type: the text to type. key, hold_key: xdotool key names joined by + and separated by spaces (ctrl+s, Return, ctrl+a Delete). Clicks and scroll: the modifier keys held (shift, ctrl+shift)"},
  "scroll_direction":{"type":"string","enum":["up","down","left","right"]},
  "scroll_amount":{"type":"integer","minimum":1,"maximum":100,"description":"scroll: how many wheel clicks"},
  "duration":{"type":"number","minimum":0,"maximum":100,"description":"wait, hold_key: seconds"},
  "max_width":{"type":"integer","minimum":1,"maximum":8192,
               "description":"screenshot: scaled down to fit (aspect kept); coordinates stay the screen's own"},
  "max_height":{"type":"integer","minimum":1,"maximum":8192,"description":"screenshot: as max_width"})js";

constexpr const char* kDesktopOut = R"js({"type":"object","required":["desktop"],"properties":{
  "desktop":{"type":"object","properties":{"running":{"type":"boolean"},"sessionRunning":{"type":"boolean"},
    "display":{"type":["integer","null"]},"width":{"type":["integer","null"]},"height":{"type":["integer","null"]},
    "vncPort":{"type":["integer","null"]},"started":{"type":"boolean"},
    "url":{"type":["string","null"]},"viewOnlyUrl":{"type":["string","null"]}}},
  "warnings":{"type":"array","items":{"type":"string"}}}})js";

constexpr const char* kActionOut = R"js({"type":"object","required":["action","result"],"properties":{
  "action":{"type":"string"},
  "result":{"type":"object","properties":{"width":{"type":"integer"},"height":{"type":"integer"},
    "bytes":{"type":"integer"},"x":{"type":"integer"},"y":{"type":"integer"},"stderr":{"type":"string"}}}}})js";

// The REST body (POST …/desktop, …/desktop/actions): the tool's arguments
// but the sandbox, whose schemas hold the API's fields and bounds.
Json body_of(const Json& args) {
    Json body = args;
    body.erase("sandbox");
    return body;
}

// An image action's result `{png, width, height}`: the PNG goes to an image
// block (MCP 2025-06-18 server/tools "Image Content"), its size stays in the JSON.
Result<Json> image_result(const Json& result, ToolContext& ctx) {
    const std::string png = string_member(result, "png");
    auto bytes = base64_decode(png);
    if (png.empty() || !bytes) {
        return make_coded_error("bad_response", "the desktop's image is not base64 PNG");
    }
    ctx.content.push_back({{"type", "image"}, {"data", png}, {"mimeType", "image/png"}});
    Json out = result;
    out.erase("png");
    out["bytes"] = bytes->size();
    return out;
}

Result<Json> run_action(const Json& args, ToolContext& ctx) {
    auto answer =
        call_json(ctx.api, post(sandbox_path(args, "/desktop/actions"), body_of(args)), kMaxActionAnswer);
    if (!answer) {
        return answer.error();
    }
    Json result = member(*answer, "result");
    if (!result.is_object()) {
        return make_coded_error("bad_response", "no result in sbxd's answer to {}",
                                args["action"].get<std::string>());
    }
    if (result.contains("png")) {
        auto image = image_result(result, ctx);
        if (!image) {
            return image.error();
        }
        result = std::move(*image);
    }
    return Json{{"action", args["action"]}, {"result", std::move(result)}};
}

}  // namespace

void add_desktop_tools(std::vector<ToolSpec>& tools) {
    tools.push_back(ToolSpec{
        "desktop_start", "Start a sandbox's desktop",
        "Starts a graphical desktop in the sandbox (XFCE on display :1, 1280x800, unless said) unless one "
        "runs, and returns it: url opens it in a person's browser with mouse and keyboard, viewOnlyUrl only "
        "shows it. Then desktop_action drives it. Needs an image with the desktop (the default one).",
        schema(with_id(R"js(,
          "display":{"type":"integer","minimum":0,"maximum":99,"description":"X display number (default 1)"},
          "width":{"type":"integer","minimum":64,"maximum":8192,"description":"Screen width in pixels (default 1280)"},
          "height":{"type":"integer","minimum":64,"maximum":8192,"description":"Screen height in pixels (default 800)"})js")
                   .c_str()),
        schema(kDesktopOut), hints(false, false, true),
        [](const Json& args, ToolContext& ctx) -> Result<Json> {
            auto answer = call_json(ctx.api, post(sandbox_path(args, "/desktop"), body_of(args)));
            if (!answer) {
                return answer.error();
            }
            return keep(*answer, {"desktop", "warnings"});
        }});
    tools.push_back(ToolSpec{
        "desktop_status", "Show a sandbox's desktop",
        "Whether the sandbox's desktop runs, its display and size, and its links (url, viewOnlyUrl).",
        schema(with_id("").c_str()), schema(kDesktopOut), hints(true, false, true),
        [](const Json& args, ToolContext& ctx) -> Result<Json> {
            auto answer = call_json(ctx.api, get(sandbox_path(args, "/desktop")));
            if (!answer) {
                return answer.error();
            }
            return keep(*answer, {"desktop"});
        }});
    tools.push_back(ToolSpec{
        "desktop_action", "Use a sandbox's desktop",
        "One action on the sandbox's running desktop (desktop_start first), with the names and fields of "
        "Anthropic's computer-use tool: screenshot (returned as a PNG image), zoom (region, at full "
        "resolution), mouse_move, left_click, right_click, middle_click, double_click, triple_click, "
        "left_click_drag (start_coordinate to coordinate), left_mouse_down, left_mouse_up, scroll "
        "(scroll_direction, scroll_amount), type (text), key (text, e.g. ctrl+s), hold_key (text, duration), "
        "cursor_position, wait (duration). Coordinates are the screen's pixels.",
        schema(with_id(kActionFields, R"(["sandbox","action"])").c_str()), schema(kActionOut),
        hints(false, true, false), run_action});
}

}  // namespace sbx::mcp
