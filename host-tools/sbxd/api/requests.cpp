#include "host-tools/sbxd/api/requests.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>

#include "host-tools/sbxd/api/fields.hpp"

// Binds var to the Result of expr, returning its error from the caller.
#define SBXD_TRY(var, expr) \
    auto var = (expr);      \
    if (!var) {             \
        return var.error(); \
    }

namespace sbx::sbxd::api {

namespace {

// "egress": "internet" | "deny-all" | "allow-list", with "egressAllow":
// [networks] for the last (and only for it); egressAllow alone implies
// allow-list. Absent: internet.
Result<net::Egress> read_egress(Fields& f) {
    SBXD_TRY(mode, f.string("egress"));
    SBXD_TRY(allow, f.string_list("egressAllow"));
    const std::string name = mode->value_or(*allow ? "allow-list" : "internet");
    if (name == "allow-list") {
        if (!*allow) {
            return invalid_argument("egress allow-list needs egressAllow: the networks, e.g. [\"203.0.113.0/24\"]");
        }
        auto listed = net::egress_allow_list(**allow);
        if (!listed) {
            return invalid_argument(fmt::format("egressAllow: {}", listed.error().to_string()));
        }
        return *listed;
    }
    if (*allow) {
        return invalid_argument(fmt::format("egressAllow goes with egress allow-list, not {}", name));
    }
    if (name != "internet" && name != "deny-all") {
        return invalid_argument(fmt::format("egress '{}' must be internet, deny-all or allow-list", name));
    }
    return name == "deny-all" ? net::Egress::deny_all() : net::Egress{};
}

bool is_lower_alnum(char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

// Label keys: 1-63 of [a-z0-9._/-] starting with a letter or digit; values
// up to 255 printable characters without ',' and '=' (the list selector's
// separators).
Result<void> check_labels(const StringMap& labels) {
    if (labels.size() > kMaxLabels) {
        return invalid_argument(fmt::format("at most {} labels, not {}", kMaxLabels, labels.size()));
    }
    for (const auto& [key, value] : labels) {
        bool key_ok = !key.empty() && key.size() <= 63 && is_lower_alnum(key[0]) &&
                      std::all_of(key.begin(), key.end(), [](char c) {
                          return is_lower_alnum(c) || c == '.' || c == '_' || c == '/' || c == '-';
                      });
        if (!key_ok) {
            return invalid_argument(fmt::format(
                "label key '{}' must be 1-63 of a-z 0-9 . _ / - starting with a letter or digit", key));
        }
        bool value_ok = value.size() <= 255 && std::all_of(value.begin(), value.end(), [](char c) {
                            auto u = static_cast<unsigned char>(c);
                            return u >= 0x20 && u != 0x7f && c != ',' && c != '=';
                        });
        if (!value_ok) {
            return invalid_argument(fmt::format(
                "label {}'s value must be at most 255 printable characters without ',' or '='", key));
        }
    }
    return ok();
}

Result<void> check_size_name(const std::optional<std::string>& size) {
    if (size && !find_size(*size)) {
        return invalid_argument(fmt::format("size must be small, default, large or xlarge, not '{}'", *size));
    }
    return ok();
}

template <typename T>
std::optional<int> as_int(const std::optional<T>& v) {
    if (!v) {
        return std::nullopt;
    }
    return static_cast<int>(*v);
}

std::vector<std::string_view> split(std::string_view text, char separator) {
    std::vector<std::string_view> parts;
    for (;;) {
        auto at = text.find(separator);
        parts.push_back(text.substr(0, at));
        if (at == std::string_view::npos) {
            return parts;
        }
        text.remove_prefix(at + 1);
    }
}

}  // namespace

// Environment names as POSIX shells take them; SANDBOXER_* is sbxd's own
// (the identity in /etc/sandboxer/env).
Result<void> check_env(const StringMap& env) {
    if (env.size() > kMaxEnvVars) {
        return invalid_argument(fmt::format("at most {} env variables, not {}", kMaxEnvVars, env.size()));
    }
    std::size_t bytes = 0;
    for (const auto& [key, value] : env) {
        bool key_ok = !key.empty() && key.size() <= 128 &&
                      (std::isalpha(static_cast<unsigned char>(key[0])) != 0 || key[0] == '_') &&
                      std::all_of(key.begin(), key.end(), [](char c) {
                          return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
                      });
        if (!key_ok) {
            return invalid_argument(
                fmt::format("env name '{}' must be letters, digits and _, not starting with a digit", key));
        }
        if (key.rfind("SANDBOXER_", 0) == 0) {
            return invalid_argument(fmt::format("env name '{}': SANDBOXER_ variables are set by sbxd", key));
        }
        if (value.find('\0') != std::string::npos) {
            return invalid_argument(fmt::format("env {}'s value contains a NUL byte", key));
        }
        // /etc/sandboxer/env holds one KEY=VALUE per line, taken literally,
        // and systemd's EnvironmentFile strips trailing blanks (images/README.md).
        if (value.find_first_of("\n\r") != std::string::npos) {
            return invalid_argument(fmt::format("env {}'s value contains a line break", key));
        }
        if (!value.empty() && (value.back() == ' ' || value.back() == '\t')) {
            return invalid_argument(fmt::format("env {}'s value ends in a blank", key));
        }
        bytes += key.size() + value.size() + 2;
    }
    if (bytes > kMaxEnvBytes) {
        return invalid_argument(fmt::format("env is {} bytes, more than {}", bytes, kMaxEnvBytes));
    }
    return ok();
}

bool is_valid_name(std::string_view name) {
    return !name.empty() && name.size() <= 63 && is_lower_alnum(name[0]) &&
           std::all_of(name.begin(), name.end(),
                       [](char c) { return is_lower_alnum(c) || c == '.' || c == '_' || c == '-'; });
}

Result<std::int64_t> parse_duration(std::string_view text) {
    if (text.empty()) {
        return invalid_argument("ttl must be a duration such as 90m, 2h30m or 7d");
    }
    std::int64_t total = 0;
    std::string_view rest = text;
    while (!rest.empty()) {
        std::int64_t number = 0;
        auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), number);
        if (ec != std::errc() || end == rest.data() + rest.size()) {
            return invalid_argument(
                fmt::format("ttl '{}' must be numbers with units s, m, h or d (e.g. 2h30m)", text));
        }
        std::int64_t unit = 0;
        switch (*end) {
            case 's':
                unit = 1;
                break;
            case 'm':
                unit = 60;
                break;
            case 'h':
                unit = 3600;
                break;
            case 'd':
                unit = 86400;
                break;
            default:
                return invalid_argument(
                    fmt::format("ttl '{}': unknown unit '{}' (s, m, h or d)", text, *end));
        }
        if (number < 0 || number > kMaxTtlSeconds) {
            return invalid_argument(fmt::format("ttl '{}' is longer than 30 days", text));
        }
        total += number * unit;
        if (total > kMaxTtlSeconds) {
            return invalid_argument(fmt::format("ttl '{}' is longer than 30 days", text));
        }
        rest.remove_prefix(static_cast<std::size_t>(end - rest.data()) + 1);
    }
    return total;
}

