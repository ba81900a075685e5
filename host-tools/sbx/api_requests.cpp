#include "host-tools/sbx/api_requests.hpp"

#include <boost/url/url.hpp>

#include <charconv>

#include "base/base64.hpp"

namespace sbx::cli {

namespace {

Error usage(std::string message) {
    return Error{std::move(message), 0, "usage"};
}

// A whole decimal number followed by a unit from `units` (or none: the
// first unit's scale). Units are matched case-insensitively.
struct Unit {
    std::string_view name;
    std::uint64_t scale;
};
Result<std::uint64_t> parse_scaled(std::string_view text, std::string_view what,
                                   std::initializer_list<Unit> units, std::uint64_t bare_scale) {
    std::uint64_t number = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
    if (ec != std::errc() || end == text.data()) {
        return usage(fmt::format("{} '{}': want a number", what, std::string(text)));
    }
    std::string unit(end, text.data() + text.size());
    for (char& c : unit) {
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    std::uint64_t scale = unit.empty() ? bare_scale : 0;
    for (const Unit& u : units) {
        if (unit == u.name) {
            scale = u.scale;
        }
    }
    if (scale == 0) {
        return usage(fmt::format("{} '{}': unknown unit '{}'", what, std::string(text), unit));
    }
    if (number > UINT64_MAX / scale) {
        return usage(fmt::format("{} '{}': too large", what, std::string(text)));
    }
    return number * scale;
}

}  // namespace

Result<std::pair<std::string, std::string>> parse_assignment(std::string_view text, std::string_view what) {
    auto eq = text.find('=');
    if (eq == std::string_view::npos || eq == 0) {
        return usage(fmt::format("{} '{}': want KEY=VALUE", what, std::string(text)));
    }
    return std::pair{std::string(text.substr(0, eq)), std::string(text.substr(eq + 1))};
}

Result<std::map<std::string, std::string>> parse_assignments(const std::vector<std::string>& items,
                                                             std::string_view what) {
    std::map<std::string, std::string> out;
    for (const auto& item : items) {
        auto pair = parse_assignment(item, what);
        if (!pair) {
            return pair.error();
        }
        if (!out.emplace(pair->first, pair->second).second) {
            return usage(fmt::format("{} {} given twice", what, pair->first));
        }
    }
    return out;
}

Result<std::map<std::string, std::string>> parse_env(
    const std::vector<std::string>& items,
    const std::function<std::optional<std::string>(const std::string&)>& lookup) {
    std::vector<std::string> assignments;
    for (const auto& item : items) {
        if (item.find('=') != std::string::npos) {
            assignments.push_back(item);
            continue;
        }
        auto value = item.empty() ? std::nullopt : lookup(item);
        if (!value) {
            return usage(fmt::format("-e '{}': want K=V, or K set in this environment", item));
        }
        assignments.push_back(item + "=" + *value);
    }
    return parse_assignments(assignments, "-e");
}

Result<std::uint64_t> parse_timeout_ms(std::string_view text) {
    return parse_scaled(text, "--timeout", {{"ms", 1}, {"s", 1000}, {"m", 60'000}, {"h", 3'600'000}}, 1000);
}

Result<std::uint64_t> parse_memory_mib(std::string_view text) {
    return parse_scaled(text, "--memory", {{"m", 1}, {"mib", 1}, {"g", 1024}, {"gib", 1024}}, 1);
}

Result<std::uint64_t> parse_disk_gib(std::string_view text) {
    return parse_scaled(text, "--disk", {{"g", 1}, {"gib", 1}}, 1);
}

Result<std::uint64_t> parse_byte_count(std::string_view text, std::string_view what) {
    constexpr std::uint64_t kKib = 1 << 10, kMib = 1 << 20, kGib = 1 << 30;
    return parse_scaled(
        text, what, {{"k", kKib}, {"kib", kKib}, {"m", kMib}, {"mib", kMib}, {"g", kGib}, {"gib", kGib}}, 1);
}

Result<Json> ttl_body(std::string_view value) {
    if (value == "off") {
        return Json{{"noAutoStop", true}};
    }
    auto seconds = parse_scaled(value, "ttl", {{"s", 1}, {"m", 60}, {"h", 3600}, {"d", 86'400}}, 1);
    if (!seconds) {
        return seconds.error();
    }
    return Json{{"ttl", *seconds}};  // sbxd checks the range
}

Result<Json> key_body(const KeyOptions& options) {
    Json body = Json::object();
    if (!options.name.empty()) {
        body["name"] = options.name;
    }
    if (!options.sandbox.empty()) {
        body["sandboxId"] = options.sandbox;
    }
    if (options.read_only) {
        body["readOnly"] = true;
    }
    if (!options.expires.empty()) {
        auto seconds =
            parse_scaled(options.expires, "--expires", {{"s", 1}, {"m", 60}, {"h", 3600}, {"d", 86'400}}, 1);
        if (!seconds) {
            return seconds.error();
        }
        body["expiresInSeconds"] = *seconds;  // sbxd checks the range
    }
    return body;
}

Result<Json> egress_body(std::string_view value) {
    if (value == "internet" || value == "deny-all") {
        return Json{{"egress", value}};
    }
    Json networks = Json::array();
    std::string_view rest = value;
    while (!rest.empty()) {
        const auto comma = rest.find(',');
        if (comma != 0) {
            networks.push_back(std::string(rest.substr(0, comma)));
        }
        rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    }
    if (networks.empty()) {
        return usage(fmt::format("egress '{}': internet, deny-all, or networks like 203.0.113.0/24,198.51.100.7/32",
                                 value));
    }
    return Json{{"egress", "allow-list"}, {"egressAllow", std::move(networks)}};
}

Result<Json> idle_body(std::string_view value) {
    if (value == "off") {
        return Json{{"idleMinutes", 0}};
    }
    auto minutes = parse_scaled(value, "idle", {}, 1);
    if (!minutes) {
        return minutes.error();
    }
    return Json{{"idleMinutes", *minutes}};
}

Result<Json> create_body(const CreateOptions& options,
                         const std::function<std::optional<std::string>(const std::string&)>& env_lookup) {
    Json body = Json::object();
    if (!options.size.empty()) {
        body["size"] = options.size;
    }
    if (options.cpus != 0) {
        body["cpus"] = options.cpus;
    }
    if (!options.memory.empty()) {
        auto mib = parse_memory_mib(options.memory);
        if (!mib) {
            return mib.error();
        }
        body["memoryMib"] = *mib;
    }
    if (!options.disk.empty()) {
        auto gib = parse_disk_gib(options.disk);
        if (!gib) {
            return gib.error();
        }
        body["diskGib"] = *gib;
    }
    if (!options.from.empty()) {
        body["from"] = options.from;
    }
    if (!options.labels.empty()) {
        auto labels = parse_assignments(options.labels, "--label");
        if (!labels) {
            return labels.error();
        }
        body["labels"] = *labels;
    }
    if (!options.env.empty()) {
        auto env = parse_env(options.env, env_lookup);
        if (!env) {
            return env.error();
        }
        body["env"] = *env;
    }
    if (options.no_env) {
        body["noEnv"] = true;
    }
    if (options.idle_minutes) {
        body["idleMinutes"] = *options.idle_minutes;
    }
    if (!options.ttl.empty() && options.no_auto_stop) {
        return usage("--ttl and --no-auto-stop exclude each other");
    }
    if (!options.ttl.empty()) {
        body["ttl"] = options.ttl;
    }
    if (options.no_auto_stop) {
        body["noAutoStop"] = true;
    }
    if (options.cold) {
        body["cold"] = true;
    }
    if (!options.egress.empty()) {
        auto egress = egress_body(options.egress);
        if (!egress) {
            return egress.error();
        }
        body.update(*egress);
    }
    return body;
}

Result<Json> exec_body(const ExecOptions& options,
                       const std::function<std::optional<std::string>(const std::string&)>& env_lookup) {
    if (options.command.empty()) {
        return usage("exec: no command (sbx exec ID -- CMD...)");
    }
    Json body = {{"command", options.command}};
    if (!options.env.empty()) {
        auto env = parse_env(options.env, env_lookup);
        if (!env) {
            return env.error();
        }
        body["env"] = *env;
    }
    if (!options.cwd.empty()) {
        body["cwd"] = options.cwd;
    }
    if (!options.user.empty()) {
        body["user"] = options.user;
    }
    if (!options.timeout.empty()) {
        auto ms = parse_timeout_ms(options.timeout);
        if (!ms) {
            return ms.error();
        }
        body["timeoutMs"] = *ms;
    }
    if (options.stdin_bytes) {
        body["stdin"] = base64_encode(*options.stdin_bytes);
    }
    if (options.detach) {
        body["detach"] = true;
    }
    return body;
}

std::string target(std::initializer_list<std::string_view> segments,
                   const std::vector<std::pair<std::string, std::string>>& query) {
    boost::urls::url url;
    url.set_path_absolute(true);
    auto path = url.segments();
    for (std::string_view segment : segments) {
        path.push_back(segment);
    }
    auto params = url.params();
    for (const auto& [key, value] : query) {
        params.append({key, value});
    }
    return std::string(url.buffer());
}

Result<std::string> list_target(const std::vector<std::string>& labels,
                                const std::vector<std::string>& states) {
    std::vector<std::pair<std::string, std::string>> query;
    std::string joined;
    for (const auto& label : labels) {
        auto pair = parse_assignment(label, "--label");
        if (!pair) {
            return pair.error();
        }
        joined += (joined.empty() ? "" : ",") + label;
    }
    if (!joined.empty()) {
        query.emplace_back("labels", joined);
    }
    joined.clear();
    for (const auto& state : states) {
        joined += (joined.empty() ? "" : ",") + state;
    }
    if (!joined.empty()) {
        query.emplace_back("state", joined);
    }
    return target({"v1", "sandboxes"}, query);
}

Result<CopyEnd> parse_copy_end(std::string_view text) {
    if (text.empty()) {
        return usage("scp: an empty path");
    }
    auto colon = text.find(':');
    auto slash = text.find('/');
    if (colon == std::string_view::npos || colon == 0 || (slash != std::string_view::npos && slash < colon)) {
        return CopyEnd{"", std::string(text)};
    }
    std::string_view path = text.substr(colon + 1);
    if (!path.starts_with('/')) {
        return usage(
            fmt::format("scp '{}': the sandbox's path must be absolute (ID:/path)", std::string(text)));
    }
    return CopyEnd{std::string(text.substr(0, colon)), std::string(path)};
}

std::string copy_destination(std::string_view from, std::string_view to, bool to_is_dir) {
    if (!to.ends_with('/') && !to_is_dir) {
        return std::string(to);
    }
    while (from.size() > 1 && from.ends_with('/')) {
        from.remove_suffix(1);
    }
    auto slash = from.rfind('/');
    std::string_view base = slash == std::string_view::npos ? from : from.substr(slash + 1);
    std::string out(to);
    if (!out.ends_with('/')) {
        out += '/';
    }
    return out + std::string(base);
}

std::string tree_destination(std::string_view from, std::string_view to, bool to_is_dir) {
    while (to.size() > 1 && to.ends_with('/')) {
        to.remove_suffix(1);
    }
    while (from.size() > 1 && from.ends_with('/')) {
        from.remove_suffix(1);
    }
    const auto slash = from.rfind('/');
    const std::string_view base = slash == std::string_view::npos ? from : from.substr(slash + 1);
    if (!to_is_dir || base.empty() || base == "." || base == "..") {
        return std::string(to);
    }
    return std::string(to) + (to.ends_with('/') ? "" : "/") + std::string(base);
}

std::string base64_encode(std::string_view bytes) {
    return sbx::base64_encode(bytes);
}

Result<std::string> base64_decode(std::string_view text) {
    auto bytes = sbx::base64_decode(text);
    if (!bytes) {
        return bytes.error().with_code("bad_response");
    }
    return bytes;
}

}  // namespace sbx::cli
