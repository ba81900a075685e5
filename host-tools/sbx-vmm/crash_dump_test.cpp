#include "host-tools/sbx-vmm/crash_dump.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "base/unique_fd.hpp"

namespace sbx {
namespace {

struct Folder {
    std::filesystem::path path;
    UniqueFd fd;
    Folder() {
        char name[] = "/tmp/crash-dump-test.XXXXXX";
        REQUIRE(::mkdtemp(name) != nullptr);
        path = name;
        fd = UniqueFd(::open(name, O_DIRECTORY | O_RDONLY | O_CLOEXEC));
        REQUIRE(fd);
    }
    ~Folder() { std::filesystem::remove_all(path); }
};

GuestMemory two_mib() {
    MemoryRegionSpec spec{GuestAddress(0), 2 << 20};
    return GuestMemory::create(std::span(&spec, 1)).value();
}

TEST_CASE("a crash dump is the guest's memory at its addresses, named only when whole") {
    Folder folder;
    auto memory = two_mib();
    REQUIRE(memory.write_obj(GuestAddress(0x3000), std::uint64_t{0x1122334455667788}).has_value());
    REQUIRE(memory.write_obj(GuestAddress(0x1ff000), std::uint32_t{0xabcd}).has_value());

    auto written = write_crash_dump(memory, folder.fd.get(), "sbx-vmm-1.mem");
    REQUIRE(written.has_value());
    CHECK(*written == 2 * 4096);  // the two non-zero pages; zero pages are holes
    CHECK(std::filesystem::file_size(folder.path / "sbx-vmm-1.mem") == memory.end());
    CHECK_FALSE(std::filesystem::exists(folder.path / "sbx-vmm-1.mem.partial"));

    std::ifstream in(folder.path / "sbx-vmm-1.mem", std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    REQUIRE(bytes.size() == memory.end());
    std::uint64_t at_3000 = 0;
    std::memcpy(&at_3000, bytes.data() + 0x3000, sizeof at_3000);
    CHECK(at_3000 == 0x1122334455667788);
    CHECK(bytes[0x1ff000] == static_cast<char>(0xcd));
    CHECK(bytes[0x2000] == 0);
}

TEST_CASE("a crash dump never replaces a file, and a failed one is never named") {
    Folder folder;
    auto memory = two_mib();
    std::ofstream(folder.path / "sbx-vmm-2.mem.partial") << "someone else's";
    auto written = write_crash_dump(memory, folder.fd.get(), "sbx-vmm-2.mem");
    REQUIRE_FALSE(written.has_value());
    CHECK_FALSE(std::filesystem::exists(folder.path / "sbx-vmm-2.mem"));
    CHECK(std::filesystem::file_size(folder.path / "sbx-vmm-2.mem.partial") == 14);
}

TEST_CASE("a crash dump cut short is still named, so nobody waits for it") {
    Folder folder;
    auto memory = two_mib();
    REQUIRE(memory.write_obj(GuestAddress(0x1ff000), std::uint32_t{1}).has_value());
    // A file-size limit below the page at 0x1ff000 (setrlimit(2)): its
    // pwrite fails with EFBIG, as a full disk would fail it.
    rlimit old{};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
    auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit small = old;
    small.rlim_cur = 64 * 1024;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
    auto written = write_crash_dump(memory, folder.fd.get(), "sbx-vmm-3.mem");
    ::setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, old_handler);
    REQUIRE_FALSE(written.has_value());
    CHECK(std::filesystem::exists(folder.path / "sbx-vmm-3.mem"));
    CHECK_FALSE(std::filesystem::exists(folder.path / "sbx-vmm-3.mem.partial"));
}

}  // namespace
}  // namespace sbx
