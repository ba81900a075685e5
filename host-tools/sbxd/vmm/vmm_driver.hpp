// The VMM driver (docs/sbxd.md, "The VMM driver"): sbxd's SandboxDriver
// that runs one sbx-vmm per sandbox. It never links VMM or device code: it
// spawns sbx-vmm, drives it through its control socket and the guest
// through the agent client library, and keeps each sandbox's files in its
// folder (sandbox_files.hpp).
//
//   create   a qcow2 overlay on the image, a cold boot to agent-ready
//   stop     a raw memory snapshot (memory) or nothing (disk-only), then
//            the VMM ends
//   resume   a copy-on-write restore of that snapshot and a new token, or
//            a cold boot from the disk, saying why (a new size or a bigger
//            disk: resized; the disk grows under a new overlay)
//   fork     the parent's disk frozen into a shared layer, new overlays on
//            it for the parent and each child; with memory, every one of
//            them restored from one snapshot of the parent, each child with
//            a fresh identity
//
// One operation runs per sandbox at a time; another on the same sandbox
// meanwhile is invalid_state. A failed start kills its VMM and leaves the
// sandbox crashed with its disk. VMMs outlive sbxd; at start recover()
// adopts them or accounts for them.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stop_token>
#include <vector>
#include <string>
#include <thread>

#include "guest-agent/client/agent_client.hpp"
#include "host-tools/sbxd/api/sizes.hpp"
#include "host-tools/sbxd/daemon/api_service.hpp"
#include "host-tools/sbxd/daemon/sandbox_driver.hpp"
#include "host-tools/sbxd/net/host_network.hpp"
#include "host-tools/sbxd/vmm/boot_images.hpp"
#include "host-tools/sbxd/vmm/cid_allocator.hpp"
#include "host-tools/sbxd/vmm/sandbox_files.hpp"
#include "host-tools/sbxd/vmm/vmm_cgroups.hpp"
#include "host-tools/sbxd/vmm/vmm_launch.hpp"

