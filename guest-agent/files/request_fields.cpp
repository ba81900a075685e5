#include "guest-agent/files/request_fields.hpp"

#include <unistd.h>

#include <charconv>
#include <fstream>

namespace sbx::agent::files {
namespace {

std::optional<std::uint32_t> parse_id(std::string_view text) {
    std::uint32_t value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size() || text.empty()) {
        return std::nullopt;
    }
    return value;
}

Result<std::optional<std::uint32_t>> get_id(const Json& request, std::string_view key) {
    if (auto it = request.find(key); it == request.end() || it->is_null()) {
        return std::optional<std::uint32_t>();
    }
    auto value = get_int(request, key);
    if (!value) {
        return value.error();
    }
    if (*value < 0 || *value > 0xfffffffe) {  // (uid_t)-1 means "no change" to chown
        return make_error("\"{}\" out of range", key);
    }
    return std::optional(static_cast<std::uint32_t>(*value));
}

}  // namespace

Result<std::string> get_path(const Json& request, std::string_view key) {
    auto path = get_string(request, key);
    if (!path) {
        return path.error();
    }
    if (path->empty() || path->front() != '/') {
        return make_error("\"{}\" must be an absolute path", key);
    }
    if (path->find('\0') != std::string::npos) {
        return make_error("\"{}\" contains a NUL byte", key);
    }
    return path;
}

Result<std::uint32_t> get_mode(const Json& request, std::string_view key, std::uint32_t fallback) {
    auto mode = get_int(request, key, fallback);
    if (!mode) {
        return mode.error();
    }
    if (*mode < 0 || *mode > 07777) {
        return make_error("\"{}\" must be permission bits (0 to 07777)", key);
    }
    return static_cast<std::uint32_t>(*mode);
}

Result<PasswdEntry> find_user(std::string_view name_or_uid, const std::string& passwd_path) {
    const auto wanted_uid = parse_id(name_or_uid);
    std::ifstream in(passwd_path);
    std::string line;
    // name:password:uid:gid:gecos:home:shell
    while (std::getline(in, line)) {
        std::string_view rest = line;
        std::string_view fields[4];
        std::size_t n = 0;
        for (; n < 4; ++n) {
            const auto colon = rest.find(':');
            if (colon == std::string_view::npos) {
                break;
            }
            fields[n] = rest.substr(0, colon);
            rest.remove_prefix(colon + 1);
        }
        if (n < 4) {
            continue;
        }
        const auto uid = parse_id(fields[2]);
        const auto gid = parse_id(fields[3]);
        if (!uid || !gid) {
            continue;
        }
        if (fields[0] == name_or_uid || (wanted_uid && *wanted_uid == *uid)) {
            return PasswdEntry{std::string(fields[0]), *uid, *gid};
        }
    }
    if (wanted_uid) {
        // A uid without an entry still works (as exec's "user" does): its group is the same number.
        return PasswdEntry{std::string(name_or_uid), *wanted_uid, *wanted_uid};
    }
    return errno_error(fmt::format("no user \"{}\" in {}", name_or_uid, passwd_path), ENOENT);
}

Result<Owner> get_owner(const Json& request, const std::string& default_user,
                        const std::string& passwd_path) {
    Owner owner;
    auto user = get_string(request, "user", std::string());
    auto uid = get_id(request, "uid");
    auto gid = get_id(request, "gid");
    if (!user || !uid || !gid) {
        return !user ? user.error() : (!uid ? uid : gid).error();
    }
    // Nothing named: the default user's, unless that is root (the agent's own).
    if (user->empty() && !*uid && !*gid && default_user != "root") {
        *user = default_user;
    }
    if (!user->empty()) {
        auto entry = find_user(*user, passwd_path);
        if (!entry) {
            return entry.error();
        }
        owner.uid = entry->uid;
        owner.gid = entry->gid;
    }
    if (*uid) {
        owner.uid = *uid;
    }
    if (*gid) {
        owner.gid = *gid;
    }
    return owner;
}

Result<void> apply_owner(int fd, const Owner& owner) {
    if (!owner.any()) {
        return ok();
    }
    if (::fchown(fd, owner.uid ? *owner.uid : static_cast<uid_t>(-1),
                 owner.gid ? *owner.gid : static_cast<gid_t>(-1)) != 0) {
        return sys_error("chown");
    }
    return ok();
}

}  // namespace sbx::agent::files
