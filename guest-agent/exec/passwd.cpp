#include "guest-agent/exec/passwd.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <optional>

#include "base/unique_fd.hpp"

namespace sbx::agent {
namespace {

constexpr std::size_t kMaxAccountFile = 16 << 20;

std::vector<std::string_view> split(std::string_view s, char sep) {
    std::vector<std::string_view> out;
    while (true) {
        auto at = s.find(sep);
        out.push_back(s.substr(0, at));
        if (at == std::string_view::npos) {
            return out;
        }
        s.remove_prefix(at + 1);
    }
}

// A decimal id; -1 (the "no change" value of set*id) is not one.
std::optional<std::uint32_t> parse_id(std::string_view s) {
    std::uint32_t v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size() || s.empty() || v == static_cast<std::uint32_t>(-1)) {
        return std::nullopt;
    }
    return v;
}

template <typename Visit>
void for_each_line(std::string_view text, Visit visit) {
    for (auto line : split(text, '\n')) {
        if (!line.empty() && line.back() == '\r') {
            line.remove_suffix(1);
        }
        if (!line.empty() && line.front() != '#') {
            visit(line);
        }
    }
}

}  // namespace

Result<UserInfo> find_user(std::string_view passwd_text, std::string_view user) {
    const auto numeric = parse_id(user);
    std::optional<UserInfo> found;
    for_each_line(passwd_text, [&](std::string_view line) {
        // name:password:uid:gid:gecos:home:shell
        auto f = split(line, ':');
        if (found || f.size() < 7) {
            return;
        }
        auto uid = parse_id(f[2]);
        auto gid = parse_id(f[3]);
        if (!uid || !gid || !(f[0] == user || (numeric && *uid == *numeric))) {
            return;
        }
        found = UserInfo{std::string(f[0]), *uid, *gid, std::string(f[5]), std::string(f[6]), {}};
    });
    if (found) {
        if (found->home.empty()) {
            found->home = "/";
        }
        if (found->shell.empty()) {
            found->shell = "/bin/sh";
        }
        return std::move(*found);
    }
    if (numeric) {
        return UserInfo{std::string(user), *numeric, *numeric, "/", "/bin/sh", {}};
    }
    return errno_error(fmt::format("no user \"{}\" in the passwd file", user), ENOENT);
}

std::vector<gid_t> groups_of(std::string_view group_text, std::string_view user_name, gid_t primary) {
    std::vector<gid_t> groups{primary};
    for_each_line(group_text, [&](std::string_view line) {
        // name:password:gid:member,member
        auto f = split(line, ':');
        if (f.size() < 4) {
            return;
        }
        auto gid = parse_id(f[2]);
        if (!gid) {
            return;
        }
        auto members = split(f[3], ',');
        if (std::find(members.begin(), members.end(), user_name) != members.end() &&
            std::find(groups.begin(), groups.end(), *gid) == groups.end()) {
            groups.push_back(*gid);
        }
    });
    return groups;
}

Result<UserInfo> lookup_user(std::string_view user, const AccountFiles& files) {
    if (user.empty()) {
        return make_error("\"user\" must not be empty");
    }
    // A missing passwd file (a bare image) still allows numeric uids and root.
    auto passwd = read_file(files.passwd, kMaxAccountFile);
    std::string_view passwd_text = passwd ? std::string_view(*passwd) : std::string_view();
    auto info = find_user(passwd_text, user);
    if (!info && user == "root") {
        info = UserInfo{"root", 0, 0, "/root", "/bin/sh", {}};
    }
    if (!info) {
        return info.error();
    }
    auto group = read_file(files.group, kMaxAccountFile);
    info->groups = groups_of(group ? std::string_view(*group) : std::string_view(), info->name, info->gid);
    return info;
}

}  // namespace sbx::agent
