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
// `pool`: the host's address pool, which gives a sandbox's slot its
// addresses (none: sbxd runs without a network).
[[nodiscard]] nlohmann::json sandbox_json(const SandboxRecord& sandbox, const std::string& host,
                                          const net::AddressPool* pool);
[[nodiscard]] nlohmann::json snapshot_json(const SnapshotRecord& snapshot);
[[nodiscard]] nlohmann::json exec_json(const ExecRecord& exec);
[[nodiscard]] nlohmann::json event_json(const EventRecord& event);

}  // namespace sbx::sbxd
