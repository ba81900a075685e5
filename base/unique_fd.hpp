// RAII owner of a file descriptor.
#pragma once

#include <string>
#include <utility>

#include "base/result.hpp"

namespace sbx {

class UniqueFd {
public:
    UniqueFd() = default;
    explicit UniqueFd(int fd) : fd_(fd) {}
    UniqueFd(const UniqueFd&) = delete;
    UniqueFd& operator=(const UniqueFd&) = delete;
    UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
    UniqueFd& operator=(UniqueFd&& other) noexcept {
        if (this != &other) {
            reset(std::exchange(other.fd_, -1));
        }
        return *this;
    }
    ~UniqueFd() { reset(); }

    [[nodiscard]] int get() const { return fd_; }
    [[nodiscard]] bool valid() const { return fd_ >= 0; }
    explicit operator bool() const { return valid(); }
    int release() { return std::exchange(fd_, -1); }
    void reset(int fd = -1);

    // open(2) with O_CLOEXEC added.
    static Result<UniqueFd> open(const std::string& path, int flags, unsigned mode = 0);

private:
    int fd_ = -1;
};

// An open regular file no larger than a limit, with its size.
struct RegularFile {
    UniqueFd fd;
    std::size_t size;
};
Result<RegularFile> open_regular_file(const std::string& path, std::size_t max_bytes);

// Reads the whole file into memory, refusing files over max_bytes.
Result<std::string> read_file(const std::string& path, std::size_t max_bytes);

// Writes all of data to fd, retrying on EINTR and short writes.
Result<void> write_all(int fd, const void* data, std::size_t size);

}  // namespace sbx
