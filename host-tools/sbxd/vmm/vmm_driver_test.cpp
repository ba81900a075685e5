// The VMM driver without a guest: sandbox folders, images, CIDs, and the
// driver itself with stand-ins for sbx-vmm that never bring up an agent
// (a boot that fails must leave a crashed sandbox and no process), and
// recover() over rows an earlier sbxd left.
#include <doctest/doctest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <sstream>
#include <thread>

#include "base/unix_socket.hpp"
#include "devices/virtio/blk/qcow2/qcow2_create.hpp"
#include "host-tools/sbxd/sandbox/process_identity.hpp"
#include "host-tools/sbxd/vmm/boot_images.hpp"
#include "host-tools/sbxd/vmm/cid_allocator.hpp"
#include "host-tools/sbxd/vmm/driver_test_fixture.hpp"
#include "host-tools/sbxd/vmm/guest_api.hpp"
#include "host-tools/sbxd/vmm/vmm_driver.hpp"
#include "host-tools/sbxd/vmm/vmm_launch.hpp"
#include "host-tools/sbxd/vmm/vmm_process.hpp"

using namespace sbx;
using namespace sbx::sbxd;
using namespace sbx::sbxd::testing;
using namespace std::chrono_literals;

TEST_CASE("CIDs: the lowest free one from 3, each live VMM its own") {
    CidAllocator cids;
    CHECK(cids.allocate() == 3U);
    CHECK(cids.allocate() == 4U);
    CHECK(cids.reserve(6));
    CHECK_FALSE(cids.reserve(6));
    CHECK_FALSE(cids.reserve(2));  // the host's
    CHECK(cids.allocate() == 5U);
    CHECK(cids.allocate() == 7U);
    cids.release(4);
    CHECK(cids.allocate() == 4U);
    CidAllocator small(4);
    CHECK(small.allocate() == 3U);
    CHECK_FALSE(small.allocate().has_value());
}

