#include "host-tools/sbxd/vmm/vmm_launch.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <thread>

#include <fmt/format.h>

#include "base/log.hpp"
#include "base/unique_fd.hpp"
#include "guest-agent/client/agent_client.hpp"
#include "guest-agent/freeze/freeze_client.hpp"
#include "guest-agent/identity/identity_client.hpp"
#include "host-tools/sbxd/vmm/control_client.hpp"
#include "host-tools/sbxd/vmm/vmm_process.hpp"

namespace sbx::sbxd {

namespace {

using Clock = std::chrono::steady_clock;

// The default image's kernel command line (scripts/demo, docs/guest-layout.md):
// the root disk is the first virtio-blk disk, systemd is init.
constexpr const char* kCmdline =
    "console=ttyS0 reboot=k panic=1 i8042.noaux i8042.nomux i8042.nopnp i8042.dumbkbd quiet "
    "root=/dev/vda rw init=/lib/systemd/systemd";

Error vmm_ended(const SandboxFiles& files, const ProcessEnd& end) {
    return make_coded_error("vmm_exited", "sbx-vmm ended ({}) before the agent answered; {}: {}", describe(end),
                            files.vmm_log(), log_tail(files.vmm_log(), 600));
}

}  // namespace

std::vector<std::string> vmm_arguments(const LaunchSpec& spec, const SandboxFiles& files) {
    std::vector<std::string> args;
    if (spec.restore_from) {
        args = {"--restore", *spec.restore_from, "--restore-mode", "private"};
    } else {
        args = {"--kernel",
                spec.kernel,
                "--cpus",
                std::to_string(spec.cpus),
                "--memory",
                std::to_string(spec.memory_mib),
                "--rng",
                "--cmdline",
                fmt::format("{} sbx.token={}", kCmdline, spec.token)};
    }
    const std::vector<std::string> host_side = {
        "--disk",    files.disk() + ",backing=on",  // an overlay sbxd made on its own image or layer
        "--vsock",   fmt::format("cid={},uds={}", spec.cid, files.vsock_socket()),
        "--control", files.control_socket(),
        "--snapshot-dir", files.vmm_dir(),
        // appended: `sbx logs` keeps every boot, restore and resume
        "--console", "append:" + files.console_log(),
    };
    args.insert(args.end(), host_side.begin(), host_side.end());
    if (spec.console_max_bytes > 0) {
        args.insert(args.end(), {"--console-max-bytes", std::to_string(spec.console_max_bytes)});
    }
    if (spec.net) {
        args.push_back("--net");
        args.push_back(fmt::format("tap={},mac={}", spec.net->tap, spec.net->mac));
    }
    if (spec.jail_uid) {
        args.insert(args.end(), {"--jail", files.vmm_dir(), "--jail-user",
                                 fmt::format("{}:{}", *spec.jail_uid, *spec.jail_uid)});
    }
    return args;
}

Result<VmmProcess> launch_vmm(const LaunchSpec& spec, const SandboxFiles& files) {
    if (auto made = files.prepare_vmm_dir(spec.jail_uid); !made) {
        return made.error();
    }
    std::optional<Cgroup> cgroup;
    if (!spec.cgroup.empty()) {
        auto made = Cgroup::create(spec.cgroup, spec.cgroup_limits);
        if (!made) {
            return made.error().context("the VMM's cgroup");
        }
        cgroup.emplace(std::move(*made));
    }
    auto process = spawn_process(
        SpawnSpec{spec.vmm_program, vmm_arguments(spec, files), files.vmm_log(), cgroup ? cgroup->fd() : -1});
    if (!process) {
        return process.error();
    }
    if (cgroup) {
        cgroup->release();  // the VMM's now; sbxd removes it when it ends the VMM
    }
    process->control_socket = files.control_socket();
    if (auto written = files.write_vmm(VmmFile{spec.token, spec.cid, *process}); !written) {
        kill_process_group(*process);
        if (!spec.cgroup.empty()) {
            (void)Cgroup::remove(spec.cgroup);
        }
        return written.error();
    }
    return process;
}

Result<void> wait_for_agent(const VmmProcess& vmm, const SandboxFiles& files, const std::string& token,
                            std::chrono::milliseconds timeout, std::stop_token stop) {
    const auto deadline = Clock::now() + timeout;
    Error last = make_error("no attempt yet");
    while (Clock::now() < deadline) {
        if (stop.stop_requested()) {
            return make_coded_error("cancelled", "sbxd is stopping");
        }
        if (auto end = poll_process_end(vmm)) {
            return vmm_ended(files, *end);
        }
        agent::AgentEndpoint endpoint;
        endpoint.uds_path = files.vsock_socket();
        endpoint.token = token;
        endpoint.timeout = std::chrono::milliseconds(2000);
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        endpoint.reply_timeout = std::clamp(left, std::chrono::milliseconds(1), std::chrono::milliseconds(30'000));
        auto client = agent::AgentClient::connect(endpoint);
        if (client) {
            auto health = client->health();
            if (health) {
                return ok();
            }
            last = health.error();
        } else {
            last = client.error();
        }
        auto code = agent::error_code(last);
        if (code == "unauthorized" || code == "bad_token") {
            return make_coded_error("agent_refused", "the guest's agent refused sbxd's token: {}",
                                    last.to_string());
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return make_coded_error("timeout", "the guest's agent did not answer within {} s (last: {}); console: {}",
                            timeout.count() / 1000, last.to_string(), log_tail(files.console_log(), 600));
}

Result<void> give_identity(const SandboxFiles& files, const std::string& token, const IdentityUpdate& update) {
    if (!update.new_token && !update.generation && !update.network && !update.hostname) {
        return ok();
    }
    agent::AgentEndpoint endpoint;
    endpoint.uds_path = files.vsock_socket();
    endpoint.token = token;
    auto client = agent::AgentClient::connect(endpoint);
    if (!client) {
        return client.error().context("identity op");
    }
    agent::IdentityRequest request;
    request.token = update.new_token;
    request.hostname = update.hostname;  // checked by identity() before it is sent
    if (update.network) {
        request.mac = update.network->mac;  // checked by identity() before it is sent
        auto ipv4 = agent::parse_ipv4_settings(update.network->address, update.network->gateway, update.network->dns);
        if (!ipv4) {
            return ipv4.error().context("identity op");
        }
        request.ipv4 = *ipv4;
    }
    if (update.generation) {
        request.generation = update.generation;
        auto seed = agent::random_seed();
        if (!seed) {
            return seed.error();
        }
        request.seed = std::move(*seed);
    }
    auto reply = agent::identity(*client, request);
    if (!reply) {
        return reply.error().context("identity op");
    }
    if (update.hostname && !reply->hostname) {
        // An agent older than the field (a named snapshot's memory) ignores it.
        log::warn("{}: the guest's agent did not confirm the host name {}", files.dir(), *update.hostname);
    }
    return ok();
}

Result<std::vector<std::string>> freeze_guest(const SandboxFiles& files, const std::string& token,
                                              std::chrono::milliseconds timeout) {
    auto client = agent::AgentClient::connect(agent::AgentEndpoint{files.vsock_socket(), agent::kAgentPort, token});
    if (!client) {
        return client.error().context("freeze op");
    }
    auto frozen = agent::freeze_filesystems(*client, timeout);
    if (!frozen) {
        return frozen.error().context("freeze op");
    }
    return frozen;
}

Result<void> thaw_guest(const SandboxFiles& files, const std::string& token) {
    auto client = agent::AgentClient::connect(agent::AgentEndpoint{files.vsock_socket(), agent::kAgentPort, token});
    if (!client) {
        return client.error().context("thaw op");
    }
    if (auto thawed = agent::thaw_filesystems(*client); !thawed) {
        return thawed.error().context("thaw op");
    }
    return ok();
}

Result<void> save_memory(const VmmProcess& vmm, const SandboxFiles& files, std::chrono::milliseconds timeout) {
    ::unlink(files.vmm_memory().c_str());
    ::unlink(files.memory().c_str());
    auto saved =
        control_call(vmm.control_socket, {{"op", "snapshot"}, {"path", files.vmm_memory()}, {"mode", "raw"}}, timeout);
    if (!saved) {
        ::unlink(files.vmm_memory().c_str());  // a VMM that did not answer may have written it
        return saved.error();
    }
    // vmm/ is the VMM's: what is at that name is taken only if it is a
    // regular file (never a link a VMM planted to a host file, which the
    // next restore would map as guest memory), and linked up by its
    // descriptor, so the name cannot change in between; then sbxd's.
    UniqueFd fd(::open(files.vmm_memory().c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    struct stat st {};
    Result<void> moved = ok();
    if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
        moved = make_coded_error("invalid", "{} is not a regular file", files.vmm_memory());
    } else if (::fchown(fd.get(), ::geteuid(), ::getegid()) != 0 || ::fchmod(fd.get(), 0600) != 0) {
        moved = sys_error("taking {}", files.vmm_memory());
    } else if (::linkat(AT_FDCWD, fmt::format("/proc/self/fd/{}", fd.get()).c_str(), AT_FDCWD,
                        files.memory().c_str(), AT_SYMLINK_FOLLOW) != 0) {
        moved = sys_error("linking {} to {}", files.vmm_memory(), files.memory());
    }
    ::unlink(files.vmm_memory().c_str());
    return moved;
}

void stop_vmm(const VmmProcess& vmm, std::chrono::milliseconds grace) {
    if (poll_process_end(vmm)) {
        return;
    }
    if (control_call(vmm.control_socket, {{"op", "stop"}}, std::chrono::seconds(10))) {
        if (wait_process_end(vmm, grace)) {
            return;
        }
    }
    kill_process_group(vmm);
}

}  // namespace sbx::sbxd
