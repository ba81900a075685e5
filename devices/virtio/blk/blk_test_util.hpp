// Helpers for the virtio-blk unit tests: a temp raw image with known
// bytes, and requests laid out as Linux's driver lays them out, offered
// through the mock driver.
#pragma once

#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "devices/virtio/blk/blk.hpp"
#include "devices/virtio/virtio_test_util.hpp"

namespace sbx::virtio::blk_testing {

using namespace sbx::virtio::testing;
using Bytes = std::vector<std::uint8_t>;

inline constexpr std::uint64_t kSector = blk::kSectorSize;

inline std::uint8_t pattern(std::uint64_t i) {
    return static_cast<std::uint8_t>(i * 131 + (i >> 9) + 1);
}

inline std::string temp_dir() {
    const char* dir = std::getenv("TMPDIR");
    return dir != nullptr && *dir != '\0' ? dir : "/tmp";
}

// A raw image filled with pattern(offset), removed at the end of the test.
struct TempImage {
    std::string path;

    explicit TempImage(std::uint64_t bytes) {
        path = temp_dir() + "/sbx-blk-test-XXXXXX";
        int fd = ::mkstemp(path.data());
        REQUIRE(fd >= 0);
        Bytes data(bytes);
        for (std::uint64_t i = 0; i < bytes; ++i) {
            data[i] = pattern(i);
        }
        REQUIRE(::pwrite(fd, data.data(), data.size(), 0) == static_cast<ssize_t>(bytes));
        ::close(fd);
    }
    TempImage(const TempImage&) = delete;
    TempImage& operator=(const TempImage&) = delete;
    TempImage(TempImage&&) = delete;
    TempImage& operator=(TempImage&&) = delete;
    ~TempImage() { ::unlink(path.c_str()); }

    [[nodiscard]] Bytes read(std::uint64_t offset, std::size_t len) const {
        Bytes out(len);
        int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        REQUIRE(fd >= 0);
        REQUIRE(::pread(fd, out.data(), len, static_cast<off_t>(offset)) == static_cast<ssize_t>(len));
        ::close(fd);
        return out;
    }
    // Drops the image from the page cache, so reads of it go to the disk
    // and stay in flight for a while.
    void evict() const {
        int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        REQUIRE(fd >= 0);
        ::fdatasync(fd);
        ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        ::close(fd);
    }
};

inline Bytes expected_bytes(std::uint64_t offset, std::size_t len) {
    Bytes out(len);
    for (std::size_t i = 0; i < len; ++i) {
        out[i] = pattern(offset + i);
    }
    return out;
}

inline std::unique_ptr<Block> open_disk(const std::string& path, bool read_only = false,
                                        std::string name = "vda") {
    // Test images are made by the tests: their backing files are followed.
    auto disk = Block::open(BlockConfig{.path = path, .read_only = read_only, .allow_backing = true},
                            std::move(name));
    REQUIRE_MESSAGE(disk.has_value(), (disk ? "" : disk.error().to_string()));
    return std::move(*disk);
}

inline const Block& disk_of(const TestBed& bed) {
    return dynamic_cast<const Block&>(bed.transport->device());
}

inline Bytes header(std::uint32_t type, std::uint64_t sector) {
    blk::RequestHeader h{type, 0, sector};
    Bytes out(sizeof h);
    std::memcpy(out.data(), &h, sizeof h);
    return out;
}

inline Bytes range(std::uint64_t sector, std::uint32_t num_sectors, std::uint32_t flags = 0) {
    blk::DiscardWriteZeroes r{sector, num_sectors, flags};
    Bytes out(sizeof r);
    std::memcpy(out.data(), &r, sizeof r);
    return out;
}

// A request as Linux lays it out: header, device-readable data buffers,
// device-writable data buffers, and a separate one-byte status buffer.
struct Request {
    OfferedChain chain;
};

inline Request offer(TestBed& bed, std::uint32_t type, std::uint64_t sector, std::vector<Bytes> out = {},
                     std::vector<std::uint32_t> in = {}, bool indirect = false) {
    std::vector<Bytes> readable{header(type, sector)};
    readable.insert(readable.end(), out.begin(), out.end());
    in.push_back(1);
    return Request{bed.drivers[0]->offer(readable, in, indirect)};
}

inline std::uint8_t status_of(const TestBed& bed, const Request& r) {
    return bed.drivers[0]->read(r.chain.writable.back().first, 1)[0];
}

// The device-writable data of a request (all writable buffers but the status).
inline Bytes data_of(const TestBed& bed, const Request& r) {
    Bytes out;
    for (std::size_t i = 0; i + 1 < r.chain.writable.size(); ++i) {
        Bytes part = bed.drivers[0]->read(r.chain.writable[i].first, r.chain.writable[i].second);
        out.insert(out.end(), part.begin(), part.end());
    }
    return out;
}

// Runs the device thread until `n` used elements came back.
inline std::vector<UsedElem> wait_used(TestBed& bed, std::size_t n) {
    std::vector<UsedElem> used;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (true) {
        while (auto u = bed.drivers[0]->take_used()) {
            used.push_back(*u);
        }
        if (used.size() >= n || std::chrono::steady_clock::now() > deadline) {
            break;
        }
        bed.pump(100);
    }
    REQUIRE(used.size() == n);
    return used;
}

// Offers one request, notifies, waits for it; returns its status byte.
inline std::uint8_t run(TestBed& bed, const Request& r, UsedElem* used_out = nullptr) {
    bed.notify(0);
    auto used = wait_used(bed, 1);
    CHECK(used[0].head == r.chain.head);
    if (used_out != nullptr) {
        *used_out = used[0];
    }
    return status_of(bed, r);
}

inline std::uint8_t run(TestBed& bed, std::uint32_t type, std::uint64_t sector, std::vector<Bytes> out = {},
                        std::vector<std::uint32_t> in = {}) {
    Request r = offer(bed, type, sector, std::move(out), std::move(in));
    return run(bed, r);
}

// A read of `len` bytes at `sector` answers OK with the image's bytes.
void check_read_ok(TestBed& bed, const TempImage& image, std::uint64_t sector, std::uint32_t len) {
    Request r = offer(bed, blk::kTypeIn, sector, {}, {len});
    UsedElem used{};
    CHECK(run(bed, r, &used) == blk::kStatusOk);
    CHECK(used.len == len + 1);
    CHECK(data_of(bed, r) == image.read(sector * kSector, len));
}

}  // namespace sbx::virtio::blk_testing