Result<CreateRequest> parse_create(std::string_view body, std::int64_t min_ttl_seconds) {
    SBXD_TRY(json, parse_body(body));
    Fields f(*json);
    CreateRequest r;
    SBXD_TRY(size, f.string("size"));
    SBXD_TRY(cpus, f.integer("cpus", 1, 256));
    SBXD_TRY(memory, f.integer("memoryMib", 1, 16 * 1024 * 1024));
    SBXD_TRY(disk, f.integer("diskGib", 1, 64 * 1024));
    SBXD_TRY(from, f.string("from"));
    SBXD_TRY(labels, f.string_map("labels"));
    SBXD_TRY(env, f.string_map("env"));
    SBXD_TRY(no_env, f.boolean("noEnv"));
    SBXD_TRY(idle, f.integer("idleMinutes", 0, kMaxIdleMinutes));
    SBXD_TRY(ttl, f.string("ttl"));
    SBXD_TRY(no_auto_stop, f.boolean("noAutoStop"));
    SBXD_TRY(cold, f.boolean("cold"));
    SBXD_TRY(egress, read_egress(f));
    if (auto done = f.finish(); !done) {
        return done.error();
    }
    r.egress = std::move(*egress);
    if (auto c = check_size_name(*size); !c) {
        return c.error();
    }
    r.size = *size;
    r.cpus = as_int(*cpus);
    r.memory_mib = as_int(*memory);
    r.disk_gib = as_int(*disk);
    if (*from && !is_valid_name(**from)) {
        return invalid_argument(fmt::format(
            "from '{}' must name an image or snapshot: 1-63 of a-z 0-9 . _ - starting with a letter or digit",
            **from));
    }
    r.from = *from;
    r.labels = labels->value_or(StringMap{});
    if (auto c = check_labels(r.labels); !c) {
        return c.error();
    }
    r.env = env->value_or(StringMap{});
    if (auto c = check_env(r.env); !c) {
        return c.error();
    }
    r.no_env = no_env->value_or(false);
    if (*idle && **idle > 0) {
        r.idle_minutes = static_cast<int>(**idle);
    }
    r.no_auto_stop = no_auto_stop->value_or(false);
    r.cold = cold->value_or(false);
    if (*ttl) {
        if (r.no_auto_stop) {
            return invalid_argument("ttl and noAutoStop exclude each other");
        }
        SBXD_TRY(seconds, parse_duration(**ttl));
        if (*seconds < min_ttl_seconds) {
            return invalid_argument(fmt::format("ttl '{}' is shorter than {} s", **ttl, min_ttl_seconds));
        }
        r.ttl_seconds = *seconds;
    }
    return r;
}