namespace sbx::sbxd {

struct DriverConfig {
    std::string state_dir;
    std::string vmm_program;  // sbx-vmm
    std::string images_dir;   // the images/build cache
    api::HostLimits limits;
    std::string default_image{kDefaultImageName};  // a create that names none boots it (boot_images.hpp)
    std::string guest_api_socket{};  // sbxd's Transport::Guest listener (guest_api.hpp)
    StringMap default_env{};       // the operator's variables for /etc/sandboxer/env
    // Guests in the nested test harness boot 10-50x slower than on hardware.
    std::chrono::milliseconds boot_timeout{600'000};
    std::chrono::milliseconds restore_timeout{300'000};
    // This host's CPU (cpu_signature.hpp), recorded with every memory
    // snapshot; a saved memory with another one is not restored.
    std::string cpu_signature{};
    // The host's sandbox network (net/host_network.hpp), owned by main;
    // none: sandboxes have no network card.
    net::HostNetwork* network = nullptr;
    // Each VMM's cgroup v2 goes under this root (vmm_cgroups.hpp); none:
    // VMMs run in sbxd's own cgroup.
    std::optional<CgroupPlan> cgroups{};
    // Each VMM runs jailed (sbx-vmm --jail, docs/security.md) as uid and
    // gid base + its vsock CID, unique among the running VMMs; none: not jailed.
    std::optional<std::uint32_t> jail_uid_base{};
    // Each sandbox's console log stays under this many bytes (its oldest
    // half dropped past them): a guest writing to its serial port forever
    // fills no disk. 0: no bound.
    std::uint64_t console_log_max_bytes = kDefaultConsoleLogMaxBytes;
    static constexpr std::uint64_t kDefaultConsoleLogMaxBytes = 16 << 20;
};

// Why a start from saved memory boots cold instead, or empty to restore
// it: no_memory_snapshot, resized (another machine than the saved one),
// cpu_mismatch (saved on another CPU; an empty saved signature, from an
// older sbxd, is tried).
[[nodiscard]] std::string cold_start_reason(bool has_memory, bool resized, const std::string& saved_cpu,
                                            const std::string& host_cpu);

// The API code for a failed memory save: insufficient_storage when the
// VMM found the file system full (its code no_space), else internal.
[[nodiscard]] std::string_view save_failure_code(const Error& e);

class VmmDriver final : public SandboxDriver {
public:
    VmmDriver(Store& store, DriverConfig config, Clock clock = system_now);
    ~VmmDriver() override;  // the VMMs run on
    VmmDriver(const VmmDriver&) = delete;
    VmmDriver& operator=(const VmmDriver&) = delete;

    // At start, before serving: every sandbox in a state with a VMM is
    // adopted (same pid and start time, its control socket answers) or
    // accounted for: a VMM gone while running is crashed (disk kept), a
    // stop that saved its memory is finished, a create never finished is
    // rolled back (VMM killed, folder and row removed). Returns how many
    // VMMs were adopted.
    [[nodiscard]] Result<int> recover();
    // Once sbxd's guest-API socket listens: the API inside each adopted
    // (running) sandbox again (guest_api.hpp); failures are logged.
    void offer_guest_api_to_running();
    // Starts a thread that marks crashed every running sandbox whose VMM
    // has ended (and reaps it), every `period`.
    void watch_vmms(std::chrono::milliseconds period = std::chrono::seconds(2));
    // One pass of that check.
    void check_vmms();

    Result<CreateOutcome> create(const CreateSpec& spec) override;
    Result<SandboxRecord> stop(const std::string& id, const api::StopRequest& request) override;
    Result<ResumeOutcome> resume(const std::string& id, const api::ResumeRequest& request) override;
    Result<std::vector<SandboxRecord>> fork(const std::string& id, const api::ForkRequest& request,
                                            const std::optional<IdempotencyClaim>& claim,
                                            const std::vector<std::string>& child_ids) override;
    Result<void> remove(const std::string& id) override;
    Result<SnapshotRecord> snapshot(const std::string& id, const api::SnapshotRequest& request) override;
    Result<void> remove_snapshot(const std::string& name) override;
    Result<AgentAddress> agent(const std::string& id) override;
    Result<std::string> disk(const std::string& id) override;
    Result<std::string> console_log(const std::string& id) override;
    Result<void> apply_egress(const SandboxRecord& sandbox) override;  // vmm_network.cpp
    void cancel_starts() override { stopping_.request_stop(); }

private:
    // Holds one sandbox's operation lock.
    class Operation {
    public:
        Operation() = default;
        explicit Operation(std::shared_ptr<std::mutex> m) : mutex_(std::move(m)) {}
        Operation(Operation&&) noexcept = default;
        Operation& operator=(Operation&&) noexcept = default;
        ~Operation() {
            if (mutex_) {
                mutex_->unlock();
            }
        }

    private:
        std::shared_ptr<std::mutex> mutex_;
    };
    // A running VMM with its agent answering.
    struct Started {
        VmmProcess process;
        std::uint32_t cid = 0;
        std::string token;
    };
    struct Restore {
        std::string snapshot;
        std::string saved_token;                 // the token of the guest in the snapshot
        std::optional<std::uint64_t> generation;  // a fork: a fresh RNG seed too
    };

    [[nodiscard]] Result<Operation> begin(const std::string& id);
    [[nodiscard]] SandboxFiles files(const std::string& id) const { return {config_.state_dir, id}; }
    [[nodiscard]] std::string layers_dir() const { return config_.state_dir + "/layers"; }
    [[nodiscard]] Result<Started> boot_cold(const SandboxRecord& sandbox, const SandboxFiles& files);
    [[nodiscard]] Result<Started> boot_restore(const std::string& id, const SandboxFiles& files,
                                               const Restore& restore);
    // The sandbox's network (vmm_network.cpp): its card's host side and
    // what its guest is told.
    struct Network {
        NetAttachment card;
        GuestNetwork guest;
    };
    // The sandbox's slot, claimed on its first start, and its tap,
    // attached unless it is; none without a host network.
    [[nodiscard]] Result<std::optional<Network>> connect_network(const std::string& id);
    // At delete: the tap goes (the slot goes with the row).
    void disconnect_network(const SandboxRecord& sandbox);
    // At start: every sandbox's tap is taken back, in the egress table again.
    void adopt_networks();
    // A warm template's card: a tap of its own for the build.
    struct TemplateNetwork {
        net::PersistentTap tap;
        NetAttachment card;
    };
    [[nodiscard]] Result<std::optional<TemplateNetwork>> template_network();
    [[nodiscard]] Result<SandboxRecord> mark_running(const std::string& id, const Started& started);
    // A start that failed crashes the sandbox (no_ready_machine); one that
    // succeeded marks it running.
    [[nodiscard]] Result<SandboxRecord> run_started(const std::string& id, const Result<Started>& started);
    // Ends the sandbox's VMM (if any), frees its CID, marks it crashed and
    // returns `why` with the API code `code`.
    Error crash(const std::string& id, const Error& why, std::string_view code);
    void end_vmm(const SandboxFiles& files, const std::optional<VmmProcess>& process, bool graceful);
    // The VMM of the folder `files` starts in a cgroup of its own with the
    // limits of `cpus` and `memory_mib` (0: from its record), removed again
    // (what runs there killed) once that VMM is ended; and, with jails on,
    // jailed in the folder's vmm/ as uid and gid jail_uid_base + its CID.
    void confine(LaunchSpec& spec, const SandboxFiles& files, int cpus, int memory_mib) const;
    void remove_cgroup(const SandboxFiles& files) const;
    // ROOT/<folder name>: the cgroup of the folder's VMM (with cgroups on).
    [[nodiscard]] std::string cgroup_path(const SandboxFiles& files) const;
    void remove_unowned_cgroups();
    [[nodiscard]] Result<SandboxRecord> new_record(const SandboxRecord& like, const std::string& id) const;
    // The sandbox's disk becomes a frozen layer under a new overlay of
    // `size` bytes (0: the layer's size; more: the disk grows).
    [[nodiscard]] Result<std::string> freeze_disk(const std::string& id, std::uint64_t size = 0);
    [[nodiscard]] Result<std::vector<SandboxRecord>> fork_locked(
        const SandboxRecord& parent, const api::ForkRequest& request,
        const std::optional<IdempotencyClaim>& claim, const std::vector<std::string>& child_ids);
    void collect_layers();
    // Named snapshots (vmm_snapshots.cpp), each a folder under snapshots/.
    [[nodiscard]] std::string snapshots_dir() const { return config_.state_dir + "/snapshots"; }
    [[nodiscard]] Result<CreateOutcome> create_from_snapshot(const CreateSpec& spec, const SnapshotRecord& snapshot);
    // Saves a running sandbox's memory into `into` as a fork does (the VM
    // pauses, its VMM ends, the disk is frozen, it is restored on a new
    // overlay) and returns the layer; the sandbox runs on.
    [[nodiscard]] Result<std::string> save_running(const SandboxRecord& sandbox, const SandboxFiles& into);
    // A snapshot cut short by sbxd's end: its .tmp- folder, or a row
    // whose folder never appeared.
    void remove_unfinished_snapshots();
    // The image whose kernel a cold boot of the sandbox uses.
    [[nodiscard]] std::string image_of(const SandboxRecord& sandbox) const;
    // Warm templates (vmm_templates.cpp).
    [[nodiscard]] std::string template_dir(const SandboxRecord& like, const BootImage& image) const;
    // Restores a new sandbox from its warm template; "not_found" without one.
    [[nodiscard]] Result<Started> boot_from_template(const SandboxRecord& sandbox, const SandboxFiles& files,
                                                     const BootImage& image);
    // Builds the template for `like` on a thread unless one is being built.
    void build_template_later(const SandboxRecord& like, const BootImage& image);
    [[nodiscard]] Result<void> build_template(const SandboxRecord& like, const BootImage& image,
                                              const std::string& dir, std::stop_token stop);
    void remove_unfinished_templates();
    // The API inside the sandbox (guest_api.cpp): its key, /etc/sandboxer/env,
    // the agent's listener, kept while the VMM runs.
    [[nodiscard]] Result<void> offer_guest_api(const SandboxRecord& sandbox);
    void end_guest_api(const SandboxFiles& files);

    Store& store_;
    DriverConfig config_;
    Clock clock_;
    CidAllocator cids_;
    std::mutex locks_mutex_;
    std::map<std::string, std::shared_ptr<std::mutex>> locks_;
    std::mutex guest_links_mutex_;
    std::map<std::string, agent::AgentClient> guest_links_;  // by sandbox folder
    std::mutex fork_keys_mutex_;
    std::set<std::string> fork_keys_;  // Idempotency-Keys of forks in progress
    std::mutex templates_mutex_;
    std::set<std::string> templates_building_;
    std::vector<std::jthread> template_builders_;
    std::mutex snapshots_mutex_;  // a named snapshot's folder appears, is used or goes
    std::jthread watcher_;
    std::stop_source stopping_;  // cancel_starts()
};

// The virtual size of the qcow2 image at `path` (its header's size field).
[[nodiscard]] Result<std::uint64_t> qcow2_virtual_size(const std::string& path);

// A qcow2 overlay at `path` on the image's raw root disk, of `disk_gib`
// GiB but never smaller than the image.
[[nodiscard]] Result<void> make_image_overlay(const std::string& path, const BootImage& image, int disk_gib);

// The row of a new sandbox made by `spec` from the image or snapshot `from`.
[[nodiscard]] SandboxRecord sandbox_record(const CreateSpec& spec, const std::string& id, const std::string& from,
                                           UnixMillis now);


}  // namespace sbx::sbxd
