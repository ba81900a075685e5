#include "host-tools/sbxd/vmm/vmm_driver.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <filesystem>

#include "base/log.hpp"
#include "base/unique_fd.hpp"
#include "devices/virtio/blk/qcow2/qcow2_create.hpp"
#include "guest-agent/exec/exec_client.hpp"
#include "guest-agent/identity/identity_client.hpp"
#include "host-tools/sbxd/api/api_error.hpp"
#include "host-tools/sbxd/crypto/random.hpp"
#include "host-tools/sbxd/vmm/boot_images.hpp"
#include "host-tools/sbxd/vmm/control_client.hpp"
#include "host-tools/sbxd/vmm/cpu_signature.hpp"
#include "host-tools/sbxd/vmm/guest_api.hpp"
#include "host-tools/sbxd/vmm/vmm_launch.hpp"
#include "host-tools/sbxd/vmm/vmm_process.hpp"

namespace sbx::sbxd {

namespace {

constexpr std::uint64_t kGiB = 1ULL << 30;

// An error for the API: the driver's code replaces whatever a lower layer
// (the VMM, the agent, a file) said, which means nothing to a client.
Error api_error(const Error& why, std::string_view code) {
    return why.with_code(code);
}

std::uint64_t file_size(const std::string& path) {
    struct stat st{};
    return ::stat(path.c_str(), &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
}

}  // namespace

Result<std::uint64_t> qcow2_virtual_size(const std::string& path) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) {
        return sys_error("opening {}", path);
    }
    std::array<std::uint8_t, 32> header{};
    if (::pread(fd.get(), header.data(), header.size(), 0) != static_cast<ssize_t>(header.size())) {
        return make_error("{}: no qcow2 header", path);
    }
    if (qcow2::load_be32(header.data()) != qcow2::kMagic) {
        return make_error("{}: not a qcow2 image", path);
    }
    return qcow2::load_be64(header.data() + 24);  // QEMU's qcow2 spec: "size" at byte 24
}

Result<void> make_image_overlay(const std::string& path, const BootImage& image, int disk_gib) {
    // The overlay is the sandbox's whole disk: never smaller than the image.
    const std::uint64_t size = std::max(static_cast<std::uint64_t>(disk_gib) * kGiB, file_size(image.disk));
    return qcow2::create_overlay(path, image.disk, qcow2::BackingFormat::Raw, size);
}

SandboxRecord sandbox_record(const CreateSpec& spec, const std::string& id, const std::string& from,
                             UnixMillis now) {
    SandboxRecord s;
    s.id = id;
    s.name = id;
    s.state = SandboxState::Creating;
    s.from = from;
    s.size = spec.shape.size;
    s.cpus = spec.shape.cpus;
    s.memory_mib = spec.shape.memory_mib;
    s.disk_gib = spec.shape.disk_gib;
    s.labels = spec.request.labels;
    s.env = spec.request.env;
    s.no_env = spec.request.no_env;
    s.egress = net::format_egress(spec.request.egress);
    s.created_at = now;
    s.last_activity_at = now;
    if (!spec.request.no_auto_stop) {
        s.ttl_seconds = spec.request.ttl_seconds.value_or(api::kDefaultTtlSeconds);
        s.auto_stop_at = now + *s.ttl_seconds * 1000;
    }
    if (spec.request.idle_minutes && *spec.request.idle_minutes > 0) {
        s.idle_minutes = spec.request.idle_minutes;
    }
    return s;
}

VmmDriver::VmmDriver(Store& store, DriverConfig config, Clock clock)
    : store_(store), config_(std::move(config)), clock_(std::move(clock)) {}

VmmDriver::~VmmDriver() {
    if (watcher_.joinable()) {
        watcher_.request_stop();
        watcher_.join();
    }
}

Result<VmmDriver::Operation> VmmDriver::begin(const std::string& id) {
    std::shared_ptr<std::mutex> mutex;
    {
        std::lock_guard lock(locks_mutex_);
        auto& slot = locks_[id];
        if (!slot) {
            slot = std::make_shared<std::mutex>();
        }
        mutex = slot;
    }
    if (!mutex->try_lock()) {
        return make_coded_error(api::code::kInvalidState, "another operation on sandbox {} is in progress", id);
    }
    return Operation(std::move(mutex));
}

