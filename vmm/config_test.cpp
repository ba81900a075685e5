#include <doctest/doctest.h>

#include "vmm/config.hpp"

using namespace sbx;

TEST_CASE("console specs parse") {
    CHECK(ConsoleConfig::parse("stdout")->kind == ConsoleConfig::Kind::Stdout);
    CHECK(ConsoleConfig::parse("none")->kind == ConsoleConfig::Kind::None);
    auto f = ConsoleConfig::parse("file:/tmp/x.log");
    REQUIRE(f);
    CHECK(f->kind == ConsoleConfig::Kind::File);
    CHECK(f->path == "/tmp/x.log");
    CHECK(ConsoleConfig::parse("socket:/run/c.sock")->kind == ConsoleConfig::Kind::Socket);
    CHECK_FALSE(ConsoleConfig::parse("file:"));
    CHECK_FALSE(ConsoleConfig::parse("tty"));
}

TEST_CASE("TOML config overlays defaults") {
    VmConfig c;
    auto r = c.merge_toml(R"(
[machine]
cpus = 4
memory_mib = 512
[boot]
kernel = "/k"
initrd = "/i"
cmdline = "console=ttyS0"
[console]
output = "file:/tmp/c"
)", "test.toml");
    REQUIRE(r);
    CHECK(c.cpus == 4);
    CHECK(c.memory_mib == 512);
    CHECK(c.kernel == "/k");
    CHECK(c.initrd == "/i");
    CHECK(c.cmdline == "console=ttyS0");
    CHECK(c.console.kind == ConsoleConfig::Kind::File);
    CHECK(c.validate());
}

TEST_CASE("TOML errors name the file and line") {
    VmConfig c;
    auto r = c.merge_toml("[machine]\ncpus = = 3\n", "bad.toml");
    REQUIRE_FALSE(r);
    CHECK(r.error().message.find("bad.toml:2") != std::string::npos);
    CHECK_FALSE(c.merge_toml("[nonsense]\nx = 1\n", "x.toml"));
    auto typo = c.merge_toml("[machine]\nmemroy_mib = 512\n", "x.toml");
    REQUIRE_FALSE(typo);
    CHECK(typo.error().message.find("unknown setting machine.memroy_mib") != std::string::npos);
    auto wrong_type = c.merge_toml("[machine]\ncpus = \"4\"\n", "x.toml");
    REQUIRE_FALSE(wrong_type);
    CHECK(wrong_type.error().message.find("must be an integer") != std::string::npos);
    CHECK_FALSE(c.merge_toml("cpus = 4\n", "x.toml"));  // a key outside any section
    CHECK_FALSE(c.merge_toml("[machine]\ncpus = -1\n", "x.toml"));
}

TEST_CASE("validation refuses 0 vCPUs, tiny memory and a missing kernel") {
    VmConfig c;
    CHECK_FALSE(c.validate());  // no kernel
    c.kernel = "/k";
    CHECK(c.validate());
    c.cpus = 0;
    CHECK(c.validate().error().message.find("vCPUs") != std::string::npos);
    c.cpus = 300;
    CHECK_FALSE(c.validate());
    c.cpus = 1;
    c.memory_mib = 16;
    CHECK(c.validate().error().message.find("minimum") != std::string::npos);
}
