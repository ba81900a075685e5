#include <doctest/doctest.h>

#include <string>

#include "vmm/boot/cmdline.hpp"

using namespace sbx::boot;

TEST_CASE("append joins pieces with single spaces") {
    Cmdline c(64);
    CHECK(c.empty());
    REQUIRE(c.append("console=ttyS0"));
    REQUIRE(c.append("reboot=k panic=1"));
    REQUIRE(c.append(""));
    CHECK(c.str() == "console=ttyS0 reboot=k panic=1");
    CHECK(c.size() == c.str().size());
}

TEST_CASE("capacity counts the terminating NUL") {
    Cmdline c(6);  // up to 5 characters
    REQUIRE(c.append("abcde"));
    auto full = c.append("f");
    REQUIRE_FALSE(full);
    CHECK(full.error().message.find("limit") != std::string::npos);
    CHECK(c.str() == "abcde");  // unchanged on error

    Cmdline exact(6);
    CHECK_FALSE(exact.append("abcdef"));
    CHECK(exact.empty());

    Cmdline sep(6);  // "ab" + " " + "cd" + NUL = 6 fits; one more does not
    REQUIRE(sep.append("ab"));
    REQUIRE(sep.append("cd"));
    CHECK_FALSE(sep.append("e"));

    Cmdline none(0);
    CHECK_FALSE(none.append("a"));
    CHECK(none.append(""));
}

TEST_CASE("append rejects NUL and non-printable bytes") {
    Cmdline c(64);
    auto nul = c.append(std::string("a\0b", 3));
    REQUIRE_FALSE(nul);
    CHECK(nul.error().message.find("NUL") != std::string::npos);
    CHECK_FALSE(c.append("a\tb"));
    CHECK_FALSE(c.append("a\nb"));
    CHECK_FALSE(c.append("\x7f"));
    CHECK_FALSE(c.append("caf\xc3\xa9"));
    CHECK(c.empty());
    CHECK(c.append("ok with spaces ~!@#"));
}

TEST_CASE("insert builds key=value and quotes values with spaces") {
    Cmdline c(128);
    REQUIRE(c.insert("root", "/dev/vda"));
    REQUIRE(c.insert("init", "/sbin/init --flag x"));
    REQUIRE(c.insert("quiet", ""));
    CHECK(c.str() == "root=/dev/vda init=\"/sbin/init --flag x\" quiet=");
}

TEST_CASE("insert rejects bad keys and values") {
    Cmdline c(128);
    CHECK_FALSE(c.insert("", "x"));
    CHECK_FALSE(c.insert("a b", "x"));
    CHECK_FALSE(c.insert("a=b", "x"));
    CHECK_FALSE(c.insert("a\"", "x"));
    CHECK_FALSE(c.insert("k\x01", "x"));
    CHECK_FALSE(c.insert("k", "say \"hi\""));
    CHECK_FALSE(c.insert("k", std::string("a\0", 2)));
    CHECK(c.empty());

    Cmdline small(8);
    CHECK_FALSE(small.insert("key", "value"));  // 9 bytes + NUL
    CHECK(small.empty());
}
