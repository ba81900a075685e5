// Reading a JSON request body field by field: each getter names the field
// it checks in its error (code invalid_argument), and finish() refuses the
// fields nobody asked for (docs/api.md, "Unknown fields").
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/result.hpp"
#include "host-tools/sbxd/store/records.hpp"

namespace sbx::sbxd::api {

// Parses a request body: empty (or only whitespace) is {}, anything but a
// JSON object is bad_request.
[[nodiscard]] Result<nlohmann::json> parse_body(std::string_view body);

class Fields {
public:
    explicit Fields(const nlohmann::json& object) : object_(object) {}

    [[nodiscard]] Result<std::optional<std::string>> string(std::string_view name);
    [[nodiscard]] Result<std::optional<bool>> boolean(std::string_view name);
    // A JSON integer (not a float, not a string) within [min, max].
    [[nodiscard]] Result<std::optional<std::int64_t>> integer(std::string_view name, std::int64_t min,
                                                              std::int64_t max);
    // An object whose values are all strings.
    [[nodiscard]] Result<std::optional<StringMap>> string_map(std::string_view name);
    // An array of strings.
    [[nodiscard]] Result<std::optional<std::vector<std::string>>> string_list(std::string_view name);
    // Whether the field is present (null counts as absent for every getter).
    [[nodiscard]] bool has(std::string_view name) const;

    // invalid_argument naming the first field no getter read.
    [[nodiscard]] Result<void> finish() const;

private:
    [[nodiscard]] const nlohmann::json* take(std::string_view name);
    const nlohmann::json& object_;
    std::set<std::string, std::less<>> read_;
};

[[nodiscard]] Error invalid_argument(std::string message);

}  // namespace sbx::sbxd::api