Result<StopRequest> parse_stop(std::string_view body) {
    SBXD_TRY(json, parse_body(body));
    Fields f(*json);
    SBXD_TRY(memory, f.boolean("memory"));
    if (auto done = f.finish(); !done) {
        return done.error();
    }
    return StopRequest{memory->value_or(true)};
}

Result<TtlRequest> parse_ttl(std::string_view body, std::int64_t min_ttl_seconds) {
    SBXD_TRY(json, parse_body(body));
    Fields f(*json);
    SBXD_TRY(ttl, f.integer("ttl", 1, kMaxTtlSeconds));
    SBXD_TRY(no_auto_stop, f.boolean("noAutoStop"));
    if (auto done = f.finish(); !done) {
        return done.error();
    }
    TtlRequest r;
    r.no_auto_stop = no_auto_stop->value_or(false);
    if (*ttl) {
        if (r.no_auto_stop) {
            return invalid_argument("ttl and noAutoStop exclude each other");
        }
        if (**ttl < min_ttl_seconds) {
            return invalid_argument(fmt::format("ttl {} is shorter than {} s", **ttl, min_ttl_seconds));
        }
        r.ttl_seconds = **ttl;
    }
    return r;
}

Result<IdleRequest> parse_idle(std::string_view body) {
    SBXD_TRY(json, parse_body(body));
    // Present, even as null: an empty body is more likely a mistake than "off".
    const bool given = json->contains("idleMinutes");
    Fields f(*json);
    SBXD_TRY(idle, f.integer("idleMinutes", 0, kMaxIdleMinutes));
    if (auto done = f.finish(); !done) {
        return done.error();
    }
    if (!given) {
        return invalid_argument("idleMinutes is required: minutes, or 0 or null to turn the idle pause off");
    }
    IdleRequest r;
    if (*idle && **idle > 0) {
        r.idle_minutes = static_cast<int>(**idle);
    }
    return r;
}

Result<EgressRequest> parse_egress_request(std::string_view body) {
    SBXD_TRY(json, parse_body(body));
    // Required: an empty body is more likely a mistake than "internet".
    if (!json->contains("egress") && !json->contains("egressAllow")) {
        return invalid_argument("egress is required: internet, deny-all, or allow-list with egressAllow");
    }
    Fields f(*json);
    SBXD_TRY(egress, read_egress(f));
    if (auto done = f.finish(); !done) {
        return done.error();
    }
    return EgressRequest{std::move(*egress)};
}

Result<ResumeRequest> parse_resume(std::string_view body) {
    SBXD_TRY(json, parse_body(body));
    Fields f(*json);
    SBXD_TRY(size, f.string("size"));
    SBXD_TRY(disk, f.integer("diskGib", 1, 64 * 1024));
    if (auto done = f.finish(); !done) {
        return done.error();
    }
    if (auto c = check_size_name(*size); !c) {
        return c.error();
    }
    ResumeRequest r{*size};
    if (*disk) {
        r.disk_gib = as_int(*disk);
    }
    return r;
}

Result<ForkRequest> parse_fork(std::string_view body) {
    SBXD_TRY(json, parse_body(body));
    Fields f(*json);
    SBXD_TRY(count, f.integer("count", 1, kMaxForkCount));
    SBXD_TRY(memory, f.boolean("memory"));
    if (auto done = f.finish(); !done) {
        return done.error();
    }
    return ForkRequest{static_cast<int>(count->value_or(1)), memory->value_or(true)};
}

Result<SnapshotRequest> parse_snapshot(std::string_view body) {
    SBXD_TRY(json, parse_body(body));
    Fields f(*json);
    SBXD_TRY(name, f.string("name"));
    if (auto done = f.finish(); !done) {
        return done.error();
    }
    if (!*name) {
        return invalid_argument("name is required");
    }
    if (!is_valid_name(**name)) {
        return invalid_argument(fmt::format(
            "snapshot name '{}' must be 1-63 of a-z 0-9 . _ - starting with a letter or digit", **name));
    }
    return SnapshotRequest{**name};
}