std::string cold_start_reason(bool has_memory, bool resized, const std::string& saved_cpu,
                              const std::string& host_cpu) {
    if (!has_memory) {
        return "no_memory_snapshot";
    }
    if (resized) {
        return "resized";
    }
    if (!saved_cpu.empty() && saved_cpu != host_cpu) {
        return "cpu_mismatch";
    }
    return {};
}

std::string VmmDriver::image_of(const SandboxRecord& sandbox) const {
    auto named = read_lines(files(sandbox.id).image_file());
    return named.empty() ? sandbox.from : named.front();
}

Result<VmmDriver::Started> VmmDriver::boot_cold(const SandboxRecord& sandbox, const SandboxFiles& files) {
    auto image = find_boot_image(config_.images_dir, image_of(sandbox));
    if (!image) {
        return image.error();
    }
    auto token = agent::random_token();
    if (!token) {
        return token.error();
    }
    auto cid = cids_.allocate();
    if (!cid) {
        return make_coded_error(api::code::kCapacityExceeded, "no free vsock CID");
    }
    auto network = connect_network(sandbox.id);
    if (!network) {
        cids_.release(*cid);
        return network.error();
    }
    // A cold boot starts from the disk; a memory snapshot of before is stale now.
    ::unlink(files.memory().c_str());
    LaunchSpec spec{config_.vmm_program, *cid, image->kernel, sandbox.cpus, sandbox.memory_mib, *token, {}};
    if (*network) {
        spec.net = (*network)->card;
    }
    confine(spec, files, sandbox.cpus, sandbox.memory_mib);
    auto process = launch_vmm(spec, files);
    if (!process) {
        cids_.release(*cid);
        return process.error();
    }
    auto fail = [&](const Error& e) {
        kill_process_group(*process);
        remove_cgroup(files);
        cids_.release(*cid);
        return e.context("cold boot");
    };
    if (auto ready = wait_for_agent(*process, files, *token, config_.boot_timeout, stopping_.get_token());
        !ready) {
        return fail(ready.error());
    }
    // The image's host name is every guest's: its own, and its network.
    IdentityUpdate update{std::nullopt, std::nullopt, std::nullopt, sandbox_hostname(sandbox)};
    if (*network) {
        update.network = (*network)->guest;
    }
    if (auto told = give_identity(files, *token, update); !told) {
        return fail(told.error());
    }
    return Started{*process, *cid, *token};
}

Result<VmmDriver::Started> VmmDriver::boot_restore(const std::string& id, const SandboxFiles& files,
                                                   const Restore& restore) {
    auto token = agent::random_token();
    if (!token) {
        return token.error();
    }
    auto cid = cids_.allocate();
    if (!cid) {
        return make_coded_error(api::code::kCapacityExceeded, "no free vsock CID");
    }
    auto network = connect_network(id);
    if (!network) {
        cids_.release(*cid);
        return network.error();
    }
    LaunchSpec spec{config_.vmm_program, *cid, {}, 0, 0, restore.saved_token, restore.snapshot};
    if (*network) {
        spec.net = (*network)->card;
    }
    // The saved machine has the record's size (a resized one boots cold).
    auto record = store_.get_sandbox(id);
    confine(spec, files, record ? record->cpus : 0, record ? record->memory_mib : 0);
    auto process = launch_vmm(spec, files);
    if (!process) {
        cids_.release(*cid);
        return process.error();
    }
    auto fail = [&](const Error& e) {
        kill_process_group(*process);
        remove_cgroup(files);
        cids_.release(*cid);
        return e.context("restore");
    };
    if (auto ready = wait_for_agent(*process, files, restore.saved_token, config_.restore_timeout,
                                    stopping_.get_token());
        !ready) {
        return fail(ready.error());
    }
    // A stop with memory saved it frozen (the guest would also thaw by
    // itself): thawed first, with the token of before, since the identity
    // op may write files (/etc/hosts, /etc/hostname for a new host name),
    // which on a frozen file system would wait for the thaw.
    if (auto thawed = thaw_guest(files, restore.saved_token); !thawed) {
        log::warn("{}: {}", files.dir(), thawed.error().to_string());
    }
    // The saved guest still takes the token of before: a new one for this
    // life, and its network (a restored template or fork has another's).
    SandboxRecord named;
    named.id = id;
    named.name = record ? record->name : id;
    IdentityUpdate update{*token, restore.generation, std::nullopt, sandbox_hostname(named)};
    if (*network) {
        update.network = (*network)->guest;
    }
    if (auto renewed = give_identity(files, restore.saved_token, update); !renewed) {
        return fail(renewed.error());
    }
    if (auto written = files.write_vmm(VmmFile{*token, *cid, *process}); !written) {
        return fail(written.error());
    }
    return Started{*process, *cid, *token};
}

