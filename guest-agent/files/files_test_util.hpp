// For the files tests: deterministic content of any size generated on the
// fly, a streaming hash to compare it without holding it, small local
// file helpers, and a tiny tmpfs for full-disk cases.
#pragma once

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "guest-agent/agent/agent_test_util.hpp"
#include "guest-agent/files/files_client.hpp"

namespace sbx::agent::testing {

namespace fs = std::filesystem;

// Byte i of the pattern depends only on i and the seed, so any chunking
// produces the same stream.
inline std::uint64_t pattern_word(std::uint64_t index, std::uint64_t seed) {
    std::uint64_t z = index * 0x9e3779b97f4a7c15ULL + seed;  // splitmix64
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
inline void fill_pattern(std::span<std::uint8_t> out, std::uint64_t position, std::uint64_t seed) {
    std::size_t i = 0;
    while (i < out.size()) {
        const std::uint64_t p = position + i;
        const std::uint64_t word = pattern_word(p / 8, seed);
        for (std::uint64_t b = p % 8; b < 8 && i < out.size(); ++b, ++i) {
            out[i] = static_cast<std::uint8_t>(word >> (8 * b));
        }
    }
}

// Order-sensitive 64-bit hash fed in pieces of any size.
class StreamHash {
public:
    void update(std::span<const std::uint8_t> bytes) {
        for (std::uint8_t b : bytes) {
            state_ = (state_ ^ b) * 0x100000001b3ULL;
            state_ ^= state_ >> 29;
        }
        length_ += bytes.size();
    }
    [[nodiscard]] std::uint64_t value() const { return state_ ^ length_; }
    [[nodiscard]] std::uint64_t length() const { return length_; }

private:
    std::uint64_t state_ = 0xcbf29ce484222325ULL;
    std::uint64_t length_ = 0;
};

inline std::uint64_t pattern_hash(std::uint64_t size, std::uint64_t seed) {
    StreamHash h;
    std::vector<std::uint8_t> buffer(1 << 20);
    for (std::uint64_t done = 0; done < size;) {
        auto n = static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), size - done));
        fill_pattern(std::span(buffer).first(n), done, seed);
        h.update(std::span(buffer).first(n));
        done += n;
    }
    return h.value();
}

inline std::uint64_t file_hash(const fs::path& path) {
    StreamHash h;
    std::vector<std::uint8_t> buffer(1 << 20);
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    REQUIRE(fd);
    while (true) {
        ssize_t n = ::read(fd.get(), buffer.data(), buffer.size());
        REQUIRE(n >= 0);
        if (n == 0) {
            break;
        }
        h.update(std::span(buffer).first(static_cast<std::size_t>(n)));
    }
    return h.value();
}

// A source producing `size` pattern bytes.
inline files::ChunkSource pattern_source(std::uint64_t size, std::uint64_t seed) {
    return
        [size, seed, done = std::uint64_t{0}](std::span<std::uint8_t> buffer) mutable -> Result<std::size_t> {
            auto n = static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), size - done));
            fill_pattern(buffer.first(n), done, seed);
            done += n;
            return n;
        };
}

inline void write_pattern_file(const fs::path& path, std::uint64_t size, std::uint64_t seed) {
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    REQUIRE(fd);
    auto source = pattern_source(size, seed);
    std::vector<std::uint8_t> buffer(1 << 20);
    while (true) {
        auto n = source(buffer);
        REQUIRE(n);
        if (*n == 0) {
            break;
        }
        REQUIRE(write_all(fd.get(), buffer.data(), *n));
    }
}

inline std::string slurp(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

inline void spit(const fs::path& path, std::string_view text) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
}

// Files in `dir` whose names contain ".sbx-": file_write's temporaries.
inline std::vector<std::string> temp_files(const fs::path& dir) {
    std::vector<std::string> found;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
        if (e.path().filename().string().find(".sbx-") != std::string::npos) {
            found.push_back(e.path().filename().string());
        }
    }
    return found;
}

// Peak resident set size of this process so far, in bytes.
inline std::uint64_t peak_rss() {
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    return static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;
}

// A tmpfs of `size` mounted on a fresh directory, for full-disk cases; the
// tests run as root. mounted() is false where mounting is not allowed.
struct TinyTmpfs {
    TempDir dir;
    bool ok = false;
    explicit TinyTmpfs(const char* size = "size=1m") {
        ok = ::mount("tmpfs", dir.path.c_str(), "tmpfs", 0, size) == 0;
    }
    ~TinyTmpfs() {
        if (ok) {
            ::umount2(dir.path.c_str(), MNT_DETACH);
        }
    }
    [[nodiscard]] bool mounted() const { return ok; }
};

inline double mib_per_s(std::uint64_t bytes, std::chrono::steady_clock::duration elapsed) {
    return static_cast<double>(bytes) / (1 << 20) / std::chrono::duration<double>(elapsed).count();
}

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

}  // namespace sbx::agent::testing
