// Named snapshots, CPU signatures and cold starts in the VMM driver,
// with a stand-in for sbx-vmm that records its command line and exits:
// which of restore and cold boot was tried says what the driver decided.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <filesystem>
#include <sstream>

#include "host-tools/sbxd/vmm/cpu_signature.hpp"
#include "host-tools/sbxd/vmm/driver_test_fixture.hpp"
#include "host-tools/sbxd/vmm/vmm_driver.hpp"

using namespace sbx;
using namespace sbx::sbxd;
using namespace sbx::sbxd::testing;

namespace {

// The lines of a file, empty ones too.
std::vector<std::string> lines_of(const std::string& path) {
    std::vector<std::string> out;
    std::istringstream in(read_file(path));
    for (std::string l; std::getline(in, l);) {
        out.push_back(l);
    }
    return out;
}

bool restores(const std::string& line) {
    return line.find("--restore ") != std::string::npos;
}

// A VMM that records its arguments and exits at once: every boot and
// restore fails fast, and the command lines say which was tried.
struct SnapshotFixture : Fixture {
    std::string args = dir.path() + "/args";
    std::string fake = dir.path() + "/fake-vmm";
    SnapshotFixture() { write_file(fake, "#!/bin/sh\necho \"$@\" >> " + args + "\nexit 1\n", 0755); }
    DriverConfig config_for(const std::string& cpu) const {
        DriverConfig c = config(fake);
        c.cpu_signature = cpu;
        return c;
    }
    // A sandbox stopped with memory saved on `cpu` (a crashed create walked to stopped).
    std::string stopped(VmmDriver& driver, const std::string& cpu, bool memory = true) {
        REQUIRE_FALSE(driver.create(spec()).has_value());
        std::string id;
        const std::vector<SandboxRecord> all = store->list_sandboxes({}).value();
        for (const auto& s : all) {
            if (s.state == SandboxState::Crashed) {
                id = s.id;
            }
        }
        REQUIRE(store->change_state(id, {SandboxState::Creating, 1, std::nullopt}).has_value());
        REQUIRE(store->change_state(id, {SandboxState::Stopped, 1, std::nullopt}).has_value());
        const SandboxFiles f(state, id);
        if (memory) {
            write_file(f.memory(), std::string(4096, 'm'));
            REQUIRE(write_cpu_signature(f.memory(), cpu).has_value());
        }
        return id;
    }
    std::vector<std::string> new_lines(std::size_t& seen) const {
        auto all = lines_of(args);
        std::vector<std::string> fresh(all.begin() + static_cast<long>(std::min(seen, all.size())), all.end());
        seen = all.size();
        return fresh;
    }
};

std::string backing_of(const std::string& qcow2) {
    const std::string disk = read_file(qcow2);
    REQUIRE(disk.size() > 64);
    return disk.substr(be64(disk, 8), be64(disk, 16) >> 32);
}

}  // namespace

TEST_CASE("a CPU signature: vendor, family, model, stepping and a hash of the flags in any order") {
    const std::string a =
        "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\nstepping\t: 1\n"
        "flags\t\t: fpu sse avx2\n\nprocessor\t: 1\nvendor_id\t: Other\n";
    auto sig = cpu_signature_of(a);
    REQUIRE(sig.has_value());
    CHECK(sig->starts_with("AuthenticAMD/26/2/1/"));
    CHECK(sig->size() == std::string("AuthenticAMD/26/2/1/").size() + 16);
    std::string reordered = a;
    reordered.replace(reordered.find("fpu sse avx2"), 12, "avx2 fpu sse");
    CHECK(cpu_signature_of(reordered).value() == *sig);
    std::string fewer = a;
    fewer.replace(fewer.find("fpu sse avx2"), 12, "fpu sse     ");
    CHECK(cpu_signature_of(fewer).value() != *sig);
    std::string other_model = a;
    other_model.replace(other_model.find("model\t\t: 2"), 10, "model\t\t: 3");
    CHECK(cpu_signature_of(other_model).value() != *sig);
    CHECK(cpu_signature_of("processor : 0\n").error().code == "not_found");
    CHECK(host_cpu_signature().has_value());  // this host's /proc/cpuinfo
}

TEST_CASE("why saved memory is not restored: no memory, another machine, another CPU") {
    CHECK(cold_start_reason(true, false, "cpu-a", "cpu-a").empty());
    CHECK(cold_start_reason(true, false, "", "cpu-a").empty());  // an older sbxd's: tried
    CHECK(cold_start_reason(false, false, "cpu-a", "cpu-a") == "no_memory_snapshot");
    CHECK(cold_start_reason(true, true, "cpu-a", "cpu-a") == "resized");
    CHECK(cold_start_reason(true, false, "cpu-b", "cpu-a") == "cpu_mismatch");
}