Result<SandboxRecord> VmmDriver::run_started(const std::string& id, const Result<Started>& started) {
    if (!started) {
        return crash(id, started.error(), api::code::kNoReadyMachine);
    }
    return mark_running(id, *started);
}

Result<SandboxRecord> VmmDriver::mark_running(const std::string& id, const Started& started) {
    auto running = store_.change_state(id, StateChange{SandboxState::Running, clock_(), started.process});
    if (!running) {
        end_vmm(files(id), started.process, false);
        return running.error();
    }
    // Without it the sandbox runs on, only its guest cannot reach the API.
    if (auto offered = offer_guest_api(*running); !offered) {
        log::warn("sandbox {}: the API inside it: {}", id, offered.error().to_string());
    }
    return running;
}

std::string_view save_failure_code(const Error& e) {
    return e.code == "no_space" ? api::code::kInsufficientStorage : api::code::kInternal;
}

std::string VmmDriver::cgroup_path(const SandboxFiles& files) const {
    return config_.cgroups->root + "/" + std::filesystem::path(files.dir()).filename().string();
}

void VmmDriver::confine(LaunchSpec& spec, const SandboxFiles& files, int cpus, int memory_mib) const {
    spec.console_max_bytes = config_.console_log_max_bytes;
    if (config_.jail_uid_base) {
        spec.jail_uid = *config_.jail_uid_base + spec.cid;
    }
    if (!config_.cgroups) {
        return;
    }
    spec.cgroup = cgroup_path(files);
    spec.cgroup_limits = vmm_cgroup_limits(*config_.cgroups, cpus, memory_mib);
}

void VmmDriver::remove_cgroup(const SandboxFiles& files) const {
    if (!config_.cgroups) {
        return;
    }
    if (auto removed = Cgroup::remove(cgroup_path(files)); !removed) {
        log::warn("{}", removed.error().to_string());
    }
}

void VmmDriver::end_vmm(const SandboxFiles& files, const std::optional<VmmProcess>& process, bool graceful) {
    end_guest_api(files);
    auto vmm = files.read_vmm();
    std::optional<VmmProcess> target = process;
    if (!target && vmm && vmm->process.pid > 0) {
        target = vmm->process;
    }
    if (target) {
        if (graceful) {
            stop_vmm(*target);
        } else {
            kill_process_group(*target);
        }
    }
    remove_cgroup(files);
    if (vmm) {
        if (vmm->cid != 0) {
            cids_.release(vmm->cid);
        }
        vmm->cid = 0;
        vmm->process = VmmProcess{};
        (void)files.write_vmm(*vmm);  // keeps the token a saved guest still takes
    }
}

Error VmmDriver::crash(const std::string& id, const Error& why, std::string_view code) {
    log::warn("sandbox {}: {}", id, why.to_string());
    end_vmm(files(id), std::nullopt, false);
    if (auto crashed = store_.change_state(id, StateChange{SandboxState::Crashed, clock_(), std::nullopt});
        !crashed) {
        log::warn("sandbox {}: marking it crashed: {}", id, crashed.error().to_string());
    }
    return api_error(why, code);
}

