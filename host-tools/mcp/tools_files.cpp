// Files in a sandbox (docs/api.md "Files"): whole files up to 5 MiB as
// text or base64, and directory listings. A stopped sandbox's files are
// read from its disk without starting it.
#include <fmt/format.h>

#include "base/base64.hpp"
#include "host-tools/mcp/schema_check.hpp"
#include "host-tools/mcp/tools.hpp"

namespace sbx::mcp {

namespace {

constexpr std::size_t kMaxFile = 5 * 1024 * 1024;

std::string files_path(const Json& args, std::string_view route) {
    return sandbox_path(args, fmt::format("/files{}?path={}", route, url_encode(args.at("path").get<std::string>())));
}

Result<Json> read_file(const Json& args, ToolContext& ctx) {
    auto stat = call_json(ctx.api, get(files_path(args, "/stat")));
    if (!stat) {
        return stat.error();
    }
    const Json info = member(*stat, "stat");
    if (info.value("type", "") != "file") {
        return make_coded_error("invalid_argument", "{} is a {}, not a file (list_files reads a directory)",
                                args["path"].get<std::string>(), info.value("type", "?"));
    }
    if (info.value("size", std::uint64_t{0}) > kMaxFile) {
        return make_coded_error("too_large", "{} is {} bytes; read_file takes files up to {} bytes (use exec to "
                                "look at a part, or sbx scp)", args["path"].get<std::string>(),
                                info.value("size", std::uint64_t{0}), kMaxFile);
    }
    auto bytes = call_bytes(ctx.api, get(files_path(args, "")), kMaxFile);
    if (!bytes) {
        return bytes.error();
    }
    std::string encoding = args.value("encoding", "");
    if (encoding.empty()) {
        encoding = is_utf8(*bytes) ? "text" : "base64";
    } else if (encoding == "text" && !is_utf8(*bytes)) {
        return make_coded_error("invalid_argument", "{} is not UTF-8 text: read it with encoding base64",
                                args["path"].get<std::string>());
    }
    return Json{{"path", args["path"]},
                {"size", bytes->size()},
                {"encoding", encoding},
                {"content", encoding == "text" ? *bytes : base64_encode(*bytes)}};
}

Result<Json> write_file(const Json& args, ToolContext& ctx) {
    std::string bytes = args["content"].get<std::string>();
    if (args.value("encoding", "text") == "base64") {
        auto decoded = base64_decode(bytes);
        if (!decoded) {
            return make_coded_error("invalid_argument", "content: {}", decoded.error().message);
        }
        bytes = std::move(*decoded);
    }
    if (bytes.size() > kMaxFile) {
        return make_coded_error("too_large", "write_file takes up to {} bytes; this is {}", kMaxFile, bytes.size());
    }
    std::string target = files_path(args, "");
    if (args.contains("mode")) {
        target += "&mode=" + url_encode(args["mode"].get<std::string>());
    }
    const std::size_t size = bytes.size();
    auto answer = call_json(ctx.api, ApiCall{"PUT", target, std::move(bytes), {{"Content-Type", "application/octet-stream"}}});
    if (!answer) {
        return answer.error();
    }
    return Json{{"path", args["path"]}, {"bytes", answer->value("bytes", size)}};
}

Result<Json> list_files(const Json& args, ToolContext& ctx) {
    auto answer = call_json(ctx.api, get(files_path(args, "/list")));
    if (!answer) {
        return answer.error();
    }
    return Json{{"path", args["path"]}, {"entries", member(*answer, "entries")}};
}

constexpr const char* kPath = R"("path":{"type":"string","minLength":1,"description":"An absolute path in the sandbox"})";

}  // namespace

void add_file_tools(std::vector<ToolSpec>& tools) {
    tools.push_back(ToolSpec{
        "read_file", "Read a file",
        "A file of the sandbox, up to 5 MiB: as text when it is UTF-8, else base64 (or as asked). Works on a "
        "stopped sandbox too.",
        schema(fmt::format(R"({{"type":"object","additionalProperties":false,"required":["sandbox","path"],"properties":{{
          "sandbox":{{"type":"string","minLength":1}},{},
          "encoding":{{"type":"string","enum":["text","base64"]}}}}}})", kPath).c_str()),
        schema(R"({"type":"object","required":["path","size","encoding","content"],"properties":{
          "path":{"type":"string"},"size":{"type":"integer"},"encoding":{"type":"string","enum":["text","base64"]},
          "content":{"type":"string"}}})"),
        hints(true, false, true), read_file});
    tools.push_back(ToolSpec{
        "write_file", "Write a file",
        "Creates or replaces a file (up to 5 MiB) in the sandbox, atomically; its directory must exist (exec "
        "mkdir -p first). Binary content as base64 with encoding base64.",
        schema(fmt::format(R"({{"type":"object","additionalProperties":false,"required":["sandbox","path","content"],"properties":{{
          "sandbox":{{"type":"string","minLength":1}},{},
          "content":{{"type":"string"}},
          "encoding":{{"type":"string","enum":["text","base64"],"description":"How content is given (default text)."}},
          "mode":{{"type":"string","minLength":1,"maxLength":4,"description":"Octal permissions, e.g. 0755 (default 0644)."}}}}}})",
                           kPath).c_str()),
        schema(R"({"type":"object","required":["path","bytes"],"properties":{"path":{"type":"string"},"bytes":{"type":"integer"}}})"),
        hints(false, true, true), write_file});
    tools.push_back(ToolSpec{
        "list_files", "List a directory",
        "The entries of a directory of the sandbox: name, type, size, mode, mtime. Works on a stopped sandbox too.",
        schema(fmt::format(R"({{"type":"object","additionalProperties":false,"required":["sandbox","path"],"properties":{{
          "sandbox":{{"type":"string","minLength":1}},{}}}}})", kPath).c_str()),
        schema(R"({"type":"object","required":["path","entries"],"properties":{"path":{"type":"string"},
          "entries":{"type":"array","items":{"type":"object"}}}})"),
        hints(true, false, true), list_files});
}

}  // namespace sbx::mcp