TEST_CASE("a named snapshot of a stopped sandbox: its memory linked, its disk frozen; names used once") {
    SnapshotFixture fx;
    VmmDriver driver(*fx.store, fx.config_for("cpu-a"));
    const std::string id = fx.stopped(driver, "cpu-a");
    const SandboxFiles f(fx.state, id);
    auto snap = driver.snapshot(id, {"py-ready"});
    REQUIRE(snap.has_value());
    CHECK(snap->name == "py-ready");
    CHECK(snap->source_sandbox_id == id);
    CHECK(snap->from == "default");
    CHECK(snap->has_memory);
    CHECK(snap->cpus == 1);
    CHECK(snap->memory_mib == 256);
    CHECK(snap->disk_gib == 1);
    CHECK(snap->cpu_signature == "cpu-a");
    CHECK(snap->size_bytes > 4096);
    CHECK(fx.store->get_snapshot("py-ready").value() == *snap);
    const SandboxFiles saved = SandboxFiles::in_dir(fx.state + "/snapshots/py-ready");
    const auto layers = read_lines(saved.layers_list());
    REQUIRE(layers.size() == 1);
    CHECK(layers[0].starts_with(fx.state + "/layers/" + id + "-"));
    CHECK(backing_of(f.disk()) == layers[0]);  // the sandbox goes on over the frozen disk
    CHECK(read_lines(f.layers_list()) == layers);
    struct stat a{}, b{};
    REQUIRE(::stat(f.memory().c_str(), &a) == 0);
    REQUIRE(::stat(saved.memory().c_str(), &b) == 0);
    CHECK(a.st_ino == b.st_ino);  // a second name, nothing copied
    CHECK(read_cpu_signature(saved.memory()) == "cpu-a");
    CHECK(read_lines(saved.image_file()) == std::vector<std::string>{"default"});
    CHECK(fx.store->get_sandbox(id)->state == SandboxState::Stopped);

    CHECK(driver.snapshot(id, {"py-ready"}).error().code == "already_exists");
    CHECK(driver.snapshot(id, {"default"}).error().code == "already_exists");  // an image's name
    CHECK(driver.snapshot(id, {"slim"}).error().code == "already_exists");     // one not built here too
    CHECK(driver.snapshot("sbx_none", {"x"}).error().code == "not_found");
    REQUIRE(fx.store->change_state(id, {SandboxState::Creating, 1, std::nullopt}).has_value());
    REQUIRE(fx.store->change_state(id, {SandboxState::Crashed, 1, std::nullopt}).has_value());
    CHECK(driver.snapshot(id, {"late"}).error().code == "invalid_state");
    CHECK(fx.store->list_snapshots()->size() == 1);
    CHECK(fs::exists(fx.state + "/snapshots"));
    for (fs::directory_iterator it(fx.state + "/snapshots"), end; it != end; ++it) {
        CHECK(it->path().filename() == "py-ready");  // no half-made folder left
    }
    CHECK(driver.remove_snapshot("nope").error().code == "not_found");
}

TEST_CASE("a create from a named snapshot restores its memory only on the same machine and CPU") {
    SnapshotFixture fx;
    std::size_t seen = 0;
    std::string layer;
    {
        VmmDriver driver(*fx.store, fx.config_for("cpu-a"));
        const std::string id = fx.stopped(driver, "cpu-a");
        REQUIRE(driver.snapshot(id, {"py-ready"}).has_value());
        const std::string disk_only = fx.stopped(driver, "cpu-a", false);
        REQUIRE(driver.snapshot(disk_only, {"disk-only"}).has_value());
        layer = read_lines(fx.state + "/snapshots/py-ready/layers.txt").back();
        fx.new_lines(seen);

        CreateSpec spec = fx.spec();
        spec.request.from = "py-ready";
        // Same CPU and machine: the memory is tried (the fake fails it), then a cold boot.
        auto created = driver.create(spec);
        REQUIRE_FALSE(created.has_value());
        CHECK(created.error().code == "no_ready_machine");
        auto lines = fx.new_lines(seen);
        REQUIRE(lines.size() == 2);
        CHECK(restores(lines[0]));
        CHECK(lines[0].find("--restore " + fx.state + "/sandboxes/sbx_") != std::string::npos);
        CHECK_FALSE(restores(lines[1]));
        CHECK(lines[1].find("--kernel " + fx.images + "/kernel/aaaa/vmlinux") != std::string::npos);
        // The new sandbox: named after the snapshot, its disk an overlay on the snapshot's layer.
        SandboxRecord made;
        const std::vector<SandboxRecord> all = fx.store->list_sandboxes({}).value();
        for (const auto& s : all) {
            if (s.from == "py-ready") {
                made = s;
            }
        }
        REQUIRE_FALSE(made.id.empty());
        const SandboxFiles mf(fx.state, made.id);
        CHECK(backing_of(mf.disk()) == layer);
        CHECK(read_lines(mf.layers_list()) == std::vector<std::string>{layer});
        CHECK(read_lines(mf.image_file()) == std::vector<std::string>{"default"});
        CHECK_FALSE(fs::exists(mf.memory()));  // a cold boot leaves no stale memory

        // cold, another machine, no memory: straight to a cold boot.
        CreateSpec cold = spec;
        cold.request.cold = true;
        CreateSpec resized = spec;
        resized.shape.memory_mib = 512;
        CreateSpec no_memory = spec;
        no_memory.request.from = "disk-only";
        for (CreateSpec s : {cold, resized, no_memory}) {
            s.id = new_sandbox_id().value();
            REQUIRE_FALSE(driver.create(s).has_value());
            lines = fx.new_lines(seen);
            REQUIRE(lines.size() == 1);
            CHECK_FALSE(restores(lines[0]));
        }
    }
    {
        // Another CPU (sbxd's --cpu-signature-override): no restore is tried.
        VmmDriver driver(*fx.store, fx.config_for("cpu-b"));
        CreateSpec spec = fx.spec();
        spec.request.from = "py-ready";
        REQUIRE_FALSE(driver.create(spec).has_value());
        auto lines = fx.new_lines(seen);
        REQUIRE(lines.size() == 1);
        CHECK_FALSE(restores(lines[0]));
        CreateSpec image = fx.spec();
        image.request.from = "nope";
        CHECK(driver.create(image).error().code == "not_found");
    }
}

