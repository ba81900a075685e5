// The API's JSON shapes of stored records (docs/api.md). Times are
// RFC 3339 UTC with milliseconds; env values never leave sbxd (only their
// names), since they may hold secrets.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "host-tools/sbxd/store/records.hpp"

namespace sbx::sbxd {

[[nodiscard]] std::string rfc3339(UnixMillis at);
[[nodiscard]] nlohmann::json sandbox_json(const SandboxRecord& sandbox, const std::string& host);
[[nodiscard]] nlohmann::json snapshot_json(const SnapshotRecord& snapshot);
[[nodiscard]] nlohmann::json exec_json(const ExecRecord& exec);
[[nodiscard]] nlohmann::json event_json(const EventRecord& event);

}  // namespace sbx::sbxd
