#include "host-tools/sbx-vmm/control_request.hpp"

#include <filesystem>
#include <limits>
#include <system_error>

namespace sbx {

namespace {

using nlohmann::json;

Error bad_request(std::string message) { return make_error(std::move(message)).with_code("bad_request"); }

// An integer field in [min, max], `fallback` when absent. JSON numbers with
// a fraction or an exponent are not integers here, whatever their value.
Result<std::uint64_t> uint_field(const json& request, const char* name, std::uint64_t fallback, std::uint64_t min,
                                 std::uint64_t max) {
    auto it = request.find(name);
    if (it == request.end()) {
        return fallback;
    }
    std::uint64_t value = 0;
    if (it->is_number_unsigned()) {
        value = it->get<std::uint64_t>();
    } else if (it->is_number_integer()) {  // negative: signed only
        return make_coded_error("bad_request", "\"{}\" is {}..{}, not {}", name, min, max, it->get<std::int64_t>());
    } else {
        return make_coded_error("bad_request", "\"{}\" must be an integer {}..{}", name, min, max);
    }
    if (value < min || value > max) {
        return make_coded_error("bad_request", "\"{}\" is {}..{}, not {}", name, min, max, value);
    }
    return value;
}

Result<bool> bool_field(const json& request, const char* name, bool fallback) {
    auto it = request.find(name);
    if (it == request.end()) {
        return fallback;
    }
    if (!it->is_boolean()) {
        return make_coded_error("bad_request", "\"{}\" must be true or false", name);
    }
    return it->get<bool>();
}

// The path as it will be written: the parent directory resolved (`..`,
// symlinks), which must be the snapshot directory or below it; the last
// component must name a file. A relative path is relative to the snapshot
// directory. The check is not a sandbox against the socket's own user
// (only that user may connect): it keeps a client from writing, by
// mistake or through a forwarded request, anywhere sbx-vmm may write.
Result<std::string> resolve_path(const std::string& requested, const std::string& dir) {
    if (requested.empty() || requested.size() > SnapshotRequest::kMaxPath ||
        requested.find('\0') != std::string::npos) {
        return make_coded_error("bad_request", "\"path\" must be 1..{} bytes without NUL", SnapshotRequest::kMaxPath);
    }
    const std::string full = requested.front() == '/' ? requested : dir + "/" + requested;
    const auto slash = full.rfind('/');
    const std::string parent = slash == 0 ? std::string("/") : full.substr(0, slash);
    const std::string name = full.substr(slash + 1);
    if (name.empty() || name == "." || name == "..") {
        return make_coded_error("bad_request", "\"path\" must end in a file name");
    }
    std::error_code ec;
    const auto canonical = std::filesystem::canonical(parent, ec);
    if (ec) {
        return make_coded_error("bad_request", "\"path\": its directory {}: {}", parent, ec.message());
    }
    const std::string resolved = canonical.string();
    const bool inside = dir == "/" || resolved == dir || resolved.starts_with(dir + "/");
    if (!inside) {
        return make_coded_error("bad_request", "\"path\" must be inside the snapshot directory {}", dir);
    }
    return (resolved == "/" ? std::string() : resolved) + "/" + name;
}

}  // namespace

Result<std::string> request_op(const json& request) {
    auto it = request.find("op");
    if (it == request.end() || !it->is_string()) {
        return bad_request("a request needs \"op\", a string");
    }
    return it->get<std::string>();
}

Result<std::string> canonical_snapshot_dir(const std::string& dir) {
    std::error_code ec;
    const auto canonical = std::filesystem::canonical(dir, ec);
    if (ec) {
        return make_error("snapshot directory {}: {}", dir, ec.message());
    }
    if (!std::filesystem::is_directory(canonical, ec)) {
        return make_error("snapshot directory {} is not a directory", dir);
    }
    return canonical.string();
}

Result<SnapshotRequest> parse_snapshot_request(const json& request, const std::string& snapshot_dir) {
    if (snapshot_dir.empty()) {
        return make_coded_error("snapshot_dir_unset", "snapshots are off: sbx-vmm was started without --snapshot-dir");
    }
    SnapshotRequest out;
    auto path = request.find("path");
    if (path == request.end() || !path->is_string()) {
        return bad_request("snapshot needs \"path\", a string");
    }
    auto resolved = resolve_path(path->get<std::string>(), snapshot_dir);
    if (!resolved) {
        return resolved.error();
    }
    out.path = std::move(*resolved);
    if (auto mode = request.find("mode"); mode != request.end()) {
        if (!mode->is_string() || (*mode != "raw" && *mode != "compressed")) {
            return bad_request("\"mode\" is \"compressed\" or \"raw\"");
        }
        out.raw = *mode == "raw";
    }
    auto level = uint_field(request, "level", 1, SnapshotRequest::kMinLevel, SnapshotRequest::kMaxLevel);
    auto threads = uint_field(request, "threads", 0, 0, SnapshotRequest::kMaxThreads);
    auto window = uint_field(request, "working_set_ms", 0, 0, SnapshotRequest::kMaxWorkingSetMs);
    auto resume = bool_field(request, "resume", false);
    for (const Error* e : {level ? nullptr : &level.error(), threads ? nullptr : &threads.error(),
                           window ? nullptr : &window.error(), resume ? nullptr : &resume.error()}) {
        if (e != nullptr) {
            return *e;
        }
    }
    out.level = static_cast<int>(*level);
    out.threads = static_cast<unsigned>(*threads);
    out.working_set_ms = *window;
    out.resume = *resume;
    return out;
}

}  // namespace sbx
