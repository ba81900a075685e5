// The identity op's "hostname" applied through IdentityKernel
// (docs/agent-protocol.md, "identity"): /etc/hosts, /etc/hostname and the
// kernel's name (sethostname(2)), all three or, as far as it can undo
// what it did, none.
#pragma once

#include <string>

#include "guest-agent/identity/identity_kernel.hpp"

namespace sbx::agent {

struct HostnameChanges {
    bool hosts_written = false;
    bool hostname_file_written = false;
    bool kernel_name_set = false;
    std::string previous;  // the kernel's name before
};

// In this order, each step skipped when it is already so: /etc/hosts
// (hosts_with_hostname: the 127.0.1.1 line names `name`, so the new name
// resolves before any program can see it; sudo looks it up), /etc/hostname
// ("<name>\n", for the next boot and programs that read it), then the
// kernel's name. Each file is replaced atomically (a temporary file,
// fsync, rename). When a step fails, the files written before it get their
// old text back (a file that was missing stays written) and the error
// names the step; the call can be repeated whole. `name` is checked
// (check_hostname) by the caller.
[[nodiscard]] Result<HostnameChanges> apply_hostname(IdentityKernel& kernel, const std::string& name);

}  // namespace sbx::agent
