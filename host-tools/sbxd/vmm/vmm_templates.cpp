// Warm templates (docs/sbxd.md, "Warm templates"): for each image and
// machine (vCPUs, memory and disk size must match a restore), the image
// booted once to agent-ready, its memory saved raw and its disk frozen,
// under state-dir/templates/<image>-<shape>-<hash of the image paths>/.
// A create restores from it copy-on-write and gives the guest a fresh
// identity (generation, RNG seed, token) and its own CID; without one it
// cold-boots and has one built in the background. A template is built in a
// .tmp- folder and renamed into place whole. Its disk is the size of the
// sandboxes made from it (the folder's name has it): the guest grows its
// root file system to the disk at boot (sbx-growfs.service, beside the
// agent), and the build waits for that before saving, so the template's
// disk and memory hold the grown file system and no sandbox grows it again.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "base/log.hpp"
#include "devices/virtio/blk/qcow2/qcow2_create.hpp"
#include "guest-agent/exec/exec_client.hpp"
#include "guest-agent/identity/identity_client.hpp"
#include "host-tools/sbxd/crypto/random.hpp"
#include "host-tools/sbxd/vmm/control_client.hpp"
#include "host-tools/sbxd/vmm/cpu_signature.hpp"
#include "host-tools/sbxd/vmm/vmm_driver.hpp"
#include "host-tools/sbxd/vmm/vmm_launch.hpp"
#include "host-tools/sbxd/vmm/vmm_process.hpp"

