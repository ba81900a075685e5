// libFuzzer target: arbitrary bytes as one line on sbx-vmm's control socket
// (docs/vmm-control.md): parsed as JSON without exceptions, then its "op"
// and, as a snapshot request, every field, against a real snapshot
// directory. Nothing may throw or crash; a refusal carries bad_request;
// an accepted request is inside its bounds and its path inside the
// directory.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "host-tools/sbx-vmm/control_request.hpp"

namespace {

using sbx::SnapshotRequest;

// One real directory (with a subdirectory and a symlink out of it) for
// the whole run, removed at exit; the paths the fuzzer writes point into
// or around it.
const std::string& snapshot_dir() {
    struct Dir {
        Dir() {
            char tmpl[] = "/tmp/sbx-fuzz-control-XXXXXX";
            if (::mkdtemp(tmpl) == nullptr) {
                std::abort();
            }
            const std::string d = tmpl;
            (void)::mkdir((d + "/sub").c_str(), 0700);
            (void)::symlink("/etc", (d + "/out").c_str());
            auto canonical = sbx::canonical_snapshot_dir(d);
            if (!canonical) {
                std::abort();
            }
            path = *canonical;
        }
        ~Dir() {
            (void)::unlink((path + "/out").c_str());
            (void)::rmdir((path + "/sub").c_str());
            (void)::rmdir(path.c_str());
        }
        std::string path;
    };
    static const Dir dir;
    return dir.path;
}

void check(bool ok) {
    if (!ok) {
        __builtin_trap();
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string& dir = snapshot_dir();
    auto request = nlohmann::json::parse(data, data + size, nullptr, false);
    if (request.is_discarded()) {
        return 0;
    }
    auto op = sbx::request_op(request);
    check(op ? true : op.error().code == "bad_request");
    for (const std::string& given : {dir, std::string()}) {
        auto parsed = sbx::parse_snapshot_request(request, given);
        if (!parsed) {
            const auto& code = parsed.error().code;
            check(code == "bad_request" || (given.empty() && code == "snapshot_dir_unset"));
            continue;
        }
        check(!given.empty());
        check(parsed->path.starts_with(dir + "/"));
        check(parsed->path.size() > dir.size() + 1);
        check(parsed->path.find('\0') == std::string::npos);
        check(parsed->threads <= SnapshotRequest::kMaxThreads);
        check(parsed->working_set_ms <= SnapshotRequest::kMaxWorkingSetMs);
        check(parsed->level >= SnapshotRequest::kMinLevel && parsed->level <= SnapshotRequest::kMaxLevel);
    }
    return 0;
}