TEST_CASE("a sandbox folder: its files, vmm.json written whole and read back") {
    TempDir dir{"sbxd-driver-test"};
    SandboxFiles f(dir.path(), "sbx_1");
    CHECK(f.dir() == dir.path() + "/sandboxes/sbx_1");
    REQUIRE(f.create().has_value());
    CHECK_FALSE(f.create().has_value());
    CHECK_FALSE(f.read_vmm().has_value());
    VmmFile vmm{"00ff", 7, VmmProcess{1234, 99, f.control_socket()}};
    REQUIRE(f.write_vmm(vmm).has_value());
    auto back = f.read_vmm();
    REQUIRE(back.has_value());
    CHECK(*back == vmm);
    CHECK(read_file(f.vmm_file()).find("\"uds\":\"" + f.vsock_socket() + "\"") != std::string::npos);
    struct stat st{};
    REQUIRE(::stat(f.vmm_file().c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);  // it holds the agent's token
    write_file(f.vmm_file(), "{\"token\":1}");
    CHECK_FALSE(f.read_vmm().has_value());
    CHECK_FALSE(f.has_memory());
    write_file(f.memory(), "m");
    CHECK(f.has_memory());
    REQUIRE(f.remove().has_value());
    CHECK_FALSE(fs::exists(f.dir()));
    CHECK(f.remove().has_value());
}

TEST_CASE("the sbx-vmm command lines of a cold boot and of a restore") {
    SandboxFiles f("/s", "sbx_1");
    LaunchSpec cold{"sbx-vmm", 5, "/k/vmlinux", 2, 1024, "abcd", {}};
    auto args = vmm_arguments(cold, f);
    auto has = [&](const std::string& flag, const std::string& value) {
        for (std::size_t i = 0; i + 1 < args.size(); ++i) {
            if (args[i] == flag && args[i + 1] == value) {
                return true;
            }
        }
        return false;
    };
    CHECK(has("--kernel", "/k/vmlinux"));
    CHECK(has("--disk", "/s/sandboxes/sbx_1/disk.qcow2,backing=on"));
    CHECK(has("--vsock", "cid=5,uds=/s/sandboxes/sbx_1/vmm/vsock.sock"));
    CHECK(has("--snapshot-dir", "/s/sandboxes/sbx_1/vmm"));
    CHECK(has("--control", "/s/sandboxes/sbx_1/vmm/control.sock"));
    CHECK(std::find(args.begin(), args.end(), "--jail") == args.end());
    CHECK(has("--cpus", "2"));
    CHECK(has("--memory", "1024"));
    auto cmdline = std::find(args.begin(), args.end(), "--cmdline");
    REQUIRE(cmdline != args.end());
    CHECK(cmdline[1].find("root=/dev/vda") != std::string::npos);
    CHECK(cmdline[1].find("sbx.token=abcd") != std::string::npos);
    LaunchSpec restore = cold;
    restore.restore_from = "/s/sandboxes/sbx_0/memory.snap";
    args = vmm_arguments(restore, f);
    CHECK(has("--restore", "/s/sandboxes/sbx_0/memory.snap"));
    CHECK(has("--restore-mode", "private"));
    CHECK(has("--disk", "/s/sandboxes/sbx_1/disk.qcow2,backing=on"));
    CHECK(std::find(args.begin(), args.end(), "--kernel") == args.end());
    CHECK(std::find(args.begin(), args.end(), "--cmdline") == args.end());
    // Jailed: in vmm/ alone, as its own uid and gid.
    restore.jail_uid = 0x70000005;
    args = vmm_arguments(restore, f);
    CHECK(has("--jail", "/s/sandboxes/sbx_1/vmm"));
    CHECK(has("--jail-user", "1879048197:1879048197"));
    // The console log's bound, when there is one.
    CHECK(std::find(args.begin(), args.end(), "--console-max-bytes") == args.end());
    restore.console_max_bytes = 1 << 20;
    args = vmm_arguments(restore, f);
    CHECK(has("--console", "append:/s/sandboxes/sbx_1/console.log"));
    CHECK(has("--console-max-bytes", "1048576"));
}

namespace {

// A VMM's control socket that answers one request with {"ok":true} after
// `act` (what the VMM did in its vmm/ folder).
std::thread fake_snapshot_vmm(const std::string& socket, std::function<void()> act) {
    auto listener = listen_unix(socket);
    REQUIRE(listener);
    return std::thread([server = std::make_shared<UniqueFd>(std::move(*listener)), act = std::move(act)] {
        UniqueFd conn(::accept4(server->get(), nullptr, nullptr, SOCK_CLOEXEC));
        char line[4096];
        if (!conn || ::read(conn.get(), line, sizeof line) <= 0) {
            return;
        }
        act();
        const std::string reply = "{\"ok\":true}\n";
        (void)::write(conn.get(), reply.data(), reply.size());
    });
}

}  // namespace

TEST_CASE("a saved memory is moved up from vmm/ only when the VMM left a regular file there") {
    TempDir dir{"sbxd-save"};
    SandboxFiles f = SandboxFiles::in_dir(dir.file("sbx"));
    REQUIRE(f.create().has_value());
    REQUIRE(f.prepare_vmm_dir(std::nullopt).has_value());
    const VmmProcess vmm{1, 1, f.control_socket()};

    auto honest = fake_snapshot_vmm(f.control_socket(), [&] { write_file(f.vmm_memory(), "memory"); });
    REQUIRE(save_memory(vmm, f, 10s).has_value());
    honest.join();
    CHECK(read_file(f.memory()) == "memory");
    CHECK_FALSE(fs::exists(f.vmm_memory()));
    ::unlink(f.control_socket().c_str());

    // A VMM that plants a link to a host file: the next restore would map it.
    write_file(dir.file("host-secret"), "secret");
    auto planted = fake_snapshot_vmm(f.control_socket(), [&] {
        REQUIRE(::symlink(dir.file("host-secret").c_str(), f.vmm_memory().c_str()) == 0);
    });
    auto refused = save_memory(vmm, f, 10s);
    planted.join();
    REQUIRE_FALSE(refused.has_value());
    CHECK(refused.error().code == "invalid");
    CHECK_FALSE(fs::exists(f.memory()));
    CHECK_FALSE(fs::is_symlink(f.vmm_memory()));
    CHECK(read_file(dir.file("host-secret")) == "secret");
}

TEST_CASE("a boot whose agent never answers leaves a crashed sandbox, its disk and no VMM") {
    Fixture fx;
    // Records its arguments and its pid, then waits for ever. (A create
    // that fails starts no warm template build.)
    const std::string fake = fx.dir.path() + "/fake-vmm";
    write_file(fake, "#!/bin/sh\necho \"$@\" >> " + fx.dir.path() + "/args\necho $$ >> " + fx.dir.path() +
                         "/pids\nexec sleep 600\n",
               0755);
    std::string id;
    {
        VmmDriver driver(*fx.store, fx.config(fake));
        auto created = driver.create(fx.spec());
        REQUIRE_FALSE(created.has_value());
        CHECK(created.error().code == "no_ready_machine");
        auto all = fx.store->list_sandboxes({});
        REQUIRE(all->size() == 1);
        const SandboxRecord s = all->front();
        id = s.id;
        CHECK(s.state == SandboxState::Crashed);
        CHECK_FALSE(s.vmm.has_value());
        const SandboxFiles f(fx.state, s.id);
        // The disk: a qcow2 overlay (magic "QFI\xfb") naming the image as its backing file.
        const std::string disk = read_file(f.disk());
        REQUIRE(disk.size() > 64);
        CHECK(disk.substr(0, 4) == "QFI\xfb");
        const std::string backing = disk.substr(be64(disk, 8), be64(disk, 16) >> 32);
        CHECK(backing == fx.images + "/rootfs-full/bbbb/rootfs.ext4");
        std::string line;
        std::istringstream args(read_file(fx.dir.path() + "/args"));
        for (std::string l; std::getline(args, l);) {
            if (l.find("--disk " + f.disk()) != std::string::npos) {
                line = l;
            }
        }
        REQUIRE_FALSE(line.empty());
        CHECK(line.find(",uds=" + f.vsock_socket()) != std::string::npos);
        CHECK(line.find("sbx.token=" + f.read_vmm()->token) != std::string::npos);
        CHECK(f.read_vmm()->process.pid == 0);
        CHECK(driver.agent(s.id).error().code == "invalid_state");
        REQUIRE(driver.remove(s.id).has_value());
        CHECK(fx.store->get_sandbox(s.id).error().code == "not_found");
        CHECK_FALSE(fs::exists(f.dir()));
    }
    // The driver is gone: no fake VMM runs, and no template was begun.
    std::istringstream pids(read_file(fx.dir.path() + "/pids"));
    int count = 0;
    for (std::string p; std::getline(pids, p); ++count) {
        CHECK(::kill(std::stoi(p), 0) != 0);
    }
    CHECK(count == 1);
    CHECK_FALSE(fs::exists(fx.state + "/templates"));
}

TEST_CASE("a VMM that exits at once fails the create without waiting for the deadline") {
    Fixture fx;
    const std::string fake = fx.dir.path() + "/fake-vmm";
    write_file(fake, "#!/bin/sh\necho 'no KVM here' >&2\nexit 1\n", 0755);
    DriverConfig config = fx.config(fake);
    config.boot_timeout = 60s;
    VmmDriver driver(*fx.store, config);
    auto start = std::chrono::steady_clock::now();
    auto created = driver.create(fx.spec());
    CHECK(std::chrono::steady_clock::now() - start < 30s);
    REQUIRE_FALSE(created.has_value());
    CHECK(created.error().code == "no_ready_machine");
    CHECK(created.error().message.find("no KVM here") != std::string::npos);
    CHECK(created.error().message.find("exit code 1") != std::string::npos);

    CreateSpec unknown = fx.spec();
    unknown.request.from = "python";
    CHECK(driver.create(unknown).error().code == "not_found");
    CHECK(fx.store->list_sandboxes({})->size() == 1);  // refused before any row
}

TEST_CASE("cancel_starts() ends a boot waiting for its agent at once: crashed, no VMM") {
    Fixture fx;
    const std::string fake = fx.dir.path() + "/fake-vmm";
    write_file(fake, "#!/bin/sh\necho $$ >> " + fx.dir.path() + "/pids\nexec sleep 600\n", 0755);
    DriverConfig config = fx.config(fake);
    config.boot_timeout = 120s;
    {
        VmmDriver driver(*fx.store, config);
        auto start = std::chrono::steady_clock::now();
        std::thread canceller([&driver] {
            std::this_thread::sleep_for(500ms);
            driver.cancel_starts();
        });
        auto created = driver.create(fx.spec());
        canceller.join();
        CHECK(std::chrono::steady_clock::now() - start < 30s);
        REQUIRE_FALSE(created.has_value());
        CHECK(created.error().code == "no_ready_machine");
        CHECK(created.error().message.find("sbxd is stopping") != std::string::npos);
        auto all = fx.store->list_sandboxes({});
        REQUIRE(all->size() == 1);
        CHECK(all->front().state == SandboxState::Crashed);
    }
    std::istringstream pids(read_file(fx.dir.path() + "/pids"));
    for (std::string p; std::getline(pids, p);) {
        CHECK(::kill(std::stoi(p), 0) != 0);
    }
}

TEST_CASE("a fork's Idempotency-Key: its children recorded, the same key replayed, one in progress refused") {
    Fixture fx;
    // Never brings up an agent: every boot fails after the boot timeout.
    const std::string fake = fx.dir.path() + "/fake-vmm";
    write_file(fake, "#!/bin/sh\nexec sleep 600\n", 0755);
    VmmDriver driver(*fx.store, fx.config(fake));
    // Two stopped parents with disks: creates that crashed, walked to stopped.
    std::vector<std::string> parents;
    for (int i = 0; i < 2; ++i) {
        REQUIRE_FALSE(driver.create(fx.spec()).has_value());
    }
    const std::vector<SandboxRecord> crashed = fx.store->list_sandboxes({}).value();
    for (const auto& s : crashed) {
        REQUIRE(fx.store->change_state(s.id, {SandboxState::Creating, 1, std::nullopt}).has_value());
        REQUIRE(fx.store->change_state(s.id, {SandboxState::Stopped, 1, std::nullopt}).has_value());
        parents.push_back(s.id);
    }
    api::ForkRequest request;
    request.count = 2;
    request.memory = false;  // children cold-boot
    const IdempotencyClaim claim{"fork-key", "hash-of-body"};
    auto second = std::async(std::launch::async, [&] {
        // Once the first fork has made its children, the same key on the other parent.
        while (fx.store->list_sandboxes({}).value().size() < 4) {
            std::this_thread::sleep_for(10ms);
        }
        return driver.fork(parents[1], request, claim, {"sbx_c3", "sbx_c4"});
    });
    auto first = driver.fork(parents[0], request, claim, {"sbx_c1", "sbx_c2"});
    REQUIRE_FALSE(first.has_value());
    CHECK(first.error().code == "no_ready_machine");
    auto refused = second.get();
    REQUIRE_FALSE(refused.has_value());
    CHECK(refused.error().code == "idempotency_conflict");
    auto recorded = fx.store->find_fork_claim(claim, system_now()).value();
    REQUIRE(recorded.size() == 2);
    CHECK(recorded[0].state == SandboxState::Crashed);
    auto replayed = driver.fork(parents[0], request, claim, {"sbx_c5", "sbx_c6"});
    REQUIRE(replayed.has_value());
    REQUIRE(replayed->size() == 2);
    CHECK((*replayed)[0].id == recorded[0].id);
    CHECK((*replayed)[1].id == recorded[1].id);
    CHECK(fx.store->list_sandboxes({}).value().size() == 4);  // no child made again
    const std::vector<SandboxRecord> all = fx.store->list_sandboxes({}).value();
    for (const auto& s : all) {
        REQUIRE(driver.remove(s.id).has_value());
    }
}

TEST_CASE("recover(): gone VMMs crash, unfinished creates and resumes roll back, stops and deletes finish") {
    Fixture fx;
    auto add = [&](const std::string& id, SandboxState state, std::optional<VmmProcess> vmm, bool started) {
        SandboxRecord s;
        s.id = s.name = id;
        s.from = "default";
        s.size = "custom";
        s.cpus = 1;
        s.memory_mib = 256;
        s.disk_gib = 1;
        s.created_at = s.last_activity_at = 1000;
        REQUIRE(fx.store->create_sandbox(s, std::nullopt).has_value());
        // Walk the state machine to where an earlier sbxd left it.
        auto to = [&](SandboxState next, std::optional<VmmProcess> v) {
            REQUIRE(fx.store->change_state(id, {next, 2000, v}).has_value());
        };
        if (started || state != SandboxState::Creating) {
            to(SandboxState::Running, vmm);
        }
        if (state == SandboxState::Stopping) {
            to(SandboxState::Stopping, vmm);
        }
        if (state == SandboxState::Deleting) {
            to(SandboxState::Deleting, std::nullopt);
        }
        if (state == SandboxState::Creating && started) {
            to(SandboxState::Stopping, std::nullopt);
            to(SandboxState::Stopped, std::nullopt);
            to(SandboxState::Creating, std::nullopt);
        }
        SandboxFiles f(fx.state, id);
        REQUIRE(f.create().has_value());
        REQUIRE(f.write_vmm(VmmFile{"00ff", 3, vmm.value_or(VmmProcess{})}).has_value());
        return f;
    };
    // A live process that is not a VMM: no control socket answers, so it is
    // killed and the sandbox crashed.
    auto impostor = spawn_process({"/bin/sleep", {"600"}, fx.dir.path() + "/sleep.log"});
    REQUIRE(impostor.has_value());
    impostor->control_socket = fx.dir.path() + "/none.sock";
    add("sbx_running_gone", SandboxState::Running, VmmProcess{999'999'999, 5, "/x"}, true);
    add("sbx_running_impostor", SandboxState::Running, *impostor, true);
    auto unfinished = add("sbx_half_created", SandboxState::Creating, std::nullopt, false);
    auto resumed_early = add("sbx_half_resumed", SandboxState::Creating, std::nullopt, true);
    write_file(resumed_early.memory(), "memory");
    auto resumed_late = add("sbx_resumed_launched", SandboxState::Creating, VmmProcess{999'999'999, 5, "/x"}, true);
    write_file(resumed_late.memory(), "memory");
    auto deleting = add("sbx_half_deleted", SandboxState::Deleting, std::nullopt, true);
    // A VMM nobody recorded: a process with a --snapshot-dir in this state dir.
    auto stray = spawn_process({"/bin/sh",
                                {"-c", "sleep 600", "--snapshot-dir", fx.state + "/sandboxes/sbx_never_recorded"},
                                fx.dir.path() + "/stray.log"});
    REQUIRE(stray.has_value());
    auto saved = add("sbx_stop_saved", SandboxState::Stopping, VmmProcess{999'999'999, 5, "/x"}, true);
    write_file(saved.memory(), "memory");
    add("sbx_stop_unsaved", SandboxState::Stopping, VmmProcess{999'999'999, 5, "/x"}, true);

    VmmDriver driver(*fx.store, fx.config("/bin/false"));
    auto adopted = driver.recover();
    REQUIRE(adopted.has_value());
    CHECK(*adopted == 0);
    auto state_of = [&](const std::string& id) { return fx.store->get_sandbox(id)->state; };
    CHECK(state_of("sbx_running_gone") == SandboxState::Crashed);
    CHECK(state_of("sbx_running_impostor") == SandboxState::Crashed);
    CHECK_FALSE(is_same_process_alive(*impostor));
    CHECK(fx.store->get_sandbox("sbx_half_created").error().code == "not_found");
    CHECK_FALSE(fs::exists(unfinished.dir()));
    CHECK(state_of("sbx_half_resumed") == SandboxState::Stopped);  // no VMM ran from its memory
    CHECK(fs::exists(resumed_early.memory()));
    CHECK(state_of("sbx_resumed_launched") == SandboxState::Crashed);
    CHECK_FALSE(fs::exists(resumed_late.memory()));  // stale once a guest ran from it
    CHECK(fx.store->get_sandbox("sbx_half_deleted").error().code == "not_found");
    CHECK_FALSE(fs::exists(deleting.dir()));
    CHECK_FALSE(is_same_process_alive(*stray));
    CHECK(state_of("sbx_stop_saved") == SandboxState::Stopped);
    CHECK(state_of("sbx_stop_unsaved") == SandboxState::Crashed);
    CHECK_FALSE(fx.store->get_sandbox("sbx_stop_saved")->vmm.has_value());
}

TEST_CASE("/etc/sandboxer/env: the identity, the operator's defaults unless noEnv, the sandbox's own last") {
    SandboxRecord s;
    s.id = "sbx_00ff";
    s.env = {{"A", "mine"}, {"B", "two words"}};
    const StringMap defaults = {{"A", "operator"}, {"C", "secret"}};
    const std::string text = guest_env_file(s, "sbxk_t", defaults);
    CHECK(text.find("SANDBOXER_ID=sbx_00ff\n") != std::string::npos);
    CHECK(text.find("SANDBOXER_SUBDOMAIN=sbx-00ff\n") != std::string::npos);
    CHECK(text.find("SANDBOXER_API_URL=http://127.0.0.1:7070\n") != std::string::npos);
    CHECK(text.find("SANDBOXER_TOKEN=sbxk_t\n") != std::string::npos);
    CHECK(text.find("A=mine\n") != std::string::npos);
    CHECK(text.find("A=operator") == std::string::npos);
    CHECK(text.find("B=two words\n") != std::string::npos);
    CHECK(text.find("C=secret\n") != std::string::npos);
    s.no_env = true;
    CHECK(guest_env_file(s, "sbxk_t", defaults).find("C=secret") == std::string::npos);
}

TEST_CASE("the guest's host name: the sandbox's name when it is one (RFC 1123), else its subdomain") {
    SandboxRecord s;
    s.id = "sbx_00ff";
    s.name = s.id;  // today's names: an '_' is no host-name character
    CHECK(sandbox_hostname(s) == "sbx-00ff");
    s.name = "Web-1";
    CHECK(sandbox_hostname(s) == "web-1");
    s.name = "";
    CHECK(sandbox_hostname(s) == "sbx-00ff");
    s.name = std::string(65, 'a');
    CHECK(sandbox_hostname(s) == "sbx-00ff");
    s.name = "-x";
    CHECK(sandbox_hostname(s) == "sbx-00ff");
}

TEST_CASE("a qcow2 image's virtual size is read from its header") {
    TempDir dir{"sbxd-qcow2-size"};
    const std::string disk = dir.path() + "/disk.qcow2";
    REQUIRE(qcow2::create_overlay(disk, "", qcow2::BackingFormat::None, 3ULL << 30).has_value());
    CHECK(qcow2_virtual_size(disk).value() == 3ULL << 30);
    const std::string raw = dir.path() + "/raw.img";
    std::ofstream(raw) << std::string(64, '\0');
    CHECK_FALSE(qcow2_virtual_size(raw));
    CHECK_FALSE(qcow2_virtual_size(dir.path() + "/missing"));
}
