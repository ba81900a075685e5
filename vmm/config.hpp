// What a VM is made of, from a TOML file and/or command-line flags, and the
// checks that turn bad input into one clear message before anything starts.
#pragma once

#include <cstdint>
#include <string>

#include "base/result.hpp"

namespace sbx {

struct ConsoleConfig {
    enum class Kind { Stdout, File, Socket, None };
    Kind kind = Kind::Stdout;
    std::string path;  // File: output file; Socket: a listening Unix socket to connect to

    // "stdout", "none", "file:PATH" or "socket:PATH".
    static Result<ConsoleConfig> parse(std::string_view spec);
};

struct VmConfig {
    static constexpr std::uint64_t kDefaultMemoryMib = 256;
    static constexpr const char* kDefaultCmdline =
        "console=ttyS0 reboot=k panic=1 pci=off nomodule i8042.noaux i8042.nomux i8042.nopnp "
        "i8042.dumbkbd quiet";

    std::string kernel;
    std::string initrd;
    std::string cmdline = kDefaultCmdline;
    unsigned cpus = 1;
    std::uint64_t memory_mib = kDefaultMemoryMib;
    ConsoleConfig console;
    std::string kvm_device = "/dev/kvm";

    // Overlays the keys present in a TOML document ([machine] cpus,
    // memory_mib; [boot] kernel, initrd, cmdline; [console] output).
    [[nodiscard]] Result<void> merge_toml(std::string_view toml_text, std::string_view source_name);
    // Range checks that need no file access.
    [[nodiscard]] Result<void> validate() const;
};

}  // namespace sbx
