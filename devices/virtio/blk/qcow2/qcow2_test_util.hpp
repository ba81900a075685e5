// Helpers for the qcow2 tests: a temp directory, patterned files, a byte
// model of the disk, and running qemu-img.
#pragma once

#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "devices/virtio/blk/qcow2/qcow2_create.hpp"
#include "devices/virtio/blk/qcow2/qcow2_image.hpp"

namespace sbx::qcow2::testing {

using Bytes = std::vector<std::uint8_t>;

inline std::uint8_t pattern(std::uint64_t i, std::uint8_t seed) {
    return static_cast<std::uint8_t>(i * 131 + (i >> 9) + seed);
}

inline Bytes patterned(std::uint64_t bytes, std::uint8_t seed) {
    Bytes out(bytes);
    for (std::uint64_t i = 0; i < bytes; ++i) {
        out[i] = pattern(i, seed);
    }
    return out;
}

struct TempDir {
    std::string path;
    TempDir() {
        const char* tmp = std::getenv("TMPDIR");
        path = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/sbx-qcow2-test-XXXXXX";
        REQUIRE(::mkdtemp(path.data()) != nullptr);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    TempDir(TempDir&&) = delete;
    TempDir& operator=(TempDir&&) = delete;
    ~TempDir() { std::filesystem::remove_all(path); }
    [[nodiscard]] std::string file(const std::string& name) const { return path + "/" + name; }
};

inline void write_file(const std::string& path, const Bytes& data) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    REQUIRE(fd >= 0);
    REQUIRE(::pwrite(fd, data.data(), data.size(), 0) == static_cast<ssize_t>(data.size()));
    ::close(fd);
}

inline Bytes read_file_bytes(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    const off_t size = ::lseek(fd, 0, SEEK_END);
    Bytes out(static_cast<std::size_t>(size));
    REQUIRE(::pread(fd, out.data(), out.size(), 0) == size);
    ::close(fd);
    return out;
}

inline std::unique_ptr<Image> open_image(const std::string& path, bool writable = true) {
    auto file = UniqueFd::open(path, writable ? O_RDWR : O_RDONLY);
    REQUIRE(file);
    auto image = Image::open(std::move(*file), path, writable, BackingFiles::Follow);
    if (!image) {
        FAIL(image.error().to_string());
    }
    return std::move(*image);
}

inline Result<std::unique_ptr<Image>> try_open(const std::string& path) {
    auto file = UniqueFd::open(path, O_RDWR);
    REQUIRE(file);
    return Image::open(std::move(*file), path, true, BackingFiles::Follow);
}

inline Bytes read_disk(Image& image, std::uint64_t offset, std::uint64_t len) {
    Bytes out(len);
    auto r = image.read(offset, out);
    if (!r) {
        FAIL(r.error().to_string());
    }
    return out;
}

// The disk as the guest should see it, updated alongside the image.
struct Model {
    Bytes bytes;
    void write(std::uint64_t offset, const Bytes& data) {
        std::copy(data.begin(), data.end(), bytes.begin() + static_cast<std::ptrdiff_t>(offset));
    }
    void zero(std::uint64_t offset, std::uint64_t len) {
        std::fill_n(bytes.begin() + static_cast<std::ptrdiff_t>(offset), len, 0);
    }
};

struct CommandResult {
    int status = -1;
    std::string output;
};

inline CommandResult run_command(const std::string& command) {
    CommandResult result;
    FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
    REQUIRE(pipe != nullptr);
    char buffer[4096];
    std::size_t n = 0;
    while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) {
        result.output.append(buffer, n);
    }
    const int status = ::pclose(pipe);
    result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return result;
}

}  // namespace sbx::qcow2::testing
