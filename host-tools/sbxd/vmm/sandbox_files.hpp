// One folder per sandbox under the state directory (docs/sbxd.md,
// "Sandbox folders"): its disk overlay, its memory snapshot while stopped
// with memory, the guest console and the VMM's own log, the VMM's control
// and vsock sockets, and vmm.json: what sbxd must know of its VMM beyond
// the store's row (the agent's token, the vsock CID, and the VMM's pid and
// start time from the moment it is spawned, before the row can say so).
// What the VMM itself creates — its control and vsock sockets, the memory
// it saves — is in the folder's vmm/ (its --snapshot-dir, and with a jail
// the only host folder it sees, owned by its uid); sbxd moves a saved
// memory file up into the folder, whose own files only sbxd writes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "host-tools/sbxd/store/records.hpp"

namespace sbx::sbxd {

// vmm.json.
struct VmmFile {
    std::string token;      // the token the guest's agent takes now
    std::uint32_t cid = 0;  // the vsock CID of the running VMM (0: none)
    VmmProcess process;     // pid 0: no VMM
    bool operator==(const VmmFile&) const = default;
};

class SandboxFiles {
public:
    SandboxFiles(const std::string& state_dir, const std::string& sandbox_id);
    // The same layout in another folder (a warm template).
    [[nodiscard]] static SandboxFiles in_dir(std::string dir);

    [[nodiscard]] const std::string& dir() const { return dir_; }
    [[nodiscard]] std::string disk() const { return dir_ + "/disk.qcow2"; }
    [[nodiscard]] std::string memory() const { return dir_ + "/memory.snap"; }
    [[nodiscard]] std::string console_log() const { return dir_ + "/console.log"; }
    [[nodiscard]] std::string vmm_log() const { return dir_ + "/vmm.log"; }
    [[nodiscard]] std::string vmm_dir() const { return dir_ + "/vmm"; }
    [[nodiscard]] std::string control_socket() const { return vmm_dir() + "/control.sock"; }
    [[nodiscard]] std::string vsock_socket() const { return vmm_dir() + "/vsock.sock"; }
    // Where the VMM writes the memory it saves, before sbxd moves it to memory().
    [[nodiscard]] std::string vmm_memory() const { return vmm_dir() + "/memory.snap"; }
    [[nodiscard]] std::string vmm_file() const { return dir_ + "/vmm.json"; }
    // The frozen layers under disk.qcow2, one path a line, the newest last.
    [[nodiscard]] std::string layers_list() const { return dir_ + "/layers.txt"; }
    // The image a sandbox made from a named snapshot cold-boots (its kernel).
    [[nodiscard]] std::string image_file() const { return dir_ + "/image.txt"; }

    // Makes the folder (0700); an existing one is an error.
    [[nodiscard]] Result<void> create() const;
    // Makes vmm/ when missing (0700), owned by uid and gid `jail_id` when
    // given (a jailed VMM's).
    [[nodiscard]] Result<void> prepare_vmm_dir(std::optional<std::uint32_t> jail_id) const;
    // Removes the folder and everything in it; a missing one is fine.
    [[nodiscard]] Result<void> remove() const;
    [[nodiscard]] bool has_memory() const;

    // vmm.json, written whole to a temporary name, fsynced and renamed (mode 0600).
    [[nodiscard]] Result<void> write_vmm(const VmmFile& vmm) const;
    [[nodiscard]] Result<VmmFile> read_vmm() const;

private:
    SandboxFiles() = default;
    std::string dir_;
};

// A text file's non-empty lines; none when it cannot be read.
[[nodiscard]] std::vector<std::string> read_lines(const std::string& path);
// Written whole to a temporary name and renamed.
[[nodiscard]] Result<void> write_lines(const std::string& path, const std::vector<std::string>& lines);

// The last lines of a log file, for error messages (empty if unreadable).
[[nodiscard]] std::string log_tail(const std::string& path, std::size_t max_bytes = 1200);

}  // namespace sbx::sbxd
