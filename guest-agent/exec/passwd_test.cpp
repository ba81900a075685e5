// Users and groups from passwd/group text, as exec's "user" field needs.
#include <doctest/doctest.h>

#include "guest-agent/exec/passwd.hpp"

using namespace sbx::agent;

namespace {
constexpr std::string_view kPasswd =
    "root:x:0:0:root:/root:/bin/bash\n"
    "# a comment\n"
    "broken line\n"
    "bad:x:notanumber:1::/home/bad:/bin/sh\n"
    "alice:x:1000:1000:Alice:/home/alice:/bin/zsh\r\n"
    "bob:x:1001:100:::\n";
constexpr std::string_view kGroup =
    "root:x:0:\n"
    "users:x:100:alice,bob\n"
    "wheel:x:10:alice\n"
    "alice:x:1000:\n"
    "junk\n"
    "other:x:77:alicex,xalice\n";
}  // namespace

TEST_CASE("users by name and by uid") {
    auto alice = find_user(kPasswd, "alice");
    REQUIRE(alice);
    CHECK(alice->uid == 1000);
    CHECK(alice->gid == 1000);
    CHECK(alice->home == "/home/alice");
    CHECK(alice->shell == "/bin/zsh");  // the \r of a CRLF file is not part of it

    auto by_uid = find_user(kPasswd, "1000");
    REQUIRE(by_uid);
    CHECK(by_uid->name == "alice");

    auto bob = find_user(kPasswd, "bob");  // empty home and shell get defaults
    REQUIRE(bob);
    CHECK(bob->home == "/");
    CHECK(bob->shell == "/bin/sh");
}

TEST_CASE("a uid not in passwd works, a name not there does not") {
    auto stranger = find_user(kPasswd, "4242");
    REQUIRE(stranger);
    CHECK(stranger->uid == 4242);
    CHECK(stranger->gid == 4242);
    CHECK(stranger->home == "/");
    CHECK(stranger->name == "4242");

    auto missing = find_user(kPasswd, "mallory");
    REQUIRE_FALSE(missing);
    CHECK(missing.error().errno_value == ENOENT);
    CHECK_FALSE(find_user(kPasswd, "bad"));  // its uid does not parse
    CHECK_FALSE(find_user(kPasswd, "-1"));
    CHECK_FALSE(find_user(kPasswd, "4294967295"));  // (uid_t)-1 means "no change" to setuid
    CHECK_FALSE(find_user(kPasswd, "99999999999"));
    CHECK_FALSE(find_user("", "root"));
}

TEST_CASE("supplementary groups come from member lists, the primary first") {
    auto groups = groups_of(kGroup, "alice", 1000);
    CHECK(groups == std::vector<gid_t>{1000, 100, 10});
    CHECK(groups_of(kGroup, "bob", 100) == std::vector<gid_t>{100});
    CHECK(groups_of("", "carol", 5) == std::vector<gid_t>{5});
}

TEST_CASE("lookup_user reads the files; root works without them") {
    auto root = lookup_user("root", AccountFiles{"/nonexistent/passwd", "/nonexistent/group"});
    REQUIRE(root);
    CHECK(root->uid == 0);
    CHECK(root->groups == std::vector<gid_t>{0});
    CHECK(lookup_user("65534", AccountFiles{"/nonexistent/passwd", "/nonexistent/group"}));
    CHECK_FALSE(lookup_user("", {}));
    auto nobody = lookup_user("nobody");  // the host's /etc/passwd
    REQUIRE(nobody);
    CHECK(nobody->uid == 65534);
}