Result<CreateOutcome> VmmDriver::create(const CreateSpec& spec) {
    const std::string from = spec.request.from.value_or(config_.default_image);
    if (auto snapshot = store_.get_snapshot(from); snapshot) {
        return create_from_snapshot(spec, *snapshot);
    } else if (snapshot.error().code != api::code::kNotFound) {
        return snapshot.error();
    }
    auto image = find_boot_image(config_.images_dir, from);
    if (!image) {
        return image.error();
    }
    const std::string& id = spec.id;
    auto operation = begin(id);
    if (!operation) {
        return operation.error();
    }
    const SandboxRecord s = sandbox_record(spec, id, from, clock_());
    auto created = store_.create_sandbox(s, spec.claim);
    if (!created || created->replayed) {
        return created;
    }
    const SandboxFiles f = files(s.id);
    if (auto made = f.create(); !made) {
        return crash(s.id, made.error(), api::code::kInternal);
    }
    std::vector<std::string> warnings;
    bool build_template = false;
    Result<Started> started = make_coded_error("cold", "asked for a cold boot");
    if (!spec.request.cold) {
        started = boot_from_template(s, f, *image);
    }
    if (!started) {
        if (started.error().code == "cold") {
            warnings.push_back("cold: true: a cold boot, no warm template");
        } else if (started.error().code == "not_found") {
            warnings.push_back("no warm template for this image and machine yet: a cold boot (one is being built)");
            build_template = true;
        } else {
            warnings.push_back("the warm template did not restore (" + started.error().to_string() +
                               "): a cold boot");
            log::warn("sandbox {}: {}", s.id, warnings.back());
        }
        ::unlink(f.disk().c_str());
        if (auto overlay = make_image_overlay(f.disk(), *image, s.disk_gib); !overlay) {
            return crash(s.id, overlay.error(), api::code::kInternal);
        }
        started = boot_cold(s, f);
    }
    auto running = run_started(s.id, started);
    if (!running) {
        return running.error();
    }
    if (build_template) {
        // After this boot, not beside it: two guests booting at once under
        // the nested harness (TCG-emulated SVM) once hung one of them.
        build_template_later(s, *image);
    }
    return CreateOutcome{*running, false, warnings};
}

Result<SandboxRecord> VmmDriver::stop(const std::string& id, const api::StopRequest& request) {
    auto operation = begin(id);
    if (!operation) {
        return operation.error();
    }
    auto s = store_.get_sandbox(id);
    if (!s) {
        return s.error();
    }
    const SandboxFiles f = files(id);
    if (s->state == SandboxState::Paused) {
        if (request.idle_pause) {
            return make_coded_error(api::code::kInvalidState, "sandbox {} is paused already", id);
        }
        if (!request.memory) {
            ::unlink(f.memory().c_str());
        }
        return store_.change_state(
            id, StateChange{SandboxState::Stopped, clock_(), std::nullopt, request.reason});
    }
    auto stopping =
        store_.change_state(id, StateChange{SandboxState::Stopping, clock_(), std::nullopt, request.reason});
    if (!stopping) {
        return stopping.error();
    }
    const VmmProcess vmm = stopping->vmm.value_or(VmmProcess{});
    ::unlink(f.memory().c_str());
    ::unlink(cpu_signature_file(f.memory()).c_str());  // written again with the new memory
    // Frozen first either way: the disk then holds every write, with a
    // clean journal, so the stopped sandbox's files can be read from it.
    // Without (an older agent) the stop goes on.
    auto vmm_file = f.read_vmm();
    bool frozen = false;
    if (vmm_file) {
        auto done = freeze_guest(f, vmm_file->token);
        frozen = done.has_value();
        if (!done) {
            log::warn("sandbox {}: freezing before the stop: {}", id, done.error().to_string());
        }
    }
    if (request.memory) {
        // Written to a temporary name and renamed by the VMM, then moved
        // here: memory.snap exists only complete.
        auto saved = save_memory(vmm, f, kSnapshotTimeout);
        if (!saved) {
            // The VMM said the write failed (a full disk): the VM is paused
            // with nothing lost, so it runs on and only this stop fails. (A
            // VMM that did not answer in time may be writing still.)
            const bool vmm_refused = saved.error().code == "no_space" || saved.error().code == "io";
            if (vmm_refused && control_call(vmm.control_socket, {{"op", "resume"}})) {
                if (frozen) {
                    (void)thaw_guest(f, vmm_file->token);
                }
                if (auto back = store_.change_state(id, StateChange{SandboxState::Running, clock_(), vmm});
                    !back) {
                    return back.error();
                }
                log::warn("sandbox {}: its memory could not be saved, it runs on: {}", id,
                          saved.error().to_string());
                return api_error(saved.error().context("saving the memory; the sandbox runs on"),
                                 save_failure_code(saved.error()));
            }
            return crash(id, saved.error().context("saving the memory"), save_failure_code(saved.error()));
        }
        if (auto signed_ = write_cpu_signature(f.memory(), config_.cpu_signature); !signed_) {
            log::warn("sandbox {}: {}", id, signed_.error().to_string());
        }
    } else if (vmm_file && !frozen) {
        // Disk-only: what the guest's page cache holds reaches the disk first.
        agent::AgentEndpoint endpoint{f.vsock_socket(), agent::kAgentPort, vmm_file->token};
        auto client = agent::AgentClient::connect(endpoint);
        auto synced = client ? agent::exec(*client, agent::ExecRequest{.argv = {"sync"}}) : client.error();
        if (!synced) {
            log::warn("sandbox {}: sync before a disk-only stop: {}", id, synced.error().to_string());
        }
    }
    end_vmm(f, vmm, true);
    // An idle pause is a stop with memory that the next request undoes
    // (product.md §2, `sbx idle`).
    const SandboxState end =
        request.idle_pause && request.memory ? SandboxState::Paused : SandboxState::Stopped;
    return store_.change_state(id, StateChange{end, clock_(), std::nullopt, request.reason});
}

