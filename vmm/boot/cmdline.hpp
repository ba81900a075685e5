// A validating builder for the kernel command line.
//
// The boot protocol passes the command line as a NUL-terminated string at
// hdr.cmd_line_ptr whose length, without the NUL, must not exceed the
// kernel's hdr.cmdline_size (boot.rst, "cmdline_size"). Capacity here counts
// the terminating NUL, so a kernel advertising cmdline_size N takes a
// Cmdline of capacity N + 1.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "base/result.hpp"

namespace sbx::boot {

class Cmdline {
public:
    // capacity: the largest buffer the command line may occupy, NUL included.
    explicit Cmdline(std::size_t capacity) : capacity_(capacity) {}

    // Appends text, separated from existing content by one space. Accepts
    // printable ASCII and spaces only. On error the command line is unchanged.
    [[nodiscard]] Result<void> append(std::string_view text);

    // Appends "key=value". The key must be non-empty printable ASCII without
    // spaces, '=' or '"'. A value containing spaces is double-quoted (the
    // kernel's parse_args() honours quotes); a value containing '"' is refused
    // because the kernel has no escape for it.
    [[nodiscard]] Result<void> insert(std::string_view key, std::string_view value);

    [[nodiscard]] const std::string& str() const { return text_; }
    // Length in bytes, excluding the terminating NUL.
    [[nodiscard]] std::size_t size() const { return text_.size(); }
    [[nodiscard]] std::size_t capacity() const { return capacity_; }
    [[nodiscard]] bool empty() const { return text_.empty(); }

private:
    std::size_t capacity_;
    std::string text_;
};

}  // namespace sbx::boot
