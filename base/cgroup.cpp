#include "base/cgroup.hpp"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <thread>
#include <utility>

namespace sbx {

namespace {

Result<void> write_file(const std::string& path, const std::string& value) {
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
    if (!fd) {
        return sys_error("opening {}", path);
    }
    if (::write(fd.get(), value.data(), value.size()) != static_cast<ssize_t>(value.size())) {
        return sys_error("writing '{}' to {}", value, path);
    }
    return ok();
}

bool is_empty(const std::string& path) {
    std::ifstream events(path + "/cgroup.events");
    std::string key, value;
    while (events >> key >> value) {
        if (key == "populated") {
            return value == "0";
        }
    }
    return !events.is_open();  // gone already
}

}  // namespace

bool is_cgroup2(const std::string& dir) {
    struct statfs st {};
    return ::statfs(dir.c_str(), &st) == 0 && st.f_type == CGROUP2_SUPER_MAGIC;
}

Result<void> enable_cgroup_controllers(const std::string& dir, const std::vector<std::string>& controllers) {
    for (const auto& c : controllers) {
        if (auto r = write_file(dir + "/cgroup.subtree_control", "+" + c); !r) {
            return r.error().context(fmt::format("enabling the {} controller below {}", c, dir));
        }
    }
    return ok();
}

Result<Cgroup> Cgroup::create(const std::string& path, const CgroupLimits& limits) {
    if (auto gone = remove(path); !gone) {
        return gone.error().context("removing a leftover cgroup");
    }
    if (::mkdir(path.c_str(), 0755) != 0) {
        return sys_error("creating cgroup {}", path);
    }
    UniqueFd dir(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dir) {
        auto e = sys_error("opening cgroup {}", path);
        ::rmdir(path.c_str());
        return e;
    }
    Cgroup cgroup(path, std::move(dir));  // removed again if a limit fails
    constexpr std::uint64_t kPeriod = 100'000;  // µs
    struct Write {
        std::uint64_t set;  // 0: not written
        const char* file;
        std::string value;
        bool only_if_present;  // a weight, not a cap: skipped where the kernel lacks the file
    };
    // io.weight exists only with the io cost model (blk-iocost); without it
    // the kernel shares I/O evenly.
    const Write writes[] = {
        {limits.memory_max, "memory.max", std::to_string(limits.memory_max), false},
        {limits.pids_max, "pids.max", std::to_string(limits.pids_max), false},
        {limits.cpu_quota_us, "cpu.max", fmt::format("{} {}", limits.cpu_quota_us, kPeriod), false},
        {limits.io_weight, "io.weight", fmt::format("default {}", limits.io_weight), true},
    };
    for (const auto& w : writes) {
        const std::string file = path + "/" + w.file;
        if (w.set == 0 || (w.only_if_present && ::access(file.c_str(), F_OK) != 0)) {
            continue;
        }
        if (auto r = write_file(file, w.value); !r) {
            return r.error().context("its controller may not be enabled in the parent");
        }
    }
    return cgroup;
}

Result<void> Cgroup::remove(const std::string& path) {
    if (::access(path.c_str(), F_OK) != 0) {
        return ok();
    }
    if (!is_empty(path)) {
        (void)write_file(path + "/cgroup.kill", "1");
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (!is_empty(path) && std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
    }
    if (::rmdir(path.c_str()) != 0 && errno != ENOENT) {
        return sys_error("removing cgroup {}", path);
    }
    return ok();
}

Cgroup::Cgroup(Cgroup&& other) noexcept : path_(std::exchange(other.path_, {})), dir_(std::move(other.dir_)) {}

Cgroup::~Cgroup() {
    if (!path_.empty()) {
        dir_.reset();
        (void)remove(path_);
    }
}

}  // namespace sbx