Result<ResumeOutcome> VmmDriver::resume(const std::string& id, const api::ResumeRequest& request) {
    auto operation = begin(id);
    if (!operation) {
        return operation.error();
    }
    auto s = store_.get_sandbox(id);
    if (!s) {
        return s.error();
    }
    SandboxRecord wanted = *s;
    if (request.size) {
        api::CreateRequest shape_request;
        // The string, not the optional: GCC 12 at -O1 (the ASan build)
        // warns that copying the optional reads it uninitialized.
        shape_request.size = *request.size;
        shape_request.disk_gib = s->disk_gib;
        auto shape = api::resolve_shape(shape_request, config_.limits);
        if (!shape) {
            return shape.error();
        }
        wanted.size = shape->size;
        wanted.cpus = shape->cpus;
        wanted.memory_mib = shape->memory_mib;
    }
    // A bigger disk: the disk grows under a new overlay before the cold
    // boot, and the guest's file system with it at boot (sbx-growfs.service).
    const SandboxFiles f = files(id);
    std::uint64_t grow_to = 0;
    if (request.disk_gib) {
        auto now_bytes = qcow2_virtual_size(f.disk());
        if (!now_bytes) {
            return api_error(now_bytes.error(), api::code::kInternal);
        }
        const std::uint64_t wanted_bytes = static_cast<std::uint64_t>(*request.disk_gib) * kGiB;
        if (*request.disk_gib > config_.limits.max_disk_gib) {
            return make_coded_error(api::code::kInvalidArgument,
                                    "diskGib {} is more than this host's limit of {}", *request.disk_gib,
                                    config_.limits.max_disk_gib);
        }
        if (wanted_bytes < *now_bytes) {
            return make_coded_error(
                api::code::kInvalidArgument,
                "diskGib {} is smaller than the sandbox's disk ({} GiB): a disk never shrinks",
                *request.disk_gib, *now_bytes / kGiB);
        }
        if (wanted_bytes > *now_bytes) {
            grow_to = wanted_bytes;
        }
    }
    if (grow_to != 0 && (s->state == SandboxState::Stopped || s->state == SandboxState::Paused ||
                         s->state == SandboxState::Crashed)) {
        wanted.disk_gib = *request.disk_gib;
    }
    const bool resized =
        wanted.cpus != s->cpus || wanted.memory_mib != s->memory_mib || wanted.disk_gib != s->disk_gib;
    auto creating =
        store_.change_state(id, StateChange{SandboxState::Creating, clock_(), std::nullopt, request.reason});
    if (!creating) {
        return creating.error();
    }
    ResumeOutcome outcome;
    Result<Started> started = make_error("not started");
    if (auto why = cold_start_reason(f.has_memory(), resized, read_cpu_signature(f.memory()), config_.cpu_signature);
        !why.empty()) {
        outcome.resume_reason = why;
    } else if (auto vmm_file = f.read_vmm(); !vmm_file) {
        outcome.resume_reason = "restore_failed";
        log::warn("sandbox {}: {}", id, vmm_file.error().to_string());
    } else {
        started = boot_restore(id, f, Restore{f.memory(), vmm_file->token, std::nullopt});
        if (started) {
            outcome.memory_restored = true;
            // The VMM maps it copy-on-write and the disk moves on from here:
            // never restore this memory again.
            ::unlink(f.memory().c_str());
        } else if (started.error().code == "cancelled") {
            // sbxd is stopping: no cold boot. The restored guest may have
            // run on the disk, so its memory is stale (as after a cold boot).
            ::unlink(f.memory().c_str());
            return crash(id, started.error(), api::code::kNoReadyMachine);
        } else {
            outcome.resume_reason = "restore_failed";
            log::warn("sandbox {}: restore failed, booting from the disk: {}", id, started.error().to_string());
        }
    }
    if (!outcome.memory_restored) {
        if (wanted.disk_gib != s->disk_gib) {
            // No byte copied: the disk becomes a layer under a bigger overlay.
            if (auto grown = freeze_disk(id, grow_to); !grown) {
                return crash(id, grown.error().context("growing the disk"), api::code::kInternal);
            }
        }
        if (resized) {
            if (auto set = store_.set_shape(id, wanted.size, wanted.cpus, wanted.memory_mib, wanted.disk_gib);
                !set) {
                return crash(id, set.error(), api::code::kInternal);
            }
        }
        started = boot_cold(wanted, f);
    }
    if (!started) {
        return crash(id, started.error(), api::code::kNoReadyMachine);
    }
    auto running = mark_running(id, *started);
    if (!running) {
        return running.error();
    }
    outcome.sandbox = *running;
    return outcome;
}

