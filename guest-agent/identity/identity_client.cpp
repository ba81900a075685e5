#include "guest-agent/identity/identity_client.hpp"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "guest-agent/identity/identity_fields.hpp"

namespace sbx::agent {
namespace {

Result<std::optional<std::string>> optional_string(const Json& reply, std::string_view key) {
    auto it = reply.find(key);
    if (it == reply.end() || it->is_null()) {
        return std::optional<std::string>();
    }
    if (!it->is_string()) {
        return make_error("identity reply: \"{}\" is not a string", key);
    }
    return std::optional<std::string>(it->get<std::string>());
}

bool optional_bool(const Json& reply, std::string_view key) {
    auto it = reply.find(key);
    return it != reply.end() && it->is_boolean() && it->get<bool>();
}

}  // namespace

Result<IdentityReply> parse_identity_reply(const Json& reply) {
    if (reply.value("type", "") != "result") {
        return make_error("identity reply of type \"{}\"", reply.value("type", ""));
    }
    IdentityReply out;
    auto generation = reply.find("generation");
    if (generation == reply.end() || !generation->is_number_unsigned()) {
        return make_error("identity reply: \"generation\" missing or not an unsigned integer");
    }
    out.generation = generation->get<std::uint64_t>();
    if (auto cid = reply.find("cid"); cid != reply.end() && !cid->is_null()) {
        if (!cid->is_number_unsigned() || cid->get<std::uint64_t>() > UINT32_MAX) {
            return make_error("identity reply: \"cid\" is not a 32-bit unsigned integer");
        }
        out.cid = cid->get<std::uint32_t>();
    }
    auto mac = optional_string(reply, "mac");
    auto interface = optional_string(reply, "interface");
    auto boot_id = optional_string(reply, "boot_id");
    for (const auto* r : {&mac, &interface, &boot_id}) {
        if (!*r) {
            return r->error();
        }
    }
    out.mac = *mac;
    out.interface = *interface;
    out.boot_id = boot_id->value_or("");
    out.reseeded = optional_bool(reply, "reseeded");
    out.link_restarted = optional_bool(reply, "link_restarted");
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
            return mac.error();
        }
        fields["mac"] = mac->to_string();
    }
    if (request.token) {
        auto token = check_token(*request.token);
        if (!token) {
            return token.error();
        }
        fields["token"] = std::move(*token);
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
