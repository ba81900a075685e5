#include "host-tools/sbxd/api/sizes.hpp"

#include <unistd.h>

#include <algorithm>

namespace sbx::sbxd::api {

std::optional<SandboxSize> find_size(std::string_view name) {
    for (const auto& size : kSizes) {
        if (size.name == name) {
            return size;
        }
    }
    return std::nullopt;
}

HostLimits detect_host_limits() {
    HostLimits limits;
    long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
    long pages = ::sysconf(_SC_PHYS_PAGES);
    long page_size = ::sysconf(_SC_PAGESIZE);
    limits.host_cpus = static_cast<int>(std::max(1L, cpus));
    if (pages > 0 && page_size > 0) {
        limits.host_memory_mib = static_cast<int>(static_cast<long long>(pages) * page_size / (1024 * 1024));
    }
    limits.max_memory_mib = std::max(limits.min_memory_mib, limits.host_memory_mib - 512);
    limits.memory_budget_mib = limits.max_memory_mib;
    return limits;
}

}  // namespace sbx::sbxd::api
