// The store's schema as numbered migrations: migration N takes a file from
// version N-1 to N. Append new ones; never edit a released one.
#pragma once

#include <span>
#include <string_view>

namespace sbx::sbxd {

[[nodiscard]] std::span<const std::string_view> schema_migrations();

}  // namespace sbx::sbxd
