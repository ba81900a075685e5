// What a starting sbxd finds (docs/sbxd.md, "Restart"), and the watch
// for VMMs that end on their own while their sandbox runs.
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <thread>

#include "base/log.hpp"
#include "host-tools/sbxd/sandbox/process_identity.hpp"
#include "host-tools/sbxd/vmm/control_client.hpp"
#include "host-tools/sbxd/vmm/vmm_driver.hpp"
#include "host-tools/sbxd/vmm/vmm_exit_cause.hpp"
#include "host-tools/sbxd/vmm/vmm_process.hpp"

namespace sbx::sbxd {

namespace {

// The VMM of an adopted sandbox runs its guest: a fork or stop cut short
// after its memory snapshot left it paused (docs/vmm-control.md, status).
void keep_running(const std::string& id, const VmmProcess& process) {
    auto status = control_call(process.control_socket, {{"op", "status"}}, std::chrono::seconds(5));
    if (status && status->value("state", "") == "paused") {
        log::info("sandbox {}: its VMM was left paused; resuming it", id);
        if (auto resumed = control_call(process.control_socket, {{"op", "resume"}}); !resumed) {
            log::warn("sandbox {}: resuming its VMM: {}", id, resumed.error().to_string());
        }
    }
}

std::string without_trailing_slash(std::string path) {
    while (path.size() > 1 && path.back() == '/') {
        path.pop_back();
    }
    return path;
}

}  // namespace

Result<int> VmmDriver::recover() {
    // The taps first: an adopted VMM's guest talks through its tap, and
    // until the egress table has it again its packets are dropped.
    adopt_networks();
    // Every VMM an earlier sbxd started under this state dir, recorded or
    // not (it may have died between the spawn and the write of vmm.json).
    const std::string state_dir = without_trailing_slash(config_.state_dir);
    std::vector<FoundProcess> found = find_processes_with_argument("--snapshot-dir", state_dir + "/");
    std::set<std::int64_t> adopted_pids;
    auto sandboxes = store_.list_sandboxes(
        {{}, {SandboxState::Creating, SandboxState::Running, SandboxState::Stopping, SandboxState::Deleting}});
    if (!sandboxes) {
        return sandboxes.error();
    }
    int adopted = 0;
    for (const auto& s : *sandboxes) {
        const SandboxFiles f = files(s.id);
        auto vmm_file = f.read_vmm();
        std::optional<VmmProcess> process = s.vmm;
        if (!process && vmm_file && vmm_file->process.pid > 0) {
            process = vmm_file->process;  // spawned, not yet in the row
        }
        const bool alive = process && is_same_process_alive(*process);
        if (s.state == SandboxState::Running && alive && vmm_file &&
            control_call(process->control_socket, {{"op", "status"}}, std::chrono::seconds(5)) &&
            cids_.reserve(vmm_file->cid)) {
            log::info("sandbox {}: adopted its VMM (pid {})", s.id, process->pid);
            keep_running(s.id, *process);
            adopted_pids.insert(process->pid);
            ++adopted;
            continue;
        }
        const bool launched = (process && process->pid > 0) ||
                              std::any_of(found.begin(), found.end(),
                                          [&](const FoundProcess& p) { return p.value == f.vmm_dir(); });
        end_vmm(f, process, false);
        const UnixMillis now = clock_();
        Result<SandboxRecord> changed = make_error("unset");
        if (s.state == SandboxState::Running) {
            const VmmExitCause cause = vmm_exit_cause(std::nullopt, read_log_tail(f.vmm_log()));
            log::warn("sandbox {}: its VMM is gone ({}: {}); crashed, disk kept", s.id, cause.reason, cause.detail);
            changed = store_.change_state(s.id, {SandboxState::Crashed, now, std::nullopt, cause.reason, cause.detail,
                                                 cause.syscall});
        } else if (s.state == SandboxState::Stopping) {
            // The memory snapshot is renamed into place whole: there, the stop is done.
            const bool saved = f.has_memory();
            log::info("sandbox {}: finishing a stop ({})", s.id, saved ? "memory saved" : "no memory: crashed");
            changed =
                store_.change_state(s.id, {saved ? SandboxState::Stopped : SandboxState::Crashed, now, std::nullopt});
        } else if (s.state == SandboxState::Deleting) {
            log::info("sandbox {}: finishing a delete", s.id);
            disconnect_network(s);
            (void)f.remove();
            if (auto gone = store_.delete_sandbox(s.id, now); !gone) {
                log::warn("sandbox {}: {}", s.id, gone.error().to_string());
            }
            continue;
        } else if (s.started_at && !launched && f.has_memory()) {
            // No VMM ran from the memory: disk and memory still agree.
            log::info("sandbox {}: a resume cut short before its VMM started; stopped, memory kept", s.id);
            changed = store_.change_state(s.id, {SandboxState::Stopped, now, std::nullopt});
        } else if (s.started_at) {
            // A guest ran from the memory and may have written the disk since:
            // that memory must never be restored again.
            log::warn("sandbox {}: a resume was cut short; crashed, disk kept", s.id);
            ::unlink(f.memory().c_str());
            changed = store_.change_state(s.id, {SandboxState::Crashed, now, std::nullopt});
        } else {
            log::info("sandbox {}: rolling back a create that never finished", s.id);
            changed = store_.change_state(s.id, {SandboxState::Deleting, now, std::nullopt});
            if (changed) {
                disconnect_network(s);
                (void)f.remove();
                if (auto gone = store_.delete_sandbox(s.id, now); !gone) {
                    log::warn("sandbox {}: {}", s.id, gone.error().to_string());
                }
            }
        }
        if (!changed) {
            log::warn("sandbox {}: {}", s.id, changed.error().to_string());
        }
    }
    // Whatever runs still and no sandbox adopted (an unrecorded spawn, a
    // deleted sandbox's, a template build's) belongs to nobody now.
    for (const auto& p : found) {
        if (!adopted_pids.contains(p.process.pid) && is_same_process_alive(p.process)) {
            log::warn("killing a VMM no sandbox owns (pid {}, {})", p.process.pid, p.value);
            kill_process_group(p.process);
        }
    }
    remove_unfinished_snapshots();
    collect_layers();
    remove_unfinished_templates();
    remove_unowned_cgroups();
    return adopted;
}

void VmmDriver::offer_guest_api_to_running() {
    auto running = store_.list_sandboxes({{}, {SandboxState::Running}});
    if (!running) {
        log::warn("the API inside the adopted sandboxes: {}", running.error().to_string());
        return;
    }
    for (const auto& s : *running) {
        if (auto offered = offer_guest_api(s); !offered) {
            log::warn("sandbox {}: the API inside it: {}", s.id, offered.error().to_string());
        }
    }
}

namespace fs = std::filesystem;

// A VMM cgroup of one of this state directory's sandboxes that has no
// live VMM now (ended or killed while no sbxd watched) goes, with whatever
// runs in it. Another name may be another sbxd's (another state
// directory, the same cgroup root): left. (A template build cut short
// loses its cgroup with its folder, remove_unfinished_templates.)
void VmmDriver::remove_unowned_cgroups() {
    if (!config_.cgroups) {
        return;
    }
    std::error_code ec;
    for (fs::directory_iterator it(config_.cgroups->root, ec), end; !ec && it != end; it.increment(ec)) {
        if (!it->is_directory()) {
            continue;
        }
        const std::string name = it->path().filename().string();
        std::error_code missing;
        if (!fs::is_directory(files(name).dir(), missing)) {
            continue;
        }
        auto vmm = files(name).read_vmm();
        if (vmm && vmm->process.pid > 0 && is_same_process_alive(vmm->process)) {
            continue;
        }
        log::info("removing the cgroup of {}, which has no VMM", name);
        if (auto removed = Cgroup::remove(it->path().string()); !removed) {
            log::warn("{}", removed.error().to_string());
        }
    }
}

namespace {

// Whether the VMM has ended, without reaping it (so the status stays for
// poll_process_end under the lock): waitid with WNOWAIT for sbxd's own
// child, /proc for an adopted one (not our child: ECHILD).
bool vmm_ended_unreaped(const VmmProcess& vmm) {
    if (vmm.pid <= 0) {
        return true;
    }
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(vmm.pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0) {
        return info.si_pid != 0;
    }
    return !is_same_process_alive(vmm);
}

}  // namespace

void VmmDriver::check_vmms() {
    auto running = store_.list_sandboxes({{}, {SandboxState::Running}});
    if (!running) {
        return;
    }
    for (const auto& s : *running) {
        // A live VMM first, without the sandbox's lock: holding it for
        // every pass made a request that came meanwhile (a delete) fail
        // with invalid_state ("another operation ... is in progress").
        if (!s.vmm || !vmm_ended_unreaped(*s.vmm)) {
            continue;
        }
        auto operation = begin(s.id);
        if (!operation) {
            continue;  // busy: the operation sees for itself
        }
        auto end = poll_process_end(*s.vmm);
        if (!end) {
            continue;
        }
        // Re-read under the lock: an operation may have replaced the VMM.
        auto now = store_.get_sandbox(s.id);
        if (!now || now->state != SandboxState::Running || now->vmm != s.vmm) {
            continue;
        }
        const VmmExitCause cause = vmm_exit_cause(end, read_log_tail(files(s.id).vmm_log()));
        log::warn("sandbox {}: its VMM ended ({}: {}); crashed, disk kept", s.id, cause.reason, cause.detail);
        end_vmm(files(s.id), std::nullopt, false);
        (void)store_.change_state(s.id,
                                  {SandboxState::Crashed, clock_(), std::nullopt, cause.reason, cause.detail, cause.syscall});
    }
}

void VmmDriver::watch_vmms(std::chrono::milliseconds period) {
    watcher_ = std::jthread([this, period](std::stop_token stop) {
        while (!stop.stop_requested()) {
            for (auto waited = std::chrono::milliseconds(0); waited < period && !stop.stop_requested();
                 waited += std::chrono::milliseconds(100)) {
                std::this_thread::sleep_for(std::chrono::milliseconds(100));
            }
            if (!stop.stop_requested()) {
                check_vmms();
            }
        }
    });
}

}  // namespace sbx::sbxd
