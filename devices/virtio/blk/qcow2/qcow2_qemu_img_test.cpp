// Our qcow2 images checked by QEMU's tools (Debian qemu-utils, a test
// tool only): overlays we create and write pass `qemu-img check` and
// `qemu-img compare` against the bytes written; images qemu-img and
// qemu-io make open and read back here; chains mix both; a writer killed
// at any point leaves leaks at worst, and what it flushed reads back;
// compressed, encrypted and snapshotted images are refused. Exits 77
// (SKIP) without qemu-img.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>

#include <random>

#include "devices/virtio/blk/qcow2/qcow2_test_util.hpp"

using namespace sbx;
using namespace sbx::qcow2;
using namespace sbx::qcow2::testing;

namespace {

constexpr std::uint64_t kCluster = 64 * 1024;

void require_qemu_img() {
    if (run_command("qemu-img --version").status != 0 || run_command("qemu-io --version").status != 0) {
        std::printf("SKIP: qemu-img / qemu-io not installed (Debian qemu-utils, scripts/install-deps)\n");
        std::exit(77);
    }
}

// `qemu-img check`: 0 clean, 3 leaks only, 2 corruption.
int qemu_check(const std::string& image) {
    const CommandResult r = run_command("qemu-img check -f qcow2 '" + image + "'");
    INFO("qemu-img check: ", r.output);
    CHECK(r.status != 2);
    CHECK(r.status != 1);
    return r.status;
}

void check_clean(const std::string& image) {
    CHECK(qemu_check(image) == 0);
}

// `qemu-img compare` of the qcow2 image (through its chain) with a raw
// file holding the model's bytes.
void check_compare(const TempDir& dir, const std::string& image, const Model& model) {
    const std::string expected = dir.file("expected.raw");
    write_file(expected, model.bytes);
    const CommandResult r =
        run_command("qemu-img compare -f qcow2 -F raw '" + image + "' '" + expected + "'");
    INFO("qemu-img compare: ", r.output);
    CHECK(r.status == 0);
}

void run_ok(const std::string& command) {
    const CommandResult r = run_command(command);
    INFO(command, ": ", r.output);
    REQUIRE(r.status == 0);
}

void random_workload(Image& image, Model& model, std::uint64_t seed, int operations) {
    std::mt19937_64 rng(seed);
    for (int i = 0; i < operations; ++i) {
        const std::uint64_t len = 512 * (1 + rng() % 400);
        const std::uint64_t offset = 512 * (rng() % ((model.bytes.size() - len) / 512));
        if (rng() % 4 == 0) {
            REQUIRE(image.write_zeroes(offset, len, /*unmap=*/rng() % 2 == 0));
            model.zero(offset, len);
        } else {
            const Bytes data = patterned(len, static_cast<std::uint8_t>(i + seed));
            REQUIRE(image.write(offset, data));
            model.write(offset, data);
        }
        if (i % 40 == 39) {
            REQUIRE(image.flush());
        }
    }
    REQUIRE(image.flush());
}

}  // namespace

TEST_CASE("our overlay on a raw base, written at random: qemu-img check is clean and compare agrees") {
    require_qemu_img();
    TempDir dir;
    Model model{patterned(16 << 20, 3)};
    write_file(dir.file("base.raw"), model.bytes);
    REQUIRE(create_overlay(dir.file("o.qcow2"), "base.raw", BackingFormat::Raw, 0));
    check_clean(dir.file("o.qcow2"));
    check_compare(dir, dir.file("o.qcow2"), model);
    {
        auto image = open_image(dir.file("o.qcow2"));
        random_workload(*image, model, 1, 400);
        // Discards of whole clusters release them (refcount 0, a hole).
        REQUIRE(image->discard(2 * kCluster, 4 * kCluster));
        model.zero(2 * kCluster, 4 * kCluster);
        REQUIRE(image->flush());
    }
    check_clean(dir.file("o.qcow2"));
    check_compare(dir, dir.file("o.qcow2"), model);
    const CommandResult info = run_command("qemu-img info '" + dir.file("o.qcow2") + "'");
    CHECK(info.output.find("backing file format: raw") != std::string::npos);
}

