#include <doctest/doctest.h>

#include "snapshot/machine_codec.hpp"

using namespace sbx;
using namespace sbx::snapshot;

namespace {

VmConfig sample_config() {
    VmConfig config;
    config.kernel = "/images/vmlinux";
    config.initrd = "/images/minimal.cpio.gz";
    config.cmdline = "console=ttyS0 sbx.token=abc";
    config.cpus = 2;
    config.memory_mib = 512;
    config.disks = {{"/disks/root.ext4", false}, {"/disks/data.ext4", true}};
    config.net = NetConfig{"tap0", "02:00:00:00:00:01"};
    config.vsock = VsockConfig{3, "/run/v.sock"};
    config.rng = true;
    config.console.kind = ConsoleConfig::Kind::None;  // host-side: not saved
    return config;
}

}  // namespace

TEST_CASE("the configuration section round-trips the machine and drops host-only settings") {
    auto bytes = encode_config(sample_config());
    auto back = decode_config(bytes);
    REQUIRE(back);
    CHECK(back->kernel == "/images/vmlinux");
    CHECK(back->cmdline == "console=ttyS0 sbx.token=abc");
    CHECK(back->cpus == 2);
    CHECK(back->memory_mib == 512);
    REQUIRE(back->disks.size() == 2);
    CHECK(back->disks[1].path == "/disks/data.ext4");
    CHECK(back->disks[1].read_only);
    REQUIRE(back->net);
    CHECK(back->net->mac == "02:00:00:00:00:01");
    REQUIRE(back->vsock);
    CHECK(back->vsock->cid == 3);
    CHECK(back->rng);
    CHECK(back->console.kind == ConsoleConfig::Kind::Stdout);  // the default, not the saved VM's
}

TEST_CASE("a damaged configuration section is refused at every length") {
    auto bytes = encode_config(sample_config());
    for (std::size_t n = 0; n < bytes.size(); ++n) {
        auto r = decode_config(std::span(bytes.data(), n));
        REQUIRE_FALSE(r);
        CHECK(r.error().message.starts_with("corrupt:"));
    }
    auto future = bytes;
    future[0] = 9;  // version 9
    auto r = decode_config(future);
    REQUIRE_FALSE(r);
    CHECK(r.error().message.starts_with("unsupported_version:"));
    auto zero_cpus = sample_config();
    zero_cpus.cpus = 0;
    CHECK_FALSE(decode_config(encode_config(zero_cpus)));  // decoded values are validated
}

TEST_CASE("a damaged machine section is refused, not half-decoded") {
    MachineState empty;
    auto bytes = encode_machine(empty);
    // No vCPUs and empty chip images: the VM state's decoder refuses images
    // of the wrong size, so even this well-framed section is refused.
    CHECK_FALSE(decode_machine(bytes));
    for (std::size_t n = 0; n < bytes.size(); ++n) {
        CHECK_FALSE(decode_machine(std::span(bytes.data(), n)));
    }
    std::vector<std::uint8_t> huge_count{1, 0, 0xff, 0xff, 0xff, 0xff};  // version 1, 4 billion vCPUs
    auto r = decode_machine(huge_count);
    REQUIRE_FALSE(r);
    CHECK(r.error().message.starts_with("corrupt:"));
}
