// The host CPU a memory snapshot was saved on (docs/sbxd.md, "CPU
// signatures"). A saved guest has seen the CPUID of its host: on another
// CPU model or with other features its kernel may use an instruction that
// is not there, so a restore is tried only where the signature is the same.
// It is read from /proc/cpuinfo (sbxd includes no KVM header): the vendor,
// family, model and stepping, and a hash of the feature flags (the CPUID
// bits the kernel reports, a superset of what KVM passes to guests).
#pragma once

#include <string>
#include <string_view>

#include "base/result.hpp"

namespace sbx::sbxd {

// "AuthenticAMD/26/2/1/" and 16 hex digits of the SHA-256 of the sorted
// flags of the first processor in `cpuinfo`; not_found without a vendor.
[[nodiscard]] Result<std::string> cpu_signature_of(std::string_view cpuinfo);

// The signature of this host's CPU.
[[nodiscard]] Result<std::string> host_cpu_signature();

// The file beside a memory snapshot that holds its signature.
[[nodiscard]] inline std::string cpu_signature_file(const std::string& memory_snapshot) {
    return memory_snapshot + ".cpu";
}
[[nodiscard]] Result<void> write_cpu_signature(const std::string& memory_snapshot, const std::string& signature);
// Empty when the snapshot has none (saved by an older sbxd).
[[nodiscard]] std::string read_cpu_signature(const std::string& memory_snapshot);

}  // namespace sbx::sbxd