TEST_CASE("runs of whole clusters across refcount blocks and L2 tables: check clean, compare equal") {
    require_qemu_img();
    TempDir dir;
    // 512-byte clusters: a refcount block covers 256 clusters, an L2 table 64.
    Model model{patterned(4 << 20, 6)};
    write_file(dir.file("base.raw"), model.bytes);
    REQUIRE(create_overlay(dir.file("o.qcow2"), "base.raw", BackingFormat::Raw, 0, {.cluster_bits = 9}));
    {
        auto image = open_image(dir.file("o.qcow2"));
        std::mt19937_64 rng(7);
        for (int i = 0; i < 200; ++i) {
            const std::uint64_t len = 512 * (1 + rng() % 700);
            const std::uint64_t offset = 512 * (rng() % ((model.bytes.size() - len) / 512));
            const Bytes data = patterned(len, static_cast<std::uint8_t>(i));
            REQUIRE(image->write(offset, data));
            model.write(offset, data);
            if (i % 10 == 0) {
                REQUIRE(image->write_zeroes(offset, len / 2, rng() % 2 == 0));
                model.zero(offset, len / 2);
            }
        }
        CHECK(read_disk(*image, 0, model.bytes.size()) == model.bytes);
    }
    check_clean(dir.file("o.qcow2"));
    check_compare(dir, dir.file("o.qcow2"), model);
}

TEST_CASE("images qemu-img creates and qemu-io writes open here, and stay clean after our writes") {
    require_qemu_img();
    TempDir dir;
    Model model{patterned(8 << 20, 9)};
    write_file(dir.file("base.raw"), model.bytes);
    run_ok("qemu-img create -q -f qcow2 -b base.raw -F raw '" + dir.file("q.qcow2") + "'");
    run_ok("qemu-io -f qcow2 -c 'write -P 0xab 65536 131072' -c 'write -z 1048576 65536' '" +
           dir.file("q.qcow2") + "'");
    model.write(65536, Bytes(131072, 0xab));
    model.zero(1048576, 65536);
    {
        auto image = open_image(dir.file("q.qcow2"));
        CHECK(image->header().backing_format == BackingFormat::Raw);
        CHECK(read_disk(*image, 0, model.bytes.size()) == model.bytes);
        random_workload(*image, model, 2, 200);
        CHECK(read_disk(*image, 0, model.bytes.size()) == model.bytes);
    }
    check_clean(dir.file("q.qcow2"));
    check_compare(dir, dir.file("q.qcow2"), model);
}

TEST_CASE("a chain of four: raw, qemu-img's qcow2, then two of ours") {
    require_qemu_img();
    TempDir dir;
    Model model{patterned(4 << 20, 5)};
    write_file(dir.file("base.raw"), model.bytes);
    run_ok("qemu-img create -q -f qcow2 -b base.raw -F raw '" + dir.file("a.qcow2") + "'");
    run_ok("qemu-io -f qcow2 -c 'write -P 0x11 0 100000' '" + dir.file("a.qcow2") + "'");
    model.write(0, Bytes(100000, 0x11));
    REQUIRE(create_overlay(dir.file("b.qcow2"), "a.qcow2", BackingFormat::Qcow2, 0));
    {
        auto b = open_image(dir.file("b.qcow2"));
        random_workload(*b, model, 3, 60);
    }
    REQUIRE(create_overlay(dir.file("c.qcow2"), "b.qcow2", BackingFormat::Qcow2, 0));
    {
        auto c = open_image(dir.file("c.qcow2"));
        random_workload(*c, model, 4, 60);
        CHECK(read_disk(*c, 0, model.bytes.size()) == model.bytes);
    }
    for (const char* name : {"a.qcow2", "b.qcow2", "c.qcow2"}) {
        check_clean(dir.file(name));
    }
    check_compare(dir, dir.file("c.qcow2"), model);
    const CommandResult chain = run_command("qemu-img info --backing-chain '" + dir.file("c.qcow2") + "'");
    CHECK(chain.output.find("b.qcow2") != std::string::npos);
    CHECK(chain.output.find("base.raw") != std::string::npos);
}

