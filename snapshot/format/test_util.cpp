#include "snapshot/format/test_util.hpp"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <stdexcept>

namespace sbx::snapshot::test {

ScratchDir::ScratchDir() : ScratchDir(std::getenv("TMPDIR") != nullptr ? std::getenv("TMPDIR") : "/tmp") {}

ScratchDir::ScratchDir(const std::string& base) {
    std::string templ = base + "/sbx-snapshot-XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) {
        throw std::runtime_error("mkdtemp failed");
    }
    dir_ = templ;
}

ScratchDir::~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
}

std::string tmpfs_base() {
    const auto on_tmpfs = [](const std::string& path) {
        struct statfs fs {};
        return ::statfs(path.c_str(), &fs) == 0 && fs.f_type == TMPFS_MAGIC && ::access(path.c_str(), W_OK) == 0;
    };
    const char* tmp = std::getenv("TMPDIR");
    std::string base = tmp != nullptr ? tmp : "/tmp";
    if (on_tmpfs(base)) {
        return base;
    }
    return on_tmpfs("/dev/shm") ? "/dev/shm" : base;
}

std::vector<std::string> ScratchDir::entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) {
        out.push_back(e.path().filename().string());
    }
    return out;
}

void TestMemory::add(std::uint64_t guest_start, std::size_t size, Fill fill, std::uint32_t seed) {
    auto map = MmapRegion::anonymous(size);
    if (!map) {
        throw std::runtime_error(map.error().to_string());
    }
    std::uint8_t* p = map->data();
    std::mt19937_64 rng(seed);
    switch (fill) {
        case Fill::Zero:
            break;
        case Fill::Random:
            for (std::size_t i = 0; i + 8 <= size; i += 8) {
                std::uint64_t v = rng();
                std::memcpy(p + i, &v, 8);
            }
            break;
        case Fill::HalfZero:  // random pages alternating with zero pages, some zero chunks
            for (std::size_t page = 0; page < size / 4096; ++page) {
                if (page % 2 == 0 && (page / 64) % 3 != 1) {
                    for (std::size_t i = 0; i < 4096; i += 8) {
                        std::uint64_t v = rng();
                        std::memcpy(p + page * 4096 + i, &v, 8);
                    }
                }
            }
            break;
        case Fill::Text:
            for (std::size_t i = 0; i < size; ++i) {
                p[i] = static_cast<std::uint8_t>("sandboxer guest memory "[(i + seed) % 23]);
            }
            break;
    }
    views.push_back({guest_start, map->bytes()});
    maps.push_back(std::move(*map));
}

TestMemory TestMemory::empty_like() const {
    TestMemory out;
    for (const auto& v : views) {
        out.add(v.guest_start, v.host.size(), Fill::Zero);
    }
    return out;
}

bool TestMemory::same_bytes(const TestMemory& other) const {
    if (views.size() != other.views.size()) {
        return false;
    }
    for (std::size_t i = 0; i < views.size(); ++i) {
        if (views[i].guest_start != other.views[i].guest_start ||
            views[i].host.size() != other.views[i].host.size() ||
            std::memcmp(views[i].host.data(), other.views[i].host.data(), views[i].host.size()) != 0) {
            return false;
        }
    }
    return true;
}

SnapshotContents make_contents(const TestMemory& memory, MemoryMode mode, std::uint32_t chunk_size) {
    SnapshotContents c;
    c.info.mode = mode;
    c.info.chunk_size = chunk_size;
    c.info.cpu = {"GenuineIntel", 6, 85, 7, 0x1234abcdULL};
    c.info.created_unix_ms = 1764460800000ULL;
    c.sections.push_back({"vcpu.0", std::vector<std::uint8_t>(300, 0xab)});
    c.sections.push_back({"devices", {1, 2, 3, 4, 5}});
    c.memory = memory.views;
    return c;
}

std::vector<std::uint8_t> read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, std::span<const std::uint8_t> bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::uint64_t file_size(const std::string& path) {
    return std::filesystem::file_size(path);
}

std::uint64_t allocated_bytes(const std::string& path) {
    struct stat st {};
    ::stat(path.c_str(), &st);
    return static_cast<std::uint64_t>(st.st_blocks) * 512;
}

PageCounts count_pages(const std::uint8_t* addr, std::size_t pages) {
    std::vector<std::uint64_t> entries(pages);
    const int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    const auto bytes = static_cast<ssize_t>(pages * sizeof(std::uint64_t));
    const bool read = fd >= 0 && ::pread(fd, entries.data(), static_cast<std::size_t>(bytes),
                                         static_cast<off_t>(reinterpret_cast<std::uintptr_t>(addr) / 4096 * 8)) ==
                                     bytes;
    if (fd >= 0) {
        ::close(fd);
    }
    if (!read) {
        throw std::runtime_error("cannot read /proc/self/pagemap");
    }
    PageCounts counts;
    for (auto e : entries) {
        if (((e >> 63) & 1) != 0) {
            ++counts.present;
            counts.private_copies += ((e >> 61) & 1) == 0 ? 1 : 0;
        }
    }
    return counts;
}

std::uint64_t rss_bytes() {
    std::ifstream statm("/proc/self/statm");
    std::uint64_t size = 0, resident = 0;
    if (!(statm >> size >> resident)) {
        throw std::runtime_error("cannot read /proc/self/statm");
    }
    return resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

std::string open_code(const std::string& path) {
    auto r = SnapshotReader::open(path);
    if (r) {
        return "ok";
    }
    return std::string(error_code(r.error()));
}

}  // namespace sbx::snapshot::test
