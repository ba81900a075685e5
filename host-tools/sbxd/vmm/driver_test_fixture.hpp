// The VMM driver tests' shared parts (vmm_driver_test.cpp,
// vmm_snapshots_test.cpp): a temporary state dir with a store, an
// images/build cache, and a driver configuration with short timeouts.
#pragma once

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "host-tools/sbxd/testing/temp_dir.hpp"
#include "host-tools/sbxd/vmm/vmm_driver.hpp"

namespace sbx::sbxd::testing {

using namespace std::chrono_literals;
namespace fs = std::filesystem;


inline std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

inline void write_file(const std::string& path, const std::string& text, unsigned mode = 0644) {
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path, std::ios::binary) << text;
    ::chmod(path.c_str(), mode);
}

// An images/build cache with one kernel and one root disk (the default image's).
inline void make_images(const std::string& dir) {
    write_file(dir + "/kernel/aaaa/vmlinux", "kernel");
    write_file(dir + "/kernel/aaaa/.complete", "");
    write_file(dir + "/rootfs-full/bbbb/rootfs.ext4", std::string(1 << 20, '\0'));
    write_file(dir + "/rootfs-full/bbbb/.complete", "");
}

inline std::uint64_t be64(const std::string& s, std::size_t at) {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < 8; ++i) {
        v = v << 8 | static_cast<unsigned char>(s[at + i]);
    }
    return v;
}

struct Fixture {
    TempDir dir{"sbxd-driver-test"};
    std::unique_ptr<Store> store;
    std::string images = dir.path() + "/images";
    std::string state = dir.path() + "/state";
    Fixture() {
        make_images(images);
        fs::create_directories(state);
        auto opened = Store::open(state + "/sbxd.db");
        REQUIRE(opened.has_value());
        store = std::move(*opened);
    }
    DriverConfig config(const std::string& vmm) const {
        DriverConfig c{state, vmm, images, api::HostLimits{}};
        c.boot_timeout = 1500ms;
        c.restore_timeout = 1500ms;
        return c;
    }
    CreateSpec spec() const {
        CreateSpec s;
        s.id = new_sandbox_id().value();
        s.shape = api::SandboxShape{"custom", 1, 256, 1, {}};
        return s;
    }
};


}  // namespace sbx::sbxd::testing