TEST_CASE("a writer killed at any point leaves leaks at worst, and its flushed writes read back") {
    require_qemu_img();
    TempDir dir;
    constexpr std::uint64_t kDisk = 32 << 20;
    constexpr std::uint64_t kRegion = 3 * kCluster + 4096;  // odd-sized: copy-on-write at both ends
    constexpr std::uint64_t kRegions = kDisk / kRegion;
    write_file(dir.file("base.raw"), patterned(kDisk, 1));
    for (int round = 0; round < 6; ++round) {
        const std::string path = dir.file("crash.qcow2");
        ::unlink(path.c_str());
        REQUIRE(create_overlay(path, "base.raw", BackingFormat::Raw, 0));
        int pipe_fds[2];
        REQUIRE(::pipe(pipe_fds) == 0);
        const pid_t child = ::fork();
        REQUIRE(child >= 0);
        if (child == 0) {
            // Region i gets pattern seed i + 100, then a flush, then a report;
            // zeroes and more writes keep the metadata busy in between.
            ::close(pipe_fds[0]);
            auto file = UniqueFd::open(path, O_RDWR);
            auto image = Image::open(std::move(*file), path, true, BackingFiles::Follow);
            if (!image) {
                ::_exit(1);
            }
            for (std::uint64_t i = 0; i < kRegions; ++i) {
                const Bytes data = patterned(kRegion, static_cast<std::uint8_t>(i + 100));
                if (!(*image)->write(i * kRegion, data) || !(*image)->flush()) {
                    ::_exit(1);
                }
                const auto n = static_cast<std::uint32_t>(i);
                if (::write(pipe_fds[1], &n, sizeof n) != sizeof n) {
                    ::_exit(1);
                }
                if (!(*image)->write_zeroes(i * kRegion + kRegion / 2, kRegion)) {  // spills into the next
                    ::_exit(1);
                }
            }
            ::_exit(0);
        }
        ::close(pipe_fds[1]);
        // Let it flush a few regions (more each round), then SIGKILL.
        std::uint32_t last = 0;
        bool any = false;
        for (int seen = 0; seen < 3 + round * 7; ++seen) {
            std::uint32_t n = 0;
            if (::read(pipe_fds[0], &n, sizeof n) != sizeof n) {
                break;
            }
            last = n;
            any = true;
        }
        ::usleep(static_cast<useconds_t>(round * 1500));
        ::kill(child, SIGKILL);
        int status = 0;
        ::waitpid(child, &status, 0);
        // Reports may still sit in the pipe: each one was flushed.
        std::uint32_t n = 0;
        while (::read(pipe_fds[0], &n, sizeof n) == sizeof n) {
            last = n;
            any = true;
        }
        ::close(pipe_fds[0]);
        REQUIRE(any);
        const int check = qemu_check(path);
        CHECK((check == 0 || check == 3));
        // Region i < last: written, its second half zeroed, all flushed by
        // the flush of region i + 1. Region `last`: written and flushed.
        auto image = open_image(path, false);
        constexpr std::uint64_t kHalf = kRegion / 2;
        for (std::uint32_t i = 0; i <= last; ++i) {
            const Bytes data = patterned(kRegion, static_cast<std::uint8_t>(i + 100));
            CHECK(read_disk(*image, i * kRegion, kHalf) == Bytes(data.begin(), data.begin() + kHalf));
            if (i < last) {
                CHECK(read_disk(*image, i * kRegion + kHalf, kRegion - kHalf) == Bytes(kRegion - kHalf, 0));
            }
        }
        MESSAGE("round ", round, ": killed after region ", last, " was flushed; qemu-img check ", check);
    }
}

TEST_CASE("compressed, encrypted and snapshotted images from qemu-img are refused with their code") {
    require_qemu_img();
    TempDir dir;
    write_file(dir.file("data.raw"), patterned(1 << 20, 2));
    run_ok("qemu-img convert -q -c -O qcow2 '" + dir.file("data.raw") + "' '" + dir.file("z.qcow2") + "'");
    // qemu-img's LUKS PBKDF2 benchmark fails at random with "Unable to get
    // accurate CPU usage" when getrusage() reports 0 ms for a short round
    // (QEMU commit c72cab5, fixed upstream in 2025 and not in Debian's
    // build); that error alone is retried, a bounded number of times.
    const std::string luks_create =
        "qemu-img create -q -f qcow2 --object secret,id=s0,data=hunter2 -o "
        "encrypt.format=luks,encrypt.key-secret=s0 '" +
        dir.file("e.qcow2") + "' 1M";
    CommandResult luks = run_command(luks_create);
    for (int attempt = 1; attempt < 5 && luks.status != 0 &&
                          luks.output.find("accurate CPU usage") != std::string::npos;
         ++attempt) {
        luks = run_command(luks_create);
    }
    INFO(luks_create, ": ", luks.output);
    REQUIRE(luks.status == 0);
    run_ok("qemu-img create -q -f qcow2 '" + dir.file("s.qcow2") + "' 1M");
    run_ok("qemu-img snapshot -c first '" + dir.file("s.qcow2") + "'");
    run_ok("qemu-img create -q -f qcow2 -o compat=0.10 '" + dir.file("v2.qcow2") + "' 1M");
    run_ok("qemu-img create -q -f qcow2 -o extended_l2=on '" + dir.file("x.qcow2") + "' 1M");
    for (const auto& refused : std::vector<std::pair<std::string, std::string>>{{"z.qcow2", "compressed"},
                                                                                {"e.qcow2", "encryption"},
                                                                                {"s.qcow2", "snapshots"},
                                                                                {"v2.qcow2", "version 2"},
                                                                                {"x.qcow2", "extended L2"}}) {
        INFO(refused.first);
        auto image = try_open(dir.file(refused.first));
        REQUIRE(!image);
        CHECK(image.error().code == kCodeUnsupported);
        CHECK_MESSAGE(image.error().message.find(refused.second) != std::string::npos, image.error().message);
    }
}
