// The non-memory sections of a snapshot: the VM's configuration and its
// machine state, encoded with base/byte_codec (each part versions itself).
#pragma once

#include <cstdint>
#include <vector>

#include "base/byte_codec.hpp"
#include "vmm/config.hpp"
#include "vmm/vm.hpp"

namespace sbx::snapshot {

inline constexpr const char* kConfigSection = "config";
inline constexpr const char* kMachineSection = "machine";

// The parts of a VmConfig that describe the guest's machine; host-only
// settings (console, KVM device node) are not saved.
[[nodiscard]] std::vector<std::uint8_t> encode_config(const VmConfig& config);
[[nodiscard]] Result<VmConfig> decode_config(std::span<const std::uint8_t> bytes);

[[nodiscard]] std::vector<std::uint8_t> encode_machine(const MachineState& state);
[[nodiscard]] Result<MachineState> decode_machine(std::span<const std::uint8_t> bytes);

}  // namespace sbx::snapshot
