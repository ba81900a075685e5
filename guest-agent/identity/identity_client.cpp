#include "guest-agent/identity/identity_client.hpp"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "guest-agent/identity/hostname_fields.hpp"
#include "guest-agent/identity/identity_fields.hpp"

namespace sbx::agent {
namespace {

// An interface name (IFNAMSIZ - 1 bytes at most).
constexpr std::size_t kMaxInterfaceName = 15;

}  // namespace

Result<IdentityReply> parse_identity_reply(const Json& reply) {
    if (const std::string type = reply_type(reply); type != "result") {
        return make_error("identity reply of type \"{}\"", printable(type, 64));
    }
    IdentityReply out;
    auto generation = reply_u64(reply, "generation");
    auto cid = reply_optional_u64(reply, "cid", UINT32_MAX);
    auto mac = reply_optional_string(reply, "mac");
    auto interface = reply_optional_string(reply, "interface");
    auto boot_id = reply_optional_string(reply, "boot_id");
    auto hostname = reply_optional_string(reply, "hostname");
    auto reseeded = reply_optional_bool(reply, "reseeded");
    auto link_restarted = reply_optional_bool(reply, "link_restarted");
    auto ipv4_configured = reply_optional_bool(reply, "ipv4_configured");
    for (const auto* r : {&reseeded, &link_restarted, &ipv4_configured}) {
        if (!*r) {
            return r->error().context("identity");
        }
    }
    if (!generation || !cid) {
        return (!generation ? generation.error() : cid.error()).context("identity");
    }
    for (const auto* r : {&mac, &interface, &boot_id, &hostname}) {
        if (!*r) {
            return r->error().context("identity");
        }
    }
    if (*mac && !parse_mac(**mac)) {
        return malformed_reply("\"mac\" is not a MAC address").context("identity");
    }
    if (*interface && ((*interface)->empty() || (*interface)->size() > kMaxInterfaceName)) {
        return malformed_reply("\"interface\" is not an interface name").context("identity");
    }
    out.generation = *generation;
    if (*cid) {
        out.cid = static_cast<std::uint32_t>(**cid);
    }
    out.mac = *mac;
    out.interface = *interface;
    out.boot_id = boot_id->value_or("");
    if (*hostname && (*hostname)->size() > kMaxHostnameBytes) {
        return malformed_reply("\"hostname\" is longer than a host name").context("identity");
    }
    out.hostname = *hostname;
    out.reseeded = reseeded->value_or(false);
    out.link_restarted = link_restarted->value_or(false);
    out.ipv4_configured = ipv4_configured->value_or(false);
    if (auto it = reply.find("ipv4"); it != reply.end() && !it->is_null()) {
        auto state = parse_ipv4_state(*it);
        if (!state) {
            return malformed_reply(state.error().message).context("identity");
        }
        out.ipv4 = std::move(*state);
    }
    out.raw = reply;
    return out;
}

Result<IdentityReply> identity(AgentClient& client, const IdentityRequest& request) {
    Json fields = Json::object();
    if (request.generation) {
        fields["generation"] = *request.generation;
    }
    if (!request.seed.empty()) {
        if (request.seed.size() < kMinSeedBytes || request.seed.size() > kMaxSeedBytes) {
            return make_error("the seed must be {} to {} bytes, not {}", kMinSeedBytes, kMaxSeedBytes,
                              request.seed.size());
        }
        fields["seed"] = to_hex(request.seed);
    }
    if (request.mac) {
        auto mac = parse_mac(*request.mac);
        if (!mac) {
            return mac.error().context("\"mac\"");
        }
        fields["mac"] = format_mac(*mac);
    }
    if (request.token) {
        auto token = check_token(*request.token);
        if (!token) {
            return token.error();
        }
        fields["token"] = std::move(*token);
    }
    if (request.ipv4) {
        if (auto r = check_ipv4_config(*request.ipv4); !r) {
            return r.error().context("\"ipv4\"");
        }
        fields["ipv4"] = ipv4_config_json(*request.ipv4);
    }
    if (request.hostname) {
        auto hostname = check_hostname(*request.hostname);
        if (!hostname) {
            return hostname.error();
        }
        fields["hostname"] = std::move(*hostname);
    }
    auto reply = client.call("identity", std::move(fields));
    if (!reply) {
        return reply.error();
    }
    auto parsed = parse_identity_reply(*reply);
    if (parsed) {
        auto replaced = reply->find("token_replaced");
        parsed->token_replaced = replaced != reply->end() && replaced->is_boolean() && replaced->get<bool>();
        if (request.token && !parsed->token_replaced) {
            return make_error("identity: the agent did not confirm the new token (no \"token_replaced\"); "
                              "the old one still works");
        }
        if (request.hostname && parsed->hostname && *parsed->hostname != *request.hostname) {
            return make_error("identity: the guest's host name is \"{}\", not \"{}\"",
                              printable(*parsed->hostname, 64), *request.hostname);
        }
        if (request.ipv4) {
            if (!parsed->ipv4_configured || !parsed->ipv4) {
                return make_error(
                    "identity: the agent did not confirm the IPv4 settings (no \"ipv4_configured\" "
                    "and \"ipv4\")");
            }
            if (auto r = check_ipv4_state(*request.ipv4, *parsed->ipv4); !r) {
                return r.error().context(
                    parsed->token_replaced
                        ? "identity: the guest's IPv4 settings are not those sent (the new "
                          "token is in effect)"
                        : "identity: the guest's IPv4 settings are not those sent");
            }
        }
    }
    return parsed;
}

Result<std::vector<std::uint8_t>> random_seed(std::size_t bytes) {
    std::vector<std::uint8_t> seed(bytes);
    std::size_t got = 0;
    while (got < bytes) {
        ssize_t n = ::getrandom(seed.data() + got, bytes - got, 0);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return sys_error("getrandom");
        }
        got += static_cast<std::size_t>(n);
    }
    return seed;
}

Result<std::string> random_token(std::size_t bytes) {
    auto random = random_seed(bytes);
    if (!random) {
        return random.error();
    }
    std::string token = to_hex(*random);
    ::explicit_bzero(random->data(), random->size());
    return token;
}

}  // namespace sbx::agent
