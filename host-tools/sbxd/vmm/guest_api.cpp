#include "host-tools/sbxd/vmm/guest_api.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "base/log.hpp"
#include "guest-agent/files/files_client.hpp"
#include "guest-agent/forward/forward_client.hpp"
#include "host-tools/sbxd/auth/api_keys.hpp"
#include "host-tools/sbxd/vmm/vmm_driver.hpp"

namespace sbx::sbxd {

std::string guest_env_file(const SandboxRecord& sandbox, const std::string& token,
                           const StringMap& operator_defaults) {
    StringMap vars = sandbox.no_env ? StringMap{} : operator_defaults;
    for (const auto& [key, value] : sandbox.env) {
        vars[key] = value;
    }
    std::string text = "# Written by sbxd at each start of this sandbox.\n";
    text += fmt::format("SANDBOXER_ID={}\nSANDBOXER_SUBDOMAIN={}\nSANDBOXER_API_URL=http://{}:{}\n"
                        "SANDBOXER_TOKEN={}\n",
                        sandbox.id, sandbox_subdomain(sandbox.id), kGuestApiAddress, kGuestApiPort, token);
    for (const auto& [key, value] : vars) {
        text += key + "=" + value + "\n";
    }
    return text;
}

namespace {

// The sandbox's scoped key: made once, kept (0600) in its folder so a
// process that read SANDBOXER_TOKEN before a stop still holds a good key
// after the resume. The store keeps only its hash.
Result<std::string> sandbox_key(Store& store, const SandboxFiles& files, const std::string& id, UnixMillis now) {
    const std::string path = files.dir() + "/guest-api.key";
    {
        std::ifstream in(path);
        std::string secret;
        if (in >> secret && !secret.empty()) {
            return secret;
        }
    }
    auto key = make_api_key("sandbox " + id, id, now);
    if (!key) {
        return key.error();
    }
    if (auto added = store.add_api_key(key->record); !added) {
        return added.error();
    }
    const std::string temp = path + ".tmp";
    {
        std::ofstream out(temp, std::ios::trunc);
        ::chmod(temp.c_str(), 0600);
        out << key->secret << "\n";
        if (!out.flush()) {
            return make_error("writing {}", temp);
        }
    }
    if (::rename(temp.c_str(), path.c_str()) != 0) {
        return sys_error("renaming {}", temp);
    }
    return key->secret;
}

}  // namespace

Result<void> VmmDriver::offer_guest_api(const SandboxRecord& sandbox) {
    const SandboxFiles f = files(sandbox.id);
    auto vmm = f.read_vmm();
    if (!vmm) {
        return vmm.error();
    }
    auto secret = sandbox_key(store_, f, sandbox.id, clock_());
    if (!secret) {
        return secret.error();
    }
    // Where the VMM delivers the guest's connections to host port
    // kGuestApiPort: a second name of sbxd's socket (a hard link, which a
    // jailed VMM, seeing only vmm/, can follow), made again at each start
    // (a restarted sbxd's socket is a new one).
    const std::string link = fmt::format("{}_{}", f.vsock_socket(), kGuestApiPort);
    ::unlink(link.c_str());
    if (::link(config_.guest_api_socket.c_str(), link.c_str()) != 0) {
        return sys_error("linking {} to {}", link, config_.guest_api_socket);
    }
    const agent::AgentEndpoint endpoint{f.vsock_socket(), agent::kAgentPort, vmm->token};
    auto client = agent::AgentClient::connect(endpoint);
    if (!client) {
        return client.error();
    }
    auto written = agent::files::write_file_text(*client, kGuestEnvPath,
                                          guest_env_file(sandbox, *secret, config_.default_env));
    if (!written) {
        return written.error().context(kGuestEnvPath);
    }
    auto listening = agent::listen_in_guest(endpoint, kGuestApiAddress, kGuestApiPort, kGuestApiPort);
    if (!listening) {
        return listening.error().context("the guest's API listener");
    }
    std::lock_guard lock(guest_links_mutex_);
    guest_links_.insert_or_assign(f.dir(), std::move(listening->control));
    return ok();
}

void VmmDriver::end_guest_api(const SandboxFiles& files) {
    std::lock_guard lock(guest_links_mutex_);
    guest_links_.erase(files.dir());
}

}  // namespace sbx::sbxd
