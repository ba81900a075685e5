// The API's JSON shapes of stored records (docs/api.md). Times are
// RFC 3339 UTC with milliseconds; env values never leave sbxd (only their
// names), since they may hold secrets.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "host-tools/sbxd/net/address_pool.hpp"
#include "host-tools/sbxd/store/records.hpp"

namespace sbx::sbxd {

[[nodiscard]] std::string rfc3339(UnixMillis at);

// The sandbox's label in host names (hosted ports: "<subdomain>-<port>.<domain>"):
// its id with '_' (not allowed in a DNS label, RFC 1035 §2.3.1) as '-'.
[[nodiscard]] std::string sandbox_subdomain(const std::string& id);

// The guest's host name, given by the identity op at every start (a cold
// boot, a restore, a fork child, a create from a warm template or a named
// snapshot): the sandbox's name when it is a host name (RFC 1123 §2.1,
// at most 64 bytes: agent::check_hostname) in lower case, else its
// subdomain (its id, "sbx_<hex>", with '-' for '_'), which always is one.
[[nodiscard]] std::string sandbox_hostname(const SandboxRecord& sandbox);
// `pool`: the host's address pool, which gives a sandbox's slot its
// addresses (none: sbxd runs without a network).
[[nodiscard]] nlohmann::json sandbox_json(const SandboxRecord& sandbox, const std::string& host,
                                          const net::AddressPool* pool);
[[nodiscard]] nlohmann::json snapshot_json(const SnapshotRecord& snapshot);
[[nodiscard]] nlohmann::json exec_json(const ExecRecord& exec);
[[nodiscard]] nlohmann::json event_json(const EventRecord& event);
// An API key as listed: never its secret (only its hash is stored).
[[nodiscard]] nlohmann::json api_key_json(const ApiKeyRecord& key);

}  // namespace sbx::sbxd
