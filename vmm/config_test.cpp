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
    CHECK_FALSE(f->append);
    auto a = ConsoleConfig::parse("append:/tmp/x.log");
    REQUIRE(a);
    CHECK(a->kind == ConsoleConfig::Kind::File);
    CHECK(a->append);
    CHECK(a->path == "/tmp/x.log");
    CHECK_FALSE(ConsoleConfig::parse("append:"));
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

TEST_CASE("device specs from flags") {
    auto d = DiskConfig::parse("/img/a.raw");
    REQUIRE(d);
    CHECK(d->path == "/img/a.raw");
    CHECK_FALSE(d->read_only);
    auto ro = DiskConfig::parse("/img/with,comma.raw,ro");
    REQUIRE(ro);
    CHECK(ro->path == "/img/with,comma.raw");
    CHECK(ro->read_only);
    CHECK_FALSE(DiskConfig::parse(",ro"));
    CHECK_FALSE(ro->allow_backing);
    auto backed = DiskConfig::parse("/img/o.qcow2,ro,backing=on");
    REQUIRE(backed);
    CHECK(backed->path == "/img/o.qcow2");
    CHECK(backed->read_only);
    CHECK(backed->allow_backing);
    CHECK_FALSE(DiskConfig::parse("/img/o.qcow2,backing=off")->allow_backing);

    auto n = NetConfig::parse("tap=sbxtap0,mac=52:54:00:12:34:56");
    REQUIRE(n);
    CHECK(n->tap == "sbxtap0");
    CHECK(n->mac == "52:54:00:12:34:56");
    CHECK_FALSE(NetConfig::parse("mac=52:54:00:12:34:56"));
    CHECK_FALSE(NetConfig::parse("tap=x,speed=10"));
    CHECK_FALSE(NetConfig::parse("sbxtap0"));

    auto v = VsockConfig::parse("cid=3,uds=/run/v,1.sock");
    REQUIRE(v);
    CHECK(v->cid == 3);
    CHECK(v->uds == "/run/v,1.sock");
    CHECK_FALSE(VsockConfig::parse("cid=x3,uds=/a"));
    CHECK_FALSE(VsockConfig::parse("uds=/a"));
}

TEST_CASE("devices from TOML, strictly typed") {
    VmConfig c;
    auto r = c.merge_toml(R"(
[boot]
kernel = "/k"
[[disk]]
path = "/root.img"
[[disk]]
path = "/data.img"
read_only = true
[net]
tap = "t0"
[vsock]
cid = 7
uds = "/v.sock"
[rng]
)", "d.toml");
    REQUIRE(r);
    REQUIRE(c.disks.size() == 2);
    CHECK(c.disks[1].read_only);
    CHECK(c.net->tap == "t0");
    CHECK(c.vsock->cid == 7);
    CHECK(c.rng);
    CHECK(c.validate());
    CHECK_FALSE(VmConfig{}.merge_toml("[disk]\npath = \"/x\"\n", "x.toml"));  // must be [[disk]]
    CHECK_FALSE(VmConfig{}.merge_toml("[[disk]]\nread_only = true\n", "x.toml"));  // no path
    CHECK_FALSE(VmConfig{}.merge_toml("[[disk]]\npath = \"/x\"\nro = true\n", "x.toml"));
    CHECK_FALSE(VmConfig{}.merge_toml("[vsock]\ncid = 3\n", "x.toml"));
    CHECK_FALSE(VmConfig{}.merge_toml("[rng]\nenabled = 1\n", "x.toml"));
}

TEST_CASE("device validation: vsock cid range and the number of slots") {
    VmConfig c;
    c.kernel = "/k";
    c.vsock = VsockConfig{2, "/v"};
    CHECK(c.validate().error().message.find("cid") != std::string::npos);
    c.vsock->cid = 3;
    CHECK(c.validate());
    c.disks.resize(19);
    CHECK(c.validate().error().message.find("virtio devices") != std::string::npos);
}

TEST_CASE("[console] max_bytes bounds the console file, whatever order the keys come in") {
    VmConfig c;
    REQUIRE(c.merge_toml("[console]\nmax_bytes = 65536\noutput = \"append:/tmp/c\"\n", "a.toml"));
    CHECK(c.console.append);
    CHECK(c.console.max_bytes == 65536);
    REQUIRE(c.merge_toml("[console]\noutput = \"file:/tmp/d\"\n", "b.toml"));  // a later output keeps it
    CHECK(c.console.max_bytes == 65536);
    CHECK_FALSE(c.merge_toml("[console]\nmax_bytes = -1\n", "c.toml"));
}