Result<void> VmmDriver::remove(const std::string& id) {
    auto operation = begin(id);
    if (!operation) {
        return operation.error();
    }
    auto deleting = store_.change_state(id, StateChange{SandboxState::Deleting, clock_(), std::nullopt});
    if (!deleting) {
        return deleting.error();
    }
    const SandboxFiles f = files(id);
    end_vmm(f, std::nullopt, false);
    disconnect_network(*deleting);
    if (auto removed = f.remove(); !removed) {
        return api_error(removed.error(), api::code::kInternal);
    }
    if (auto gone = store_.delete_sandbox(id, clock_()); !gone) {
        return gone.error();
    }
    collect_layers();
    return ok();
}

Result<AgentAddress> VmmDriver::agent(const std::string& id) {
    auto s = store_.get_sandbox(id);
    if (!s) {
        return s.error();
    }
    if (s->state != SandboxState::Running) {
        return make_coded_error(api::code::kInvalidState, "sandbox {} is {}, not running", id, to_string(s->state));
    }
    const SandboxFiles f = files(id);
    auto vmm = f.read_vmm();
    if (!vmm) {
        return api_error(vmm.error(), api::code::kInternal);
    }
    return AgentAddress{f.vsock_socket(), vmm->token};
}

Result<std::string> VmmDriver::disk(const std::string& id) {
    auto s = store_.get_sandbox(id);
    if (!s) {
        return s.error();
    }
    if (s->state != SandboxState::Stopped && s->state != SandboxState::Paused && s->state != SandboxState::Crashed) {
        return make_coded_error(api::code::kInvalidState, "sandbox {} is {}: its disk is in use", id,
                                to_string(s->state));
    }
    return files(id).disk();
}

Result<std::string> VmmDriver::console_log(const std::string& id) {
    if (auto s = store_.get_sandbox(id); !s) {
        return s.error();
    }
    return files(id).console_log();
}

}  // namespace sbx::sbxd