Result<KeyCreateRequest> parse_key_create(std::string_view body) {
    SBXD_TRY(json, parse_body(body));
    Fields f(*json);
    SBXD_TRY(name, f.string("name"));
    SBXD_TRY(sandbox_id, f.string("sandboxId"));
    SBXD_TRY(read_only, f.boolean("readOnly"));
    SBXD_TRY(expires, f.integer("expiresInSeconds", 1, kMaxKeySeconds));
    if (auto done = f.finish(); !done) {
        return done.error();
    }
    KeyCreateRequest r;
    r.name = name->value_or("");
    const bool printable = std::all_of(r.name.begin(), r.name.end(), [](char c) {
        return static_cast<unsigned char>(c) >= 0x20 && c != 0x7f;
    });
    if (r.name.size() > kMaxKeyNameBytes || !printable) {
        return invalid_argument(fmt::format("name must be at most {} bytes without control characters", kMaxKeyNameBytes));
    }
    if (*sandbox_id) {
        if (sandbox_id->value().empty()) {
            return invalid_argument("sandboxId must name a sandbox (leave it out for a host-wide key)");
        }
        r.sandbox_id = **sandbox_id;
    }
    r.read_only = read_only->value_or(false);
    r.expires_in_seconds = *expires;
    return r;
}

Result<ListQuery> parse_list_query(const std::vector<std::pair<std::string, std::string>>& params) {
    ListQuery q;
    for (const auto& [key, value] : params) {
        if (key != "labels" && key != "state") {
            return invalid_argument(fmt::format("unknown query parameter '{}' (labels, state)", key));
        }
        for (std::string_view item : split(value, ',')) {
            if (key == "labels") {
                auto eq = item.find('=');
                if (eq == std::string_view::npos || eq == 0) {
                    return invalid_argument(
                        fmt::format("labels selector '{}' must be key=value[,key=value...]", value));
                }
                q.labels[std::string(item.substr(0, eq))] = std::string(item.substr(eq + 1));
            } else {
                auto state = parse_sandbox_state(item);
                if (!state) {
                    return invalid_argument(
                        fmt::format("state '{}' is none of creating, running, stopping, "
                                    "stopped, paused, crashed, deleting",
                                    item));
                }
                q.states.push_back(*state);
            }
        }
    }
    if (auto c = check_labels(q.labels); !c) {
        return c.error();
    }
    return q;
}

Result<SandboxShape> resolve_shape(const CreateRequest& request, const HostLimits& host) {
    SandboxShape shape;
    const SandboxSize size = *find_size(request.size.value_or("default"));
    shape.size = std::string(size.name);
    shape.cpus = size.cpus;
    shape.memory_mib = size.memory_mib;
    if (shape.cpus > host.host_cpus || shape.memory_mib > host.max_memory_mib) {
        shape.cpus = std::min(shape.cpus, host.host_cpus);
        shape.memory_mib = std::min(shape.memory_mib, host.max_memory_mib);
        shape.warnings.push_back(
            fmt::format("size {} ({} vCPU, {} MiB) scaled down to {} vCPU, {} MiB on this host", size.name,
                        size.cpus, size.memory_mib, shape.cpus, shape.memory_mib));
    }
    if (request.cpus) {
        if (*request.cpus > host.host_cpus) {
            return invalid_argument(
                fmt::format("cpus {} is more than this host's {} CPUs", *request.cpus, host.host_cpus));
        }
        shape.cpus = *request.cpus;
        shape.size = "custom";
    }
    if (request.memory_mib) {
        if (*request.memory_mib < host.min_memory_mib || *request.memory_mib > host.max_memory_mib) {
            return invalid_argument(fmt::format("memoryMib must be {} to {} on this host, not {}",
                                                host.min_memory_mib, host.max_memory_mib,
                                                *request.memory_mib));
        }
        shape.memory_mib = *request.memory_mib;
        shape.size = "custom";
    }
    shape.disk_gib = request.disk_gib.value_or(host.default_disk_gib);
    if (shape.disk_gib > host.max_disk_gib) {
        return invalid_argument(fmt::format("diskGib {} is more than this host's limit of {}", shape.disk_gib,
                                            host.max_disk_gib));
    }
    return shape;
}

}  // namespace sbx::sbxd::api
