// What a VM is made of, from a TOML file and/or command-line flags, and the
// checks that turn bad input into one clear message before anything starts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/result.hpp"

namespace sbx {

struct ConsoleConfig {
    enum class Kind { Stdout, File, Socket, None };
    Kind kind = Kind::Stdout;
    std::string path;  // File: output file; Socket: a listening Unix socket to connect to
    bool append = false;  // File: keep what the file holds (a restarted VM's output follows)
    // File: 0, no bound; else the file never holds more than this many
    // bytes (at least kMinMaxBytes): past it the oldest half is dropped, so
    // a guest that writes to its serial port forever fills no disk.
    std::uint64_t max_bytes = 0;
    static constexpr std::uint64_t kMinMaxBytes = 4096;

    // "stdout", "none", "file:PATH" (truncated), "append:PATH" or "socket:PATH".
    static Result<ConsoleConfig> parse(std::string_view spec);
};

// A virtio-blk disk: "PATH[,ro][,backing=on]" on the command line, [[disk]]
// in TOML. backing=on lets a qcow2 image open the backing file it names
// (off by default: the name is any host path; qcow2::BackingFiles).
struct DiskConfig {
    std::string path;
    bool read_only = false;
    bool allow_backing = false;
    static Result<DiskConfig> parse(std::string_view spec);
};

// A virtio-net device on a tap: "tap=NAME[,mac=MAC]", [net] in TOML.
struct NetConfig {
    std::string tap;
    std::string mac;  // empty: a random locally administered address
    static Result<NetConfig> parse(std::string_view spec);
};

// A virtio-vsock device with its host side on a Unix socket (Firecracker's
// hybrid convention): "cid=N,uds=PATH", [vsock] in TOML.
struct VsockConfig {
    std::uint64_t cid = 0;
    std::string uds;
    static Result<VsockConfig> parse(std::string_view spec);
};

struct VmConfig {
    static constexpr std::uint64_t kDefaultMemoryMib = 256;
    static constexpr const char* kDefaultCmdline =
        "console=ttyS0 reboot=k panic=1 nomodule i8042.noaux i8042.nomux i8042.nopnp "
        "i8042.dumbkbd quiet";

    std::string kernel;
    std::string initrd;
    std::string cmdline = kDefaultCmdline;
    unsigned cpus = 1;
    std::uint64_t memory_mib = kDefaultMemoryMib;
    ConsoleConfig console;
    std::string kvm_device = "/dev/kvm";
    std::vector<DiskConfig> disks;  // the first is /dev/vda
    std::optional<NetConfig> net;
    std::optional<VsockConfig> vsock;
    bool rng = false;

    // Overlays the keys present in a TOML document ([machine] cpus,
    // memory_mib; [boot] kernel, initrd, cmdline; [console] output;
    // [[disk]] path, read_only; [net] tap, mac; [vsock] cid, uds;
    // [rng] enabled). Disks in the document are added to those present.
    [[nodiscard]] Result<void> merge_toml(std::string_view toml_text, std::string_view source_name);
    // Range checks that need no file access.
    [[nodiscard]] Result<void> validate() const;
};

}  // namespace sbx
