// Named snapshots (docs/sbxd.md, "Named snapshots"): a folder
// state-dir/snapshots/<name>/ with the frozen disk layer it stands on
// (layers.txt, the newest last), its image (image.txt) and, when it has
// memory, memory.snap (raw), its CPU signature (memory.snap.cpu) and
// vmm.json with the token of the saved guest. Nothing is copied: the disk
// is frozen as a fork freezes it and the memory file is a second name.
// A create from it restores the memory copy-on-write with a fresh identity
// where it can, else cold-boots from the layer and says why.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "base/log.hpp"
#include "devices/virtio/blk/qcow2/qcow2_create.hpp"
#include "host-tools/sbxd/api/api_error.hpp"
#include "host-tools/sbxd/crypto/random.hpp"
#include "host-tools/sbxd/vmm/boot_images.hpp"
#include "host-tools/sbxd/vmm/control_client.hpp"
#include "host-tools/sbxd/vmm/cpu_signature.hpp"
#include "host-tools/sbxd/vmm/vmm_driver.hpp"
#include "host-tools/sbxd/vmm/vmm_launch.hpp"

namespace sbx::sbxd {

namespace {

namespace fs = std::filesystem;

constexpr std::string_view kBuildingMark = ".tmp-";
constexpr std::uint64_t kGiB = 1ULL << 30;

std::int64_t size_of(const std::string& path) {
    struct stat st{};
    return ::stat(path.c_str(), &st) == 0 ? static_cast<std::int64_t>(st.st_size) : 0;
}

}  // namespace

Result<std::string> VmmDriver::save_running(const SandboxRecord& sandbox, const SandboxFiles& into) {
    const SandboxFiles pf = files(sandbox.id);
    const VmmProcess vmm = sandbox.vmm.value_or(VmmProcess{});
    // Until the VMM ends, a failure lets the sandbox run on untouched.
    auto undo = [&](const Error& e) {
        (void)control_call(vmm.control_socket, {{"op", "resume"}});
        return e.with_code(api::code::kInternal);
    };
    auto saved = save_memory(vmm, pf, kSnapshotTimeout);
    if (!saved) {
        return undo(saved.error().context("saving the memory")).with_code(save_failure_code(saved.error()));
    }
    auto vmm_file = pf.read_vmm();
    if (!vmm_file) {
        return undo(vmm_file.error());
    }
    // The VMM writes only inside its own folder: the snapshot's is a second name.
    if (::link(pf.memory().c_str(), into.memory().c_str()) != 0) {
        return undo(sys_error("linking {} to {}", pf.memory(), into.memory()));
    }
    Result<void> kept = write_cpu_signature(into.memory(), config_.cpu_signature);
    if (kept) {
        kept = into.write_vmm(VmmFile{vmm_file->token, 0, VmmProcess{}});
    }
    if (!kept) {
        return undo(kept.error());
    }
    if (auto s = store_.change_state(sandbox.id, {SandboxState::Stopping, clock_(), std::nullopt}); !s) {
        return undo(s.error());
    }
    end_vmm(pf, vmm, true);
    if (auto s = store_.change_state(sandbox.id, {SandboxState::Stopped, clock_(), std::nullopt}); !s) {
        return s.error();
    }
    auto layer = freeze_disk(sandbox.id);
    if (!layer) {
        return crash(sandbox.id, layer.error(), api::code::kInternal);
    }
    // Back on its new overlay, from the memory just saved (as a fork's parent).
    if (auto back = store_.change_state(sandbox.id, {SandboxState::Creating, clock_(), std::nullopt}); !back) {
        log::warn("sandbox {}: {}", sandbox.id, back.error().to_string());
        return layer;
    }
    auto started = boot_restore(sandbox.id, pf, Restore{pf.memory(), vmm_file->token, std::nullopt});
    if (!started) {
        (void)crash(sandbox.id, started.error(), api::code::kNoReadyMachine);
        return layer;
    }
    if (mark_running(sandbox.id, *started)) {
        ::unlink(pf.memory().c_str());  // the snapshot keeps its own name for it
    }
    return layer;
}

Result<SnapshotRecord> VmmDriver::snapshot(const std::string& id, const api::SnapshotRequest& request) {
    auto operation = begin(id);
    if (!operation) {
        return operation.error();
    }
    if (auto taken = store_.get_snapshot(request.name); taken) {
        return make_coded_error(api::code::kAlreadyExists, "a snapshot named '{}' exists", request.name);
    } else if (taken.error().code != api::code::kNotFound) {
        return taken.error();
    }
    // An image's name, built or not: a snapshot would hide the image from creates.
    if (check_boot_image_name(request.name)) {
        return make_coded_error(api::code::kAlreadyExists, "'{}' names an image", request.name);
    }
    auto s = store_.get_sandbox(id);
    if (!s) {
        return s.error();
    }
    const bool running = s->state == SandboxState::Running;
    if (!running && s->state != SandboxState::Stopped && s->state != SandboxState::Paused) {
        return make_coded_error(api::code::kInvalidState, "sandbox {} is {}: a snapshot needs it running or stopped",
                                id, to_string(s->state));
    }
    auto suffix = random_hex(4);
    if (!suffix) {
        return suffix.error();
    }
    const std::string final_dir = snapshots_dir() + "/" + request.name;
    const SandboxFiles snap =
        SandboxFiles::in_dir(snapshots_dir() + "/" + std::string(kBuildingMark) + request.name + "-" + *suffix);
    std::error_code ec;
    fs::create_directories(snapshots_dir(), ec);
    if (auto made = snap.create(); !made) {
        return made.error().with_code(api::code::kInternal);
    }
    auto fail = [&](const Error& e) {
        (void)snap.remove();
        return e;
    };
    SnapshotRecord record{request.name, id, false, image_of(*s), s->disk_gib, clock_(), s->cpus, s->memory_mib};
    const SandboxFiles sf = files(id);
    Result<std::string> layer = make_error("no layer");
    if (running) {
        layer = save_running(*s, snap);
        record.has_memory = layer.has_value();
        record.cpu_signature = config_.cpu_signature;
    } else {
        if (sf.has_memory()) {
            auto vmm_file = sf.read_vmm();
            const std::string signature = read_cpu_signature(sf.memory());
            Result<void> linked = vmm_file ? ok() : Result<void>(vmm_file.error());
            if (linked && ::link(sf.memory().c_str(), snap.memory().c_str()) != 0) {
                linked = sys_error("linking {}", sf.memory());
            }
            if (linked) {
                linked = write_cpu_signature(snap.memory(), signature);
            }
            if (linked) {
                linked = snap.write_vmm(VmmFile{vmm_file->token, 0, VmmProcess{}});
            }
            if (!linked) {
                return fail(linked.error().with_code(api::code::kInternal));
            }
            record.has_memory = true;
            record.cpu_signature = signature;
        }
        layer = freeze_disk(id);
    }
    if (!layer) {
        return fail(layer.error().with_code(api::code::kInternal));
    }
    Result<void> written = write_lines(snap.layers_list(), read_lines(sf.layers_list()));
    if (written) {
        written = write_lines(snap.image_file(), {record.from});
    }
    if (!written) {
        return fail(written.error().with_code(api::code::kInternal));
    }
    ::chmod(snap.memory().c_str(), 0400);  // the backing of every sandbox restored from it
    record.size_bytes = size_of(snap.memory()) + size_of(*layer);
    std::lock_guard lock(snapshots_mutex_);
    if (auto added = store_.add_snapshot(record); !added) {
        return fail(added.error());
    }
    if (::rename(snap.dir().c_str(), final_dir.c_str()) != 0) {
        Error e = sys_error("renaming {} to {}", snap.dir(), final_dir).with_code(api::code::kInternal);
        (void)store_.remove_snapshot(record.name);
        return fail(e);
    }
    return record;
}

Result<void> VmmDriver::remove_snapshot(const std::string& name) {
    std::lock_guard lock(snapshots_mutex_);
    if (auto removed = store_.remove_snapshot(name); !removed) {
        return removed.error();
    }
    if (auto gone = SandboxFiles::in_dir(snapshots_dir() + "/" + name).remove(); !gone) {
        return gone.error().with_code(api::code::kInternal);
    }
    collect_layers();
    return ok();
}

void VmmDriver::remove_unfinished_snapshots() {
    std::lock_guard lock(snapshots_mutex_);
    std::error_code ec;
    for (fs::directory_iterator it(snapshots_dir(), ec), end; !ec && it != end; it.increment(ec)) {
        if (it->path().filename().string().starts_with(kBuildingMark)) {
            log::info("removing the unfinished snapshot {}", it->path().string());
            (void)SandboxFiles::in_dir(it->path().string()).remove();
        }
    }
    auto rows = store_.list_snapshots();
    for (const auto& row : rows ? *rows : std::vector<SnapshotRecord>{}) {
        if (!fs::exists(snapshots_dir() + "/" + row.name)) {
            log::warn("snapshot {} has no folder: forgetting it", row.name);
            (void)store_.remove_snapshot(row.name);
        }
    }
}

Result<CreateOutcome> VmmDriver::create_from_snapshot(const CreateSpec& spec, const SnapshotRecord& snapshot) {
    // A cold boot (the fallback of every restore) needs the image's kernel.
    if (auto image = find_boot_image(config_.images_dir, snapshot.from); !image) {
        return image.error().context(fmt::format("the image '{}' of snapshot '{}'", snapshot.from, snapshot.name));
    }
    const std::string& id = spec.id;
    auto operation = begin(id);
    if (!operation) {
        return operation.error();
    }
    SandboxRecord s = sandbox_record(spec, id, snapshot.name, clock_());
    s.disk_gib = std::max(s.disk_gib, snapshot.disk_gib);  // never below the layer
    auto created = store_.create_sandbox(s, spec.claim);
    if (!created || created->replayed) {
        return created;
    }
    const SandboxFiles f = files(s.id);
    if (auto made = f.create(); !made) {
        return crash(s.id, made.error(), api::code::kInternal);
    }
    const SandboxFiles saved = SandboxFiles::in_dir(snapshots_dir() + "/" + snapshot.name);
    const bool resized =
        s.cpus != snapshot.cpus || s.memory_mib != snapshot.memory_mib || s.disk_gib != snapshot.disk_gib;
    std::string reason = spec.request.cold ? "cold"
                                           : cold_start_reason(snapshot.has_memory && saved.has_memory(), resized,
                                                               snapshot.cpu_signature, config_.cpu_signature);
    std::string layer;
    std::string saved_token;
    {
        // While it is linked here, the snapshot is not deleted under it; afterwards
        // this folder's layers.txt holds the layers and its memory.snap the memory.
        std::lock_guard lock(snapshots_mutex_);
        const std::vector<std::string> layers = read_lines(saved.layers_list());
        if (layers.empty()) {
            return crash(s.id, make_error("snapshot '{}' has no disk layer in {}", snapshot.name, saved.dir()),
                         api::code::kInternal);
        }
        layer = layers.back();
        Result<void> linked = write_lines(f.layers_list(), layers);
        if (linked) {
            linked = write_lines(f.image_file(), {snapshot.from});
        }
        if (!linked) {
            return crash(s.id, linked.error(), api::code::kInternal);
        }
        if (reason.empty()) {
            auto vmm_file = saved.read_vmm();
            if (!vmm_file || ::link(saved.memory().c_str(), f.memory().c_str()) != 0) {
                reason = "restore_failed";
                log::warn("sandbox {}: snapshot '{}' has no usable memory", s.id, snapshot.name);
            } else {
                saved_token = vmm_file->token;
            }
        }
    }
    std::uint64_t size = s.disk_gib > snapshot.disk_gib ? static_cast<std::uint64_t>(s.disk_gib) * kGiB : 0;
    // Never below the layer: a disk grown by a resume is bigger than the
    // diskGib its row (and so the snapshot's) kept.
    if (auto layer_size = qcow2_virtual_size(layer); size != 0 && layer_size && size < *layer_size) {
        size = 0;
    }
    auto fresh_overlay = [&] {
        ::unlink(f.disk().c_str());
        return qcow2::create_overlay(f.disk(), layer, qcow2::BackingFormat::Qcow2, size);
    };
    if (auto overlay = fresh_overlay(); !overlay) {
        return crash(s.id, overlay.error(), api::code::kInternal);
    }
    Result<Started> started = make_error("not started");
    if (reason.empty()) {
        // A fresh identity, as a fork child's: generation, RNG seed, token, CID.
        started = boot_restore(s.id, f, Restore{f.memory(), saved_token, 1});
        if (started) {
            ::unlink(f.memory().c_str());  // mapped already; the disk moves on
        } else {
            reason = "restore_failed";
            log::warn("sandbox {}: restoring snapshot '{}': {}", s.id, snapshot.name, started.error().to_string());
            // The guest may have run a little on the overlay: a clean one.
            if (auto overlay = fresh_overlay(); !overlay) {
                return crash(s.id, overlay.error(), api::code::kInternal);
            }
        }
    }
    std::vector<std::string> warnings;
    if (!reason.empty()) {
        warnings.push_back(
            fmt::format("the memory of snapshot '{}' was not restored ({}): a cold boot from its disk", snapshot.name,
                        reason));
        started = boot_cold(s, f);
    }
    auto running = run_started(s.id, started);
    if (!running) {
        return running.error();
    }
    return CreateOutcome{*running, false, warnings, reason.empty(), reason};
}

}  // namespace sbx::sbxd
