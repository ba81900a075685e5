#include "host-tools/sbx-vmm/control_api.hpp"

#include <chrono>
#include <thread>

#include "base/log.hpp"
#include "snapshot/vm_snapshot.hpp"
#include "host-tools/sbx-vmm/control_request.hpp"
#include "host-tools/sbx-vmm/control_server.hpp"

namespace sbx {

namespace {

using nlohmann::json;

json state_reply(const Vm& vm, const VmConfig& config) {
    return {{"ok", true},
            {"state", vm.paused() ? "paused" : "running"},
            {"vcpus", vm.vcpu_count()},
            {"memory_mib", config.memory_mib}};
}

// snapshot/format's errors still say their code as the message's first
// word ("io: ..."): that library's error_code() reads it.
Error with_format_code(const Error& error) {
    if (!error.code.empty()) {
        return error;
    }
    auto word = snapshot::error_code(error);
    return word.empty() ? error : error.with_code(word);
}

// Pauses if needed (the snapshot is of a stopped machine), writes the file
// and leaves the VM paused unless the request says "resume": true.
json take_snapshot(Vm& vm, const VmConfig& config, const ControlOptions& control, const json& request) {
    auto parsed = parse_snapshot_request(request, control.snapshot_dir);
    if (!parsed) {
        return ControlServer::error_reply(parsed.error());
    }
    const SnapshotRequest& req = *parsed;
    snapshot::SaveOptions options;
    options.mode = req.raw ? snapshot::MemoryMode::Raw : snapshot::MemoryMode::Compressed;
    options.zstd_level = req.level;
    options.threads = req.threads;
    // The working set: what the guest writes in the moments before the
    // pause, which a lazy restore then loads first.
    const auto window = std::chrono::milliseconds(req.working_set_ms);
    const bool track = window.count() > 0 && !vm.paused();
    if (track) {
        if (auto r = vm.start_dirty_tracking(); !r) {
            return ControlServer::error_reply(r.error());
        }
        std::this_thread::sleep_for(window);
    }
    const auto start = std::chrono::steady_clock::now();
    auto paused_ok = vm.pause();
    if (track) {
        auto ranges = vm.stop_dirty_tracking();
        if (!ranges) {
            return ControlServer::error_reply(ranges.error());
        }
        options.working_set = std::move(*ranges);
    }
    if (!paused_ok) {
        return ControlServer::error_reply(paused_ok.error());
    }
    const auto paused = std::chrono::steady_clock::now();
    auto stats = snapshot::save_vm(vm, config, req.path, options);
    if (!stats) {
        return ControlServer::error_reply(with_format_code(stats.error()));
    }
    if (req.resume) {
        if (auto r = vm.resume(); !r) {
            return ControlServer::error_reply(r.error());
        }
    }
    auto pause_ms = std::chrono::duration<double, std::milli>(paused - start).count();
    log::info("snapshot {}: {} MiB of memory ({} MiB zero) in {} MiB, {:.1f} ms to pause, {:.1f} ms to write",
              req.path, stats->memory_bytes >> 20, stats->zero_bytes >> 20,
              stats->file_bytes >> 20, pause_ms, stats->seconds * 1000);
    auto reply = state_reply(vm, config);
    reply["memory_bytes"] = stats->memory_bytes;
    reply["zero_bytes"] = stats->zero_bytes;
    reply["file_bytes"] = stats->file_bytes;
    reply["pause_ms"] = pause_ms;
    reply["write_ms"] = stats->seconds * 1000;
    std::uint64_t working_set = 0;
    for (const auto& range : options.working_set) {
        working_set += range.size;
    }
    reply["working_set_bytes"] = working_set;
    return reply;
}

std::string hex(std::uint64_t value) { return fmt::format("{:#x}", value); }

json counters(const VmDiagnosis::Counters& stats) {
    json out = json::object();
    for (const auto& [name, value] : stats) {
        out[name] = value;
    }
    return out;
}

json vcpu_json(const kvm::VcpuDiagnosis& v, const VmDiagnosis::Counters& stats) {
    return {{"id", v.id},
            {"rip", hex(v.rip)},
            {"rsp", hex(v.rsp)},
            {"rflags", hex(v.rflags)},
            {"cr0", hex(v.cr0)},
            {"cr3", hex(v.cr3)},
            {"cr4", hex(v.cr4)},
            {"efer", hex(v.efer)},
            {"cs", hex(v.cs)},
            {"cpl", v.cpl},
            {"mp_state", v.mp_state},
            {"interrupts_enabled", v.interrupts_enabled},
            {"interrupt_shadow", v.interrupt_shadow},
            {"injected_vector", v.injected_vector},
            {"exception", v.exception},
            {"nmi", {{"pending", v.nmi_pending}, {"injected", v.nmi_injected}, {"masked", v.nmi_masked}}},
            {"lapic",
             {{"isr", v.apic_isr},
              {"irr", v.apic_irr},
              {"tpr", v.apic_tpr},
              {"lvt_timer", hex(v.apic_lvt_timer)},
              {"timer_initial", v.apic_timer_initial},
              {"timer_current", v.apic_timer_current},
              {"tsc_deadline", v.tsc_deadline}}},
            {"kvm", counters(stats)}};
}

json walk_json(const Result<PageWalk>& walk) {
    if (!walk) {
        return {{"error", walk.error().to_string()}};
    }
    json entries = json::array();
    for (auto e : walk->entries) {
        entries.push_back(hex(e));
    }
    json out = {{"maps", walk->present}, {"entries", entries}};
    if (walk->present) {
        out["physical"] = hex(walk->physical);
        out["page_size"] = walk->page_size;
        out["writable"] = walk->writable;
        out["user"] = walk->user;
        out["executable"] = walk->executable;
    }
    return out;
}

json diagnose(Vm& vm) {
    auto d = vm.diagnose();
    if (!d) {
        return ControlServer::error_reply(d.error());
    }
    json vcpus = json::array();
    for (std::size_t i = 0; i < d->vcpus.size(); ++i) {
        vcpus.push_back(vcpu_json(d->vcpus[i], i < d->vcpu_stats.size() ? d->vcpu_stats[i] : VmDiagnosis::Counters{}));
        if (i < d->rip_walks.size() && d->rip_walks[i]) {
            vcpus.back()["rip_walk"] = walk_json(*d->rip_walks[i]);
        }
    }
    // vCPUs that did not stop: their counters only.
    for (std::size_t i = d->vcpus.size(); i < d->vcpu_stats.size(); ++i) {
        vcpus.push_back({{"id", i}, {"kvm", counters(d->vcpu_stats[i])}});
    }
    json ioapic = json::array();
    for (const auto& p : d->chips.ioapic) {
        ioapic.push_back({{"pin", p.pin},
                          {"vector", p.vector},
                          {"masked", p.masked},
                          {"level", p.level_triggered},
                          {"remote_irr", p.remote_irr},
                          {"asserted", p.asserted},
                          {"dest", p.destination}});
    }
    auto pic = [](const kvm::PicDiagnosis& p) { return json{{"irr", p.irr}, {"isr", p.isr}, {"imr", p.imr}}; };
    const auto& s = d->serial;
    json reply = {{"ok", true},
                  {"state", d->was_paused ? "paused" : "running"},
                  {"vcpus", vcpus},
                  {"ioapic", ioapic},
                  {"pic", {{"master", pic(d->chips.pic_master)}, {"slave", pic(d->chips.pic_slave)}}},
                  {"pit", {{"mode", d->chips.pit_mode}, {"count", d->chips.pit_count}, {"gate", d->chips.pit_gate}}},
                  {"kvmclock_ns", d->chips.clock_ns},
                  {"serial",
                   {{"ier", s.ier},
                    {"lsr", s.lsr},
                    {"mcr", s.mcr},
                    {"thr_interrupt_pending", s.thr_interrupt_pending},
                    {"rx_bytes", s.rx_fifo.size()}}},
                  {"kvm", counters(d->vm_stats)}};
    if (!d->vcpus_unavailable.empty()) {
        reply["vcpus_unavailable"] = d->vcpus_unavailable;
    }
    return reply;
}

}  // namespace

json handle_control_request(Vm& vm, const VmConfig& config, const ControlOptions& options, const json& request) {
    auto parsed_op = request_op(request);
    if (!parsed_op) {
        return ControlServer::error_reply(parsed_op.error());
    }
    const std::string& op = *parsed_op;
    if (op == "status") {
        return state_reply(vm, config);
    }
    if (op == "pause" || op == "resume") {
        auto r = op == "pause" ? vm.pause() : vm.resume();
        return r ? state_reply(vm, config) : ControlServer::error_reply(r.error());
    }
    if (op == "snapshot") {
        return take_snapshot(vm, config, options, request);
    }
    if (op == "diagnose") {
        return diagnose(vm);
    }
    if (op == "stop") {
        vm.request_stop();
        return {{"ok", true}, {"state", "stopping"}};
    }
    return ControlServer::error_reply(
        make_coded_error("bad_request", "unknown op \"{}\" (status, pause, resume, snapshot, diagnose, stop)", op));
}

}  // namespace sbx
