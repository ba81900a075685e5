// Users and groups for exec's "user" field, read from /etc/passwd and
// /etc/group directly: sbx-agent is a static binary, and glibc's
// getpwnam/getgrouplist need NSS modules loaded at run time.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"

namespace sbx::agent {

struct UserInfo {
    std::string name;
    uid_t uid = 0;
    gid_t gid = 0;
    std::string home;
    std::string shell;
    std::vector<gid_t> groups;  // supplementary groups, the primary one included
};

struct AccountFiles {
    std::string passwd = "/etc/passwd";
    std::string group = "/etc/group";
};

// `user` is a name or a numeric uid. A name must be in the passwd file
// (an Error with ENOENT otherwise). A uid that is not there still works, as
// in `docker run --user`: its group is the same number, HOME is "/", SHELL
// is /bin/sh and USER is the number.
[[nodiscard]] Result<UserInfo> lookup_user(std::string_view user, const AccountFiles& files = {});

// The parsers behind lookup_user, on file contents.
[[nodiscard]] Result<UserInfo> find_user(std::string_view passwd_text, std::string_view user);
[[nodiscard]] std::vector<gid_t> groups_of(std::string_view group_text, std::string_view user_name,
                                           gid_t primary);

}  // namespace sbx::agent
