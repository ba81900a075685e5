// Sandbox sizes (product.md §1) and this host's limits: a size asks for
// vCPUs and memory, scaled down (with a warning) to fit the host, and
// never more vCPUs than the host has CPUs.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sbx::sbxd::api {

struct SandboxSize {
    std::string_view name;
    int cpus;
    int memory_mib;
};

inline constexpr SandboxSize kSizes[] = {
    {"small", 2, 4096},
    {"default", 4, 8192},
    {"large", 8, 16384},
    {"xlarge", 16, 32768},
};

[[nodiscard]] std::optional<SandboxSize> find_size(std::string_view name);

// What this host allows (GET /v1/limits reports it).
struct HostLimits {
    int host_cpus = 1;
    int host_memory_mib = 1024;
    // A sandbox may ask for at most this much of the host's memory.
    int max_memory_mib = 1024;
    int min_memory_mib = 256;
    int max_disk_gib = 2048;
    int default_disk_gib = 8;
    int max_sandboxes = 64;          // running at once (sbxd --max-running)
    int max_starts_per_minute = 60;  // creates, resumes and fork children
    // The sum of memoryMib of running sandboxes may not pass this: the
    // host's memory less the same 512 MiB (sbxd --memory-budget-mib).
    int memory_budget_mib = 1024;
};

// The limits of the machine sbxd runs on: its online CPUs and physical
// memory, with memory per sandbox capped at the host's less 512 MiB.
[[nodiscard]] HostLimits detect_host_limits();

}  // namespace sbx::sbxd::api
