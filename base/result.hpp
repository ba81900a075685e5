// Errors as values: sbx::Result<T> is a small std::expected-like type for
// guest-reachable and I/O paths (C++20 has no std::expected).
#pragma once

#include <cerrno>
#include <string>
#include <utility>
#include <variant>

#include <fmt/core.h>

namespace sbx {

// An error: a human-readable message, where one applies the errno, and
// where a caller may act on it a code: a short stable snake_case word
// ("bad_request", "vm_not_running") that is not repeated in the message.
struct Error {
    std::string message;
    int errno_value = 0;
    std::string code{};  // empty: none

    // The message and the errno's text; not the code.
    [[nodiscard]] std::string to_string() const;

    // Wrap this error with the context of the caller ("loading kernel: ..."),
    // keeping its errno and code.
    [[nodiscard]] Error context(std::string_view what) const;

    // This error with `code` as its code.
    [[nodiscard]] Error with_code(std::string_view new_code) const;
};

[[nodiscard]] Error make_error(std::string message);
// An error for a failed system call with an explicit errno.
[[nodiscard]] Error errno_error(std::string_view what, int err);

template <typename T>
class [[nodiscard]] Result {
public:
    Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT(google-explicit-constructor)
    Result(Error error) : v_(std::in_place_index<1>, std::move(error)) {}  // NOLINT(google-explicit-constructor)

    [[nodiscard]] bool has_value() const { return v_.index() == 0; }
    explicit operator bool() const { return has_value(); }

    T& value() & { return std::get<0>(v_); }
    const T& value() const& { return std::get<0>(v_); }
    T&& value() && { return std::get<0>(std::move(v_)); }
    T& operator*() & { return value(); }
    const T& operator*() const& { return value(); }
    T* operator->() { return &value(); }
    const T* operator->() const { return &value(); }

    [[nodiscard]] const Error& error() const { return std::get<1>(v_); }

private:
    std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
public:
    Result() = default;
    Result(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT(google-explicit-constructor)

    [[nodiscard]] bool has_value() const { return ok_; }
    explicit operator bool() const { return ok_; }
    [[nodiscard]] const Error& error() const { return error_; }

private:
    Error error_;
    bool ok_ = true;
};

// Shorthand for a successful Result<void>.
inline Result<void> ok() { return {}; }

template <typename... Args>
[[nodiscard]] Error make_error(fmt::format_string<Args...> fmt, Args&&... args) {
    return Error{fmt::format(fmt, std::forward<Args>(args)...), 0};
}

// An error with a code: make_coded_error("bad_request", "level is {}..{}", 1, 19).
template <typename... Args>
[[nodiscard]] Error make_coded_error(std::string_view code, fmt::format_string<Args...> fmt, Args&&... args) {
    return Error{fmt::format(fmt, std::forward<Args>(args)...), 0, std::string(code)};
}

// An error for the system call that just failed: errno is read before
// anything else (formatting allocates and may clobber it).
template <typename... Args>
[[nodiscard]] Error sys_error(fmt::format_string<Args...> fmt, Args&&... args) {
    int err = errno;
    return Error{fmt::format(fmt, std::forward<Args>(args)...), err};
}

}  // namespace sbx
