#include "host-tools/sbxd/daemon/views.hpp"

#include <algorithm>
#include <cctype>
#include <ctime>

#include <fmt/format.h>

#include "guest-agent/identity/hostname_fields.hpp"
#include "host-tools/sbxd/net/egress_spec.hpp"

namespace sbx::sbxd {

namespace {

nlohmann::json optional_time(const std::optional<UnixMillis>& at) {
    return at ? nlohmann::json(rfc3339(*at)) : nlohmann::json(nullptr);
}

nlohmann::json parsed_or_text(const std::string& text) {
    auto json = nlohmann::json::parse(text, nullptr, false);
    return json.is_discarded() ? nlohmann::json(text) : json;
}

}  // namespace

std::string rfc3339(UnixMillis at) {
    std::time_t seconds = static_cast<std::time_t>(at / 1000);
    auto millis = at % 1000;
    if (millis < 0) {
        millis += 1000;
        --seconds;
    }
    std::tm tm{};
    ::gmtime_r(&seconds, &tm);
    return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                       tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, millis);
}

std::string sandbox_subdomain(const std::string& id) {
    std::string label = id;
    std::replace(label.begin(), label.end(), '_', '-');
    return label;
}

std::string sandbox_hostname(const SandboxRecord& sandbox) {
    // Names compare without case (RFC 4343); one spelling in the guest.
    std::string name = sandbox.name;
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (!name.empty() && agent::check_hostname(name)) {
        return name;
    }
    return sandbox_subdomain(sandbox.id);
}

// The policy's mode and its networks; a stored text that does not parse
// shows as the deny-all the network gives it (vmm_network.cpp).
std::pair<std::string, nlohmann::json> egress_json(const std::string& text) {
    auto egress = net::parse_egress(text);
    const net::Egress shown = egress ? *egress : net::Egress::deny_all();
    nlohmann::json allow = nlohmann::json::array();
    for (const auto& cidr : shown.allow) {
        allow.push_back(cidr.to_string());
    }
    return {std::string(net::egress_mode_name(shown.mode)), std::move(allow)};
}

nlohmann::json network_json(const SandboxNetwork& n, const std::string& egress, const net::AddressPool* pool) {
    nlohmann::json out = {{"interface", net::interface_name(n.slot)}, {"mac", n.mac}, {"egress", egress}};
    if (pool != nullptr) {
        if (auto address = net::address_of(*pool, n.slot)) {
            out["address"] = address->guest_cidr();
            out["gateway"] = net::format_ipv4(address->gateway);
        }
    }
    return out;
}

nlohmann::json sandbox_json(const SandboxRecord& s, const std::string& host, const net::AddressPool* pool) {
    nlohmann::json env_names = nlohmann::json::array();
    for (const auto& [name, value] : s.env) {
        env_names.push_back(name);
    }
    auto [egress, egress_allow] = egress_json(s.egress);
    return {
        {"id", s.id},
        {"name", s.name},
        {"hostname", sandbox_hostname(s)},
        {"state", to_string(s.state)},
        {"host", host},
        {"from", s.from},
        {"size", s.size},
        {"cpus", s.cpus},
        {"memoryMib", s.memory_mib},
        {"diskGib", s.disk_gib},
        {"labels", s.labels},
        {"envNames", env_names},
        {"noEnv", s.no_env},
        {"createdAt", rfc3339(s.created_at)},
        {"startedAt", optional_time(s.started_at)},
        {"lastActivityAt", rfc3339(s.last_activity_at)},
        {"autoStopAt", optional_time(s.auto_stop_at)},
        {"ttlSeconds", s.ttl_seconds ? nlohmann::json(*s.ttl_seconds) : nlohmann::json(nullptr)},
        {"idleMinutes", s.idle_minutes ? nlohmann::json(*s.idle_minutes) : nlohmann::json(nullptr)},
        {"egress", egress},
        {"egressAllow", egress_allow},
        {"network", s.network ? network_json(*s.network, egress, pool) : nlohmann::json(nullptr)},
    };
}

nlohmann::json snapshot_json(const SnapshotRecord& s) {
    return {{"name", s.name},
            {"from", s.source_sandbox_id},
            {"image", s.from},
            {"createdAt", rfc3339(s.created_at)},
            {"memory", s.has_memory},
            {"cpus", s.cpus},
            {"memoryMib", s.memory_mib},
            {"diskGib", s.disk_gib},
            {"sizeBytes", s.size_bytes},
            {"cpuSignature", s.cpu_signature.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.cpu_signature)}};
}

nlohmann::json api_key_json(const ApiKeyRecord& k) {
    return {{"id", k.id},
            {"name", k.name},
            {"createdAt", rfc3339(k.created_at)},
            {"sandboxId", k.sandbox_id ? nlohmann::json(*k.sandbox_id) : nullptr},
            {"readOnly", k.read_only},
            {"expiresAt", k.expires_at ? nlohmann::json(rfc3339(*k.expires_at)) : nullptr}};
}

nlohmann::json exec_json(const ExecRecord& e) {
    return {{"id", e.id},
            {"command", parsed_or_text(e.command)},
            {"startedAt", rfc3339(e.started_at)},
            {"exitCode", e.exit_code ? nlohmann::json(*e.exit_code) : nlohmann::json(nullptr)},
            {"keyId", e.key_id ? nlohmann::json(*e.key_id) : nlohmann::json(nullptr)}};
}

nlohmann::json event_json(const EventRecord& e) {
    return {{"id", e.id},
            {"sandboxId", e.sandbox_id ? nlohmann::json(*e.sandbox_id) : nlohmann::json(nullptr)},
            {"type", e.type},
            {"data", parsed_or_text(e.data)},
            {"at", rfc3339(e.at)}};
}

}  // namespace sbx::sbxd
