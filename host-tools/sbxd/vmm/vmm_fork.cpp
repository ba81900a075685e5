// Forks (docs/sbxd.md, "Fork"): the parent's disk is frozen into a shared
// read-only layer under state-dir/layers/, and the parent and each child
// get a new qcow2 overlay on it, so no byte of the disk is copied. With
// memory, the parent's memory is saved once (raw) and the parent and every
// child are restored from that one file copy-on-write; each child then
// gets a fresh identity (generation, RNG seed, token) and its own CID.
// Each sandbox folder lists the layers under its disk in layers.txt, so a
// layer no folder lists any more is removed.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "base/log.hpp"
#include "devices/virtio/blk/qcow2/qcow2_create.hpp"
#include "host-tools/sbxd/api/api_error.hpp"
#include "host-tools/sbxd/crypto/random.hpp"
#include "host-tools/sbxd/vmm/control_client.hpp"
#include "host-tools/sbxd/vmm/vmm_driver.hpp"
#include "host-tools/sbxd/vmm/vmm_launch.hpp"

namespace sbx::sbxd {

namespace {

namespace fs = std::filesystem;

}  // namespace

Result<SandboxRecord> VmmDriver::new_record(const SandboxRecord& like, const std::string& id) const {
    SandboxRecord s = like;
    s.id = id;
    s.name = id;
    s.state = SandboxState::Creating;
    s.created_at = clock_();
    s.last_activity_at = s.created_at;
    s.started_at.reset();
    s.vmm.reset();
    s.network.reset();  // a child gets its own slot and MAC
    if (like.auto_stop_at && like.started_at) {
        s.auto_stop_at = s.created_at + (*like.auto_stop_at - *like.started_at);
    }
    return s;
}

// The sandbox's disk becomes a layer: a second name for the same file
// (nothing copied), then a new empty overlay on it takes disk.qcow2's name
// by rename, so disk.qcow2 is whole at every instant.
Result<std::string> VmmDriver::freeze_disk(const std::string& id, std::uint64_t size) {
    const SandboxFiles f = files(id);
    std::error_code ec;
    fs::create_directories(layers_dir(), ec);
    if (ec) {
        return make_error("creating {}: {}", layers_dir(), ec.message());
    }
    auto suffix = random_hex(4);
    if (!suffix) {
        return suffix.error();
    }
    const std::string layer = fs::absolute(layers_dir() + "/" + id + "-" + *suffix + ".qcow2").string();
    if (::link(f.disk().c_str(), layer.c_str()) != 0) {
        return sys_error("linking {} to {}", f.disk(), layer);
    }
    const std::string next = f.dir() + "/disk.next.qcow2";
    ::unlink(next.c_str());
    if (auto made = qcow2::create_overlay(next, layer, qcow2::BackingFormat::Qcow2, size); !made) {
        ::unlink(layer.c_str());
        return made.error();
    }
    auto chain = read_lines(f.layers_list());
    chain.push_back(layer);
    if (auto listed = write_lines(f.layers_list(), chain); !listed) {
        return listed.error();
    }
    if (::rename(next.c_str(), f.disk().c_str()) != 0) {
        return sys_error("renaming {} to {}", next, f.disk());
    }
    ::chmod(layer.c_str(), 0400);  // nothing writes a layer again
    return layer;
}

void VmmDriver::collect_layers() {
    std::set<std::string> used;
    std::error_code ec;
    // Sandboxes and named snapshots (finished or being made) hold layers.
    for (const char* holders : {"/sandboxes", "/snapshots"}) {
        for (fs::directory_iterator it(config_.state_dir + holders, ec), end; !ec && it != end;
             it.increment(ec)) {
            for (auto& layer : read_lines(SandboxFiles::in_dir(it->path().string()).layers_list())) {
                used.insert(std::move(layer));
            }
        }
        ec.clear();
    }
    for (fs::directory_iterator it(layers_dir(), ec), end; !ec && it != end; it.increment(ec)) {
        const std::string path = fs::absolute(it->path()).string();
        if (!used.contains(path)) {
            std::error_code e;
            fs::remove(path, e);
        }
    }
}

Result<std::vector<SandboxRecord>> VmmDriver::fork(const std::string& id, const api::ForkRequest& request,
                                                   const std::optional<IdempotencyClaim>& claim,
                                                   const std::vector<std::string>& child_ids) {
    if (child_ids.size() != static_cast<std::size_t>(request.count)) {
        return make_coded_error(api::code::kInternal, "a fork of {} children was given {} ids", request.count,
                                child_ids.size());
    }
    auto operation = begin(id);
    if (!operation) {
        return operation.error();
    }
    // One fork per key at a time (a second one on another parent would
    // record its children under the same key), and a fork that finished
    // since the API looked is replayed.
    std::shared_ptr<void> key_guard;
    if (claim) {
        {
            std::lock_guard lock(fork_keys_mutex_);
            if (!fork_keys_.insert(claim->key).second) {
                return make_coded_error(api::code::kIdempotencyConflict,
                                        "a fork with Idempotency-Key '{}' is in progress", claim->key);
            }
        }
        key_guard = std::shared_ptr<void>(nullptr, [this, key = claim->key](void*) {
            std::lock_guard lock(fork_keys_mutex_);
            fork_keys_.erase(key);
        });
        auto earlier = store_.find_fork_claim(*claim, clock_());
        if (!earlier || !earlier->empty()) {
            return earlier;
        }
    }
    auto parent = store_.get_sandbox(id);
    if (!parent) {
        return parent.error();
    }
    const bool running = parent->state == SandboxState::Running;
    const bool stopped = parent->state == SandboxState::Stopped || parent->state == SandboxState::Paused;
    if (!running && !(stopped && !request.memory)) {
        return make_coded_error(api::code::kInvalidState, "sandbox {} is {}: a fork needs it running{}", id,
                                to_string(parent->state), request.memory ? "" : " or stopped");
    }
    return fork_locked(*parent, request, claim, child_ids);
}

Result<std::vector<SandboxRecord>> VmmDriver::fork_locked(const SandboxRecord& parent,
                                                          const api::ForkRequest& request,
                                                          const std::optional<IdempotencyClaim>& claim,
                                                          const std::vector<std::string>& child_ids) {
    const SandboxFiles pf = files(parent.id);
    const bool running = parent.state == SandboxState::Running;
    std::string saved_token;
    if (running) {
        // Paused and saved in one op; on failure the parent runs on untouched.
        const VmmProcess vmm = parent.vmm.value_or(VmmProcess{});
        auto saved = save_memory(vmm, pf, kSnapshotTimeout);
        if (!saved) {
            (void)control_call(vmm.control_socket, {{"op", "resume"}});
            return saved.error().context("saving the parent's memory").with_code(save_failure_code(saved.error()));
        }
        auto vmm_file = pf.read_vmm();
        if (!vmm_file) {
            (void)control_call(vmm.control_socket, {{"op", "resume"}});
            return vmm_file.error().with_code(api::code::kInternal);
        }
        saved_token = vmm_file->token;
        if (auto s = store_.change_state(parent.id, {SandboxState::Stopping, clock_(), std::nullopt}); !s) {
            (void)control_call(vmm.control_socket, {{"op", "resume"}});
            return s.error();
        }
        end_vmm(pf, vmm, true);
        if (auto s = store_.change_state(parent.id, {SandboxState::Stopped, clock_(), std::nullopt}); !s) {
            return s.error();
        }
    }
    auto layer = freeze_disk(parent.id);
    if (!layer) {
        if (running) {
            return crash(parent.id, layer.error(), api::code::kInternal);
        }
        return layer.error().with_code(api::code::kInternal);
    }

    // The children's rows and folders, each on its own overlay of the layer.
    std::vector<SandboxRecord> children;
    std::vector<Operation> operations;
    for (const std::string& child_id : child_ids) {
        auto op = begin(child_id);
        auto child = new_record(parent, child_id);
        if (!op || !child) {
            break;
        }
        auto created = store_.create_sandbox(*child, std::nullopt);
        if (!created) {
            log::warn("fork of {}: {}", parent.id, created.error().to_string());
            break;
        }
        if (claim) {
            if (auto recorded = store_.add_fork_child(*claim, child->id, child->created_at); !recorded) {
                log::warn("fork of {}: recording its Idempotency-Key: {}", parent.id,
                          recorded.error().to_string());
            }
        }
        const SandboxFiles cf = files(child->id);
        Result<void> ready = cf.create();
        if (ready) {
            ready = qcow2::create_overlay(cf.disk(), *layer, qcow2::BackingFormat::Qcow2, 0);
        }
        if (ready) {
            ready = write_lines(cf.layers_list(), read_lines(pf.layers_list()));
        }
        if (ready && fs::exists(pf.image_file())) {
            ready = write_lines(cf.image_file(), read_lines(pf.image_file()));
        }
        if (!ready) {
            (void)crash(child->id, ready.error(), api::code::kInternal);
            continue;
        }
        operations.push_back(std::move(*op));
        children.push_back(std::move(*child));
    }

    // The parent first (it was running), then the children at once.
    bool parent_restored = false;
    if (running) {
        Result<SandboxRecord> back = store_.change_state(parent.id, {SandboxState::Creating, clock_(), std::nullopt});
        if (back) {
            auto started = boot_restore(parent.id, pf, Restore{pf.memory(), saved_token, std::nullopt});
            if (started) {
                parent_restored = mark_running(parent.id, *started).has_value();
            } else {
                (void)crash(parent.id, started.error(), api::code::kNoReadyMachine);
            }
        }
    }
    std::vector<std::thread> starts;
    for (std::size_t i = 0; i < children.size(); ++i) {
        starts.emplace_back([&, i] {
            const SandboxRecord& child = children[i];
            const SandboxFiles cf = files(child.id);
            auto started = request.memory
                               ? boot_restore(child.id, cf,
                                              Restore{pf.memory(), saved_token, static_cast<std::uint64_t>(i + 1)})
                               : boot_cold(child, cf);
            if (!started) {
                (void)crash(child.id, started.error(), api::code::kNoReadyMachine);
                return;
            }
            (void)mark_running(child.id, *started);
        });
    }
    for (auto& t : starts) {
        t.join();
    }
    if (running && parent_restored) {
        // Every VMM maps it copy-on-write already; the name goes.
        ::unlink(pf.memory().c_str());
    }

    std::vector<SandboxRecord> result;
    for (const auto& child : children) {
        if (auto now = store_.get_sandbox(child.id); now) {
            result.push_back(*now);
        }
    }
    if (result.empty() || std::none_of(result.begin(), result.end(), [](const SandboxRecord& s) {
            return s.state == SandboxState::Running;
        })) {
        return make_coded_error(api::code::kNoReadyMachine, "no child of {} started (see their vmm.log)",
                                parent.id);
    }
    return result;
}

}  // namespace sbx::sbxd
