// What the API handlers ask of the part of sbxd that runs sandboxes: the
// VMM driver (spawning one sbx-vmm per sandbox in its own process group,
// warm templates, disks, re-adoption after a restart). Handlers validate,
// authorize and read the store; everything that changes a sandbox goes
// through this interface, on a worker thread, and may block.
//
// Until the driver exists, UnimplementedDriver answers every operation
// with 501 not_implemented.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "host-tools/sbxd/api/requests.hpp"
#include "host-tools/sbxd/crypto/random.hpp"
#include "host-tools/sbxd/store/records.hpp"
#include "host-tools/sbxd/store/store.hpp"

namespace sbx::sbxd {

// A fresh sandbox id: "sbx_" and 16 random hex digits. The API chooses the
// ids of the sandboxes an operation starts, so that admission (admission.hpp)
// can tell a sandbox it reserved from one the store shows running.
[[nodiscard]] inline Result<std::string> new_sandbox_id() {
    auto hex = random_hex(8);
    if (!hex) {
        return hex.error();
    }
    return "sbx_" + *hex;
}

struct CreateSpec {
    std::string id;  // the new sandbox's (new_sandbox_id())
    api::CreateRequest request;
    api::SandboxShape shape;
    std::optional<IdempotencyClaim> claim;
};

// Where a running sandbox's agent answers: the VMM's hybrid-vsock Unix
// socket (docs/vmm-control.md; "CONNECT 52\n") and the token that guest
// was given (docs/agent-protocol.md). Exec and file routes connect to it
// with the agent client library.
struct AgentAddress {
    std::string uds_path;
    std::string token;
};

struct ResumeOutcome {
    SandboxRecord sandbox;
    bool memory_restored = false;
    std::string
        resume_reason;  // when not restored: cpu_mismatch, resized, no_memory_snapshot, restore_failed
};

class SandboxDriver {
public:
    virtual ~SandboxDriver() = default;
    [[nodiscard]] virtual Result<CreateOutcome> create(const CreateSpec& spec) = 0;
    [[nodiscard]] virtual Result<SandboxRecord> stop(const std::string& id,
                                                     const api::StopRequest& request) = 0;
    [[nodiscard]] virtual Result<ResumeOutcome> resume(const std::string& id,
                                                       const api::ResumeRequest& request) = 0;
    [[nodiscard]] virtual Result<std::vector<SandboxRecord>> fork(
        const std::string& id, const api::ForkRequest& request, const std::optional<IdempotencyClaim>& claim,
        const std::vector<std::string>& child_ids) = 0;  // request.count of new_sandbox_id()
    [[nodiscard]] virtual Result<void> remove(const std::string& id) = 0;
    [[nodiscard]] virtual Result<SnapshotRecord> snapshot(const std::string& id,
                                                          const api::SnapshotRequest& request) = 0;
    // A named snapshot's files and row, and the disk layers no sandbox uses.
    [[nodiscard]] virtual Result<void> remove_snapshot(const std::string& name) = 0;
    // The agent of a running sandbox; invalid_state when it has no running
    // VMM (a driver with idle pause resumes a paused sandbox first).
    [[nodiscard]] virtual Result<AgentAddress> agent(const std::string& id) = 0;
    // The root disk (a qcow2 image, its backing chain sbxd's own) of a
    // sandbox with no VMM (stopped, paused, crashed), for reading its files
    // without resuming it; invalid_state in any other state.
    [[nodiscard]] virtual Result<std::string> disk(const std::string& id) = 0;
    // The guest console's file (docs/sbxd.md, "Sandbox folders") of a
    // sandbox in any state; it may not exist yet (a create before its VMM).
    [[nodiscard]] virtual Result<std::string> console_log(const std::string& id) = 0;
    // The sandbox's egress policy as the store now has it (record.egress)
    // reaches its network at once; a sandbox with no tap gets it at its
    // next start. A driver without networks has nothing to do.
    [[nodiscard]] virtual Result<void> apply_egress(const SandboxRecord&) { return ok(); }
    // sbxd is stopping: a start waiting for its guest (a create, a resume,
    // a wake) gives up now with "cancelled" instead of at its timeout.
    virtual void cancel_starts() {}
};

class UnimplementedDriver final : public SandboxDriver {
public:
    Result<CreateOutcome> create(const CreateSpec&) override { return missing("create"); }
    Result<SandboxRecord> stop(const std::string&, const api::StopRequest&) override {
        return missing("stop");
    }
    Result<ResumeOutcome> resume(const std::string&, const api::ResumeRequest&) override {
        return missing("resume");
    }
    Result<std::vector<SandboxRecord>> fork(const std::string&, const api::ForkRequest&,
                                            const std::optional<IdempotencyClaim>&,
                                            const std::vector<std::string>&) override {
        return missing("fork");
    }
    Result<void> remove(const std::string&) override { return missing("delete"); }
    Result<SnapshotRecord> snapshot(const std::string&, const api::SnapshotRequest&) override {
        return missing("snapshot");
    }
    Result<void> remove_snapshot(const std::string&) override { return missing("snapshot delete"); }
    Result<AgentAddress> agent(const std::string&) override { return missing("exec"); }
    Result<std::string> disk(const std::string&) override { return missing("files"); }
    Result<std::string> console_log(const std::string&) override { return missing("logs"); }

private:
    static Error missing(std::string_view what) {
        return make_coded_error("not_implemented",
                                "sandbox {} needs the VMM driver, which this sbxd does not have yet", what);
    }
};

}  // namespace sbx::sbxd
