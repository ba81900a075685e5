#include "guest-agent/identity/hostname_apply.hpp"

#include <optional>

#include "base/log.hpp"
#include "guest-agent/identity/hostname_fields.hpp"

namespace sbx::agent {
namespace {

// Puts the files written so far back as they were (best effort: the
// error that made us undo them is the one reported).
void restore(IdentityKernel& kernel, const std::optional<std::string>& hosts,
             const std::optional<std::string>& hostname_file, const HostnameChanges& changes) {
    if (changes.hostname_file_written && hostname_file) {
        if (auto r = kernel.write_etc(EtcFile::Hostname, *hostname_file); !r) {
            log::warn("identity: putting /etc/hostname back: {}", r.error().to_string());
        }
    }
    if (changes.hosts_written && hosts) {
        if (auto r = kernel.write_etc(EtcFile::Hosts, *hosts); !r) {
            log::warn("identity: putting /etc/hosts back: {}", r.error().to_string());
        }
    }
}

}  // namespace

Result<HostnameChanges> apply_hostname(IdentityKernel& kernel, const std::string& name) {
    HostnameChanges changes;
    auto current = kernel.hostname();
    if (!current) {
        return current.error().context("reading the host name");
    }
    changes.previous = *current;
    auto hosts = kernel.read_etc(EtcFile::Hosts);
    if (!hosts) {
        return hosts.error();
    }
    auto hostname_file = kernel.read_etc(EtcFile::Hostname);
    if (!hostname_file) {
        return hostname_file.error();
    }

    const std::string new_hosts = hosts_with_hostname(hosts->value_or(""), name);
    if (*hosts != new_hosts) {
        if (auto r = kernel.write_etc(EtcFile::Hosts, new_hosts); !r) {
            return r.error().context(fmt::format("giving {} the name {}", "/etc/hosts", name));
        }
        changes.hosts_written = true;
    }
    const std::string new_hostname_file = name + "\n";
    if (*hostname_file != new_hostname_file) {
        if (auto r = kernel.write_etc(EtcFile::Hostname, new_hostname_file); !r) {
            restore(kernel, *hosts, *hostname_file, changes);
            return r.error().context(fmt::format("writing {} to /etc/hostname", name));
        }
        changes.hostname_file_written = true;
    }
    if (*current != name) {
        if (auto r = kernel.set_hostname(name); !r) {
            restore(kernel, *hosts, *hostname_file, changes);
            return r.error().context(fmt::format("setting the host name {} (sethostname)", name));
        }
        changes.kernel_name_set = true;
    }
    return changes;
}

}  // namespace sbx::agent