TEST_CASE("a resume whose memory was saved on another CPU cold-boots; on the same CPU it is restored") {
    SnapshotFixture fx;
    VmmDriver driver(*fx.store, fx.config_for("cpu-a"));
    std::size_t seen = 0;
    const std::string other = fx.stopped(driver, "cpu-b");
    const std::string same = fx.stopped(driver, "cpu-a");
    fx.new_lines(seen);
    REQUIRE_FALSE(driver.resume(other, {}).has_value());
    auto lines = fx.new_lines(seen);
    REQUIRE(lines.size() == 1);
    CHECK_FALSE(restores(lines[0]));
    CHECK_FALSE(SandboxFiles(fx.state, other).has_memory());  // stale once the disk moved on
    REQUIRE_FALSE(driver.resume(same, {}).has_value());
    lines = fx.new_lines(seen);
    REQUIRE(lines.size() == 2);
    CHECK(restores(lines[0]));  // then restore_failed: a cold boot
    CHECK_FALSE(restores(lines[1]));
}

TEST_CASE("layers: a snapshot's stays while it or a sandbox made from it lists it") {
    SnapshotFixture fx;
    VmmDriver driver(*fx.store, fx.config_for("cpu-a"));
    const std::string parent = fx.stopped(driver, "cpu-a");
    REQUIRE(driver.snapshot(parent, {"base"}).has_value());
    const std::string layer = read_lines(fx.state + "/snapshots/base/layers.txt").back();
    CreateSpec spec = fx.spec();
    spec.request.from = "base";
    REQUIRE_FALSE(driver.create(spec).has_value());  // crashed, with its disk on the layer
    std::string child;
    const std::vector<SandboxRecord> all = fx.store->list_sandboxes({}).value();
    for (const auto& s : all) {
        if (s.from == "base") {
            child = s.id;
        }
    }
    REQUIRE_FALSE(child.empty());
    REQUIRE(driver.remove(parent).has_value());
    CHECK(fs::exists(layer));  // the snapshot and the child
    REQUIRE(driver.remove_snapshot("base").has_value());
    CHECK(fx.store->get_snapshot("base").error().code == "not_found");
    CHECK_FALSE(fs::exists(fx.state + "/snapshots/base"));
    CHECK(fs::exists(layer));  // the child
    REQUIRE(driver.remove(child).has_value());
    CHECK_FALSE(fs::exists(layer));
    CHECK(driver.remove_snapshot("base").error().code == "not_found");
}

TEST_CASE("recover(): a snapshot cut short is removed, a row without its folder forgotten") {
    SnapshotFixture fx;
    write_file(fx.state + "/snapshots/.tmp-half-00ff/layers.txt", "/nowhere\n");
    REQUIRE(fx.store->add_snapshot({"lost", "sbx_1", false, "default", 1, 1}).has_value());
    write_file(fx.state + "/snapshots/kept/layers.txt", "/nowhere\n");
    REQUIRE(fx.store->add_snapshot({"kept", "sbx_1", false, "default", 1, 1}).has_value());
    VmmDriver driver(*fx.store, fx.config_for("cpu-a"));
    REQUIRE(driver.recover().has_value());
    CHECK_FALSE(fs::exists(fx.state + "/snapshots/.tmp-half-00ff"));
    CHECK(fx.store->get_snapshot("lost").error().code == "not_found");
    CHECK(fx.store->get_snapshot("kept").has_value());
}
