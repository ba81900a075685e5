#include "base/result.hpp"

#include <cstring>

namespace sbx {

std::string Error::to_string() const {
    if (errno_value == 0) {
        return message;
    }
    return fmt::format("{}: {}", message, std::strerror(errno_value));
}

Error Error::context(std::string_view what) const {
    return Error{fmt::format("{}: {}", what, message), errno_value, code};
}

Error Error::with_code(std::string_view new_code) const { return Error{message, errno_value, std::string(new_code)}; }

Error make_error(std::string message) { return Error{std::move(message), 0}; }

Error errno_error(std::string_view what, int err) { return Error{std::string(what), err}; }

}  // namespace sbx
