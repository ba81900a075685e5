// The identity op (docs/agent-protocol.md, "identity"): what a fork does
// instead of a VM generation ID device. The host calls it right after
// restoring a snapshot copy: a fresh seed for the kernel RNG, the fork's
// MAC address and IPv4 network, its host name, a generation number the
// agent reports from then on, and its own per-boot token (a snapshot's
// forks would otherwise share one).
#include <cstring>
#include <fstream>

#include "base/log.hpp"
#include "guest-agent/agent/agent.hpp"
#include "guest-agent/identity/hostname_apply.hpp"
#include "guest-agent/identity/hostname_fields.hpp"
#include "guest-agent/identity/identity_fields.hpp"
#include "guest-agent/identity/identity_state.hpp"
#include "guest-agent/identity/ipv4_apply.hpp"

namespace sbx::agent {
namespace {

struct IdentityFields {
    std::optional<std::uint64_t> generation;
    std::vector<std::uint8_t> seed;  // empty: none
    std::optional<MacAddress> mac;
    std::optional<std::string> token;
    std::optional<Ipv4Config> ipv4;
    std::optional<std::string> hostname;
};

Result<IdentityFields> parse_fields(const Json& request) {
    IdentityFields fields;
    if (auto it = request.find("generation"); it != request.end() && !it->is_null()) {
        if (it->is_number_unsigned()) {
            fields.generation = it->get<std::uint64_t>();
        } else if (it->is_number_integer() && it->get<std::int64_t>() >= 0) {
            fields.generation = static_cast<std::uint64_t>(it->get<std::int64_t>());
        } else {
            return make_error("\"generation\" must be an integer from 0 to 2^64-1");
        }
    }
    if (auto it = request.find("seed"); it != request.end() && !it->is_null()) {
        if (!it->is_string()) {
            return make_error("\"seed\" must be a string of hex digits");
        }
        auto seed = parse_seed_hex(it->get_ref<const std::string&>());
        if (!seed) {
            return seed.error();
        }
        fields.seed = std::move(*seed);
    }
    if (auto it = request.find("mac"); it != request.end() && !it->is_null()) {
        if (!it->is_string()) {
            return make_error("\"mac\" must be a string like \"52:54:00:12:34:56\"");
        }
        auto mac = parse_mac(it->get_ref<const std::string&>());
        if (!mac) {
            return mac.error().context("\"mac\"");
        }
        fields.mac = *mac;
    }
    if (auto it = request.find("token"); it != request.end() && !it->is_null()) {
        if (!it->is_string()) {
            return make_error("\"token\" must be a string of hex digits");
        }
        auto token = check_token(it->get_ref<const std::string&>());
        if (!token) {
            return token.error();
        }
        fields.token = std::move(*token);
    }
    if (auto it = request.find("ipv4"); it != request.end() && !it->is_null()) {
        auto ipv4 = parse_ipv4_config(*it);
        if (!ipv4) {
            return ipv4.error().context("\"ipv4\"");
        }
        fields.ipv4 = std::move(*ipv4);
    }
    if (auto it = request.find("hostname"); it != request.end() && !it->is_null()) {
        if (!it->is_string()) {
            return make_error("\"hostname\" must be a string (a host name, RFC 1123)");
        }
        auto hostname = check_hostname(it->get_ref<const std::string&>());
        if (!hostname) {
            return hostname.error();
        }
        fields.hostname = std::move(*hostname);
    }
    return fields;
}

std::string read_boot_id() {
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::string id;
    std::getline(in, id);
    return id;
}

Json optional_json(const auto& value) {
    return value ? Json(*value) : Json(nullptr);
}

Result<void> seed_rng(IdentityKernel& kernel, std::vector<std::uint8_t>& seed) {
    auto added = kernel.add_entropy(seed);
    ::explicit_bzero(seed.data(), seed.size());
    if (!added) {
        return added;
    }
    return kernel.reseed_crng();
}

Result<void> identity(Session& session, const Json& request) {
    auto fields = parse_fields(request);
    if (!fields) {
        return fields.error();
    }
    IdentityState& state = session.agent().identity();
    IdentityKernel& kernel = state.kernel();
    std::lock_guard lock(state.mutex());

    // Everything is applied (seed, MAC, then IPv4) before the generation and
    // the token are stored, so a failed call can be repeated as a whole
    // (with the old token).
    const bool reseed = !fields->seed.empty();
    if (reseed) {
        if (auto r = seed_rng(kernel, fields->seed); !r) {
            return r;
        }
    }
    auto ifname = kernel.virtio_net_interface();
    if ((fields->mac || fields->ipv4) && !ifname) {
        return session.stream().write_message(error_message(
            code::kNoNetDevice,
            "no virtio-net interface (no /sys/class/net/*/device/driver is virtio_net) to give " +
                (fields->mac ? "the address " + format_mac(*fields->mac)
                             : "the IPv4 address " + format_ipv4_prefix(fields->ipv4->address))));
    }
    bool link_restarted = false;
    if (fields->mac) {
        auto changed = change_hw_address(kernel, *ifname, *fields->mac);
        if (!changed) {
            return changed.error().context(
                fmt::format("setting {} on {}", format_mac(*fields->mac), *ifname));
        }
        link_restarted = *changed;
    }
    // After the MAC: taking the link down for it flushes the interface's routes.
    if (fields->ipv4) {
        auto changes = apply_ipv4(kernel, *ifname, *fields->ipv4);
        if (!changes) {
            return changes.error().context(
                fmt::format("setting {} on {}", format_ipv4_prefix(fields->ipv4->address), *ifname));
        }
        log::info("identity: ipv4 {}", describe_changes(*ifname, *fields->ipv4, *changes));
    }
    // Read back (and checked) before the generation and the token are
    // stored: a call whose result is not what it asked for fails, and can
    // be repeated.
    Json ipv4 = nullptr;
    if (ifname) {
        auto current = read_ipv4(kernel, *ifname);
        if (!current) {
            return current.error().context(fmt::format("reading back the IPv4 settings of {}", *ifname));
        }
        if (fields->ipv4) {
            if (auto r = check_ipv4_state(*fields->ipv4, *current); !r) {
                return session.stream().write_message(
                    error_message(code::kIoError,
                                  fmt::format("{} after setting {}: {}", *ifname,
                                              format_ipv4_prefix(fields->ipv4->address), r.error().message)));
            }
        }
        ipv4 = ipv4_state_json(*current);
    }
    // After the network (a name that resolves locally needs nothing of
    // it), before the generation and the token: a failure here can be
    // repeated whole as well.
    if (fields->hostname) {
        auto changes = apply_hostname(kernel, *fields->hostname);
        if (!changes) {
            return changes.error();
        }
        if (changes->kernel_name_set || changes->hosts_written || changes->hostname_file_written) {
            log::info("identity: host name {} (was {})", *fields->hostname, changes->previous);
        }
    }
    Json hostname = nullptr;
    if (auto current = kernel.hostname()) {
        hostname = *current;
    }
    if (fields->generation) {
        state.set_generation(*fields->generation);
    }
    const bool token_replaced = fields->token.has_value();
    if (token_replaced) {
        // Kept where a restarted agent looks first (AgentOptions::token_file):
        // the kernel command line has the token of the template or parent
        // this guest was restored from, which sbxd no longer accepts.
        if (const std::string& file = session.agent().options().token_file; !file.empty()) {
            if (auto kept = keep_token(file, *fields->token); !kept) {
                log::warn("identity: a restarted agent will not know the new token: {}", kept.error().to_string());
            }
        }
        session.agent().door().replace_token(std::move(*fields->token));
    }

    Json mac = nullptr;
    if (ifname) {
        if (auto current = kernel.hw_address(*ifname)) {
            mac = format_mac(*current);
        }
    }
    return session.stream().write_message(Json{{"type", "result"},
                                               {"generation", state.generation()},
                                               {"cid", optional_json(state.cid(session.stream().fd()))},
                                               {"mac", mac},
                                               {"interface", optional_json(ifname)},
                                               {"boot_id", read_boot_id()},
                                               {"reseeded", reseed},
                                               {"link_restarted", link_restarted},
                                               {"token_replaced", token_replaced},
                                               {"ipv4", std::move(ipv4)},
                                               {"hostname", std::move(hostname)},
                                               {"ipv4_configured", fields->ipv4.has_value()}});
}

}  // namespace

void register_identity_ops(OpTable& ops) {
    ops.emplace("identity", identity);
}

}  // namespace sbx::agent