namespace sbx::sbxd {

namespace {

namespace fs = std::filesystem;

constexpr std::string_view kBuildingMark = ".tmp-";

// The image's unit that grows the root file system to its disk
// (images/rootfs/files/etc/systemd/system/sbx-growfs.service).
constexpr const char* kGrowfsUnit = "sbx-growfs.service";
// An online resize of a few GiB is seconds on hardware, more under TCG.
constexpr std::chrono::minutes kGrowfsTimeout{5};

// Waits for the template guest's file system growth to end: `systemctl
// start` of the unit its boot already queued returns once that job is
// done (at once if it was). Best effort: an image without the unit, or
// without systemd, gets a log line and is saved as it is (a sandbox from
// it then goes on with whatever its boot was doing).
void wait_for_growfs(const SandboxFiles& t, const std::string& token) {
    agent::AgentEndpoint endpoint{t.vsock_socket(), agent::kAgentPort, token};
    endpoint.reply_timeout = kGrowfsTimeout + std::chrono::seconds(30);
    auto client = agent::AgentClient::connect(endpoint);
    if (!client) {
        log::warn("{}: waiting for {}: {}", t.dir(), kGrowfsUnit, client.error().to_string());
        return;
    }
    // As root: the default image's agent runs what names no user as `user`.
    auto done = agent::exec(*client, agent::ExecRequest{.argv = {"systemctl", "start", kGrowfsUnit},
                                                        .user = "root",
                                                        .timeout = kGrowfsTimeout});
    if (!done) {
        log::info("{}: waiting for {}: {}", t.dir(), kGrowfsUnit, done.error().to_string());
    } else if (done->code != 0) {
        log::info("{}: systemctl start {} exited {}: {}", t.dir(), kGrowfsUnit, done->code.value_or(-1),
                  done->stderr_data.substr(0, 300));
    }
}

}  // namespace

std::string VmmDriver::template_dir(const SandboxRecord& like, const BootImage& image) const {
    // A new build of the image (another cache entry) is another template.
    // So is another host CPU: its saved memory would not restore here; and
    // a network card or none (a restore gives the saved machine's devices).
    const std::string image_hash = sha256_hex(image.kernel + "\n" + image.disk + "\n" + config_.cpu_signature +
                                              (config_.network != nullptr ? "\nnet" : ""))
                                       .substr(0, 12);
    return fmt::format("{}/templates/{}-{}c-{}m-{}g-{}", config_.state_dir, like.from, like.cpus, like.memory_mib,
                       like.disk_gib, image_hash);
}

Result<VmmDriver::Started> VmmDriver::boot_from_template(const SandboxRecord& sandbox, const SandboxFiles& files,
                                                         const BootImage& image) {
    const SandboxFiles warm = SandboxFiles::in_dir(template_dir(sandbox, image));
    auto vmm_file = warm.read_vmm();
    if (!warm.has_memory() || !vmm_file) {
        return make_coded_error("not_found", "no warm template at {}", warm.dir());
    }
    if (auto why = cold_start_reason(true, false, read_cpu_signature(warm.memory()), config_.cpu_signature);
        !why.empty()) {
        return make_coded_error(why, "the warm template {} was saved on another CPU", warm.dir());
    }
    if (auto overlay = qcow2::create_overlay(files.disk(), warm.disk(), qcow2::BackingFormat::Qcow2, 0); !overlay) {
        return overlay.error();
    }
    return boot_restore(sandbox.id, files, Restore{warm.memory(), vmm_file->token, 1});
}

void VmmDriver::build_template_later(const SandboxRecord& like, const BootImage& image) {
    const std::string dir = template_dir(like, image);
    std::lock_guard lock(templates_mutex_);
    if (!templates_building_.insert(dir).second) {
        return;
    }
    template_builders_.emplace_back([this, like, image, dir](std::stop_token stop) {
        auto built = build_template(like, image, dir, stop);
        if (built) {
            log::info("warm template {} ready", dir);
        } else {
            log::warn("building the warm template {}: {}", dir, built.error().to_string());
        }
        std::lock_guard done(templates_mutex_);
        templates_building_.erase(dir);
    });
}

Result<void> VmmDriver::build_template(const SandboxRecord& like, const BootImage& image, const std::string& dir,
                                       std::stop_token stop) {
    auto suffix = random_hex(4);
    if (!suffix) {
        return suffix.error();
    }
    const SandboxFiles t = SandboxFiles::in_dir(dir + std::string(kBuildingMark) + *suffix);
    std::error_code ec;
    fs::create_directories(fs::path(dir).parent_path(), ec);
    auto fail = [&](const Error& e) {
        (void)t.remove();
        return e;
    };
    if (auto made = t.create(); !made) {
        return made.error();
    }
    if (auto overlay = make_image_overlay(t.disk(), image, like.disk_gib); !overlay) {
        return fail(overlay.error());
    }
    // boot_cold, but cancellable: sbxd may stop while a template boots.
    auto token = ::sbx::agent::random_token();
    auto cid = cids_.allocate();
    if (!token || !cid) {
        return fail(make_error("no token or no free vsock CID for the template"));
    }
    auto network = template_network();  // its tap goes when the build ends
    if (!network) {
        cids_.release(*cid);
        return fail(network.error());
    }
    LaunchSpec spec{config_.vmm_program, *cid, image.kernel, like.cpus, like.memory_mib, *token, {}};
    if (*network) {
        spec.net = (*network)->card;
    }
    confine(spec, t, like.cpus, like.memory_mib);
    auto process = launch_vmm(spec, t);
    if (!process) {
        cids_.release(*cid);
        return fail(process.error());
    }
    auto end = [&](const Error& e) {
        kill_process_group(*process);
        remove_cgroup(t);
        cids_.release(*cid);
        return fail(e);
    };
    if (auto ready = wait_for_agent(*process, t, *token, config_.boot_timeout, stop); !ready) {
        return end(ready.error());
    }
    wait_for_growfs(t, *token);
    auto saved = save_memory(*process, t, kSnapshotTimeout);
    if (!saved) {
        return end(saved.error());
    }
    if (auto signed_ = write_cpu_signature(t.memory(), config_.cpu_signature); !signed_) {
        return end(signed_.error());
    }
    stop_vmm(*process);
    remove_cgroup(t);
    cids_.release(*cid);
    if (auto written = t.write_vmm(VmmFile{*token, 0, VmmProcess{}}); !written) {
        return fail(written.error());
    }
    ::chmod(t.disk().c_str(), 0400);  // the backing file of every sandbox made from it
    ::chmod(t.memory().c_str(), 0400);
    if (::rename(t.dir().c_str(), dir.c_str()) != 0) {
        return fail(sys_error("renaming {} to {}", t.dir(), dir));  // e.g. another sbxd got there first
    }
    return ok();
}

// A build cut short by sbxd's end: its VMM (its own session) is killed and
// its folder removed.
void VmmDriver::remove_unfinished_templates() {
    std::error_code ec;
    for (fs::directory_iterator it(config_.state_dir + "/templates", ec), end; !ec && it != end;
         it.increment(ec)) {
        if (it->path().filename().string().find(kBuildingMark) == std::string::npos) {
            continue;
        }
        const SandboxFiles t = SandboxFiles::in_dir(it->path().string());
        if (auto vmm = t.read_vmm(); vmm && vmm->process.pid > 0) {
            kill_process_group(vmm->process);
        }
        remove_cgroup(t);
        log::info("removing the unfinished template build {}", t.dir());
        (void)t.remove();
    }
}

}  // namespace sbx::sbxd
