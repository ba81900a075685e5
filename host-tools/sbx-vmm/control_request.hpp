// The fields of control requests, read as untrusted input
// (docs/vmm-control.md): every field is type-checked and bounded before
// anything acts on it, and a snapshot path must lie inside the directory
// given at start (--snapshot-dir). Plain data over JSON, no VM, so the
// refusals are unit-tested without KVM.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "base/result.hpp"

namespace sbx {

struct SnapshotRequest {
    static constexpr std::uint64_t kMaxThreads = 64;
    static constexpr std::uint64_t kMaxWorkingSetMs = 60'000;
    static constexpr int kMinLevel = 1, kMaxLevel = 19;
    static constexpr std::size_t kMaxPath = 4095;  // PATH_MAX less its NUL (limits.h)

    std::string path;  // resolved: the snapshot directory, its subdirectories, a file name
    bool raw = false;  // "mode": "raw" (else "compressed")
    int level = 1;
    unsigned threads = 0;  // 0: one per host CPU
    std::uint64_t working_set_ms = 0;
    bool resume = false;
};

// The request's "op": a string, or bad_request.
[[nodiscard]] Result<std::string> request_op(const nlohmann::json& request);

// The snapshot directory as sbx-vmm keeps it: absolute, symlinks resolved;
// an error when it is not an existing directory.
[[nodiscard]] Result<std::string> canonical_snapshot_dir(const std::string& dir);

// A snapshot request's fields. `snapshot_dir` is canonical_snapshot_dir's
// result, empty when none was given (then: snapshot_dir_unset). Refusals are
// bad_request, naming the field.
[[nodiscard]] Result<SnapshotRequest> parse_snapshot_request(const nlohmann::json& request,
                                                             const std::string& snapshot_dir);

}  // namespace sbx
