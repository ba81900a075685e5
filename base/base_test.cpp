#include <doctest/doctest.h>

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "base/event_fd.hpp"
#include "base/mmap_region.hpp"
#include "base/result.hpp"
#include "base/unique_fd.hpp"
#include "base/unix_socket.hpp"

using namespace sbx;

TEST_CASE("Result carries a value or an error") {
    Result<int> good = 5;
    REQUIRE(good);
    CHECK(*good == 5);
    Result<int> bad = make_error("bad {}", 7);
    REQUIRE_FALSE(bad);
    CHECK(bad.error().to_string() == "bad 7");
    CHECK(bad.error().context("loading").to_string() == "loading: bad 7");
    Result<void> fail = errno_error("open x", ENOENT);
    CHECK_FALSE(fail);
    CHECK(fail.error().to_string() == "open x: No such file or directory");
}

TEST_CASE("an error's code is kept by context() and stays out of the message") {
    Error plain = make_error("no code");
    CHECK(plain.code.empty());
    Error coded = make_coded_error("vm_not_running", "the VM is {}", "exiting");
    CHECK(coded.code == "vm_not_running");
    CHECK(coded.message == "the VM is exiting");
    CHECK(coded.to_string() == "the VM is exiting");
    Error wrapped = coded.context("pause").context("control");
    CHECK(wrapped.code == "vm_not_running");
    CHECK(wrapped.to_string() == "control: pause: the VM is exiting");
    Error sys = errno_error("open x", ENOENT).with_code("io");
    CHECK(sys.code == "io");
    CHECK(sys.errno_value == ENOENT);
    CHECK(sys.context("snapshot").to_string() == "snapshot: open x: No such file or directory");
    CHECK(sys.context("snapshot").errno_value == ENOENT);
    Result<void> failed = make_coded_error("bad_request", "level is 1..19");
    CHECK(failed.error().code == "bad_request");
}

TEST_CASE("UniqueFd closes on destruction and moves ownership") {
    int raw = -1;
    {
        auto fd = UniqueFd::open("/dev/null", O_RDONLY);
        REQUIRE(fd);
        raw = fd->get();
        UniqueFd moved = std::move(*fd);
        CHECK_FALSE(fd->valid());
        CHECK(moved.get() == raw);
    }
    CHECK(::fcntl(raw, F_GETFD) == -1);
    CHECK(errno == EBADF);
}

TEST_CASE("UniqueFd::open reports the path on failure") {
    auto fd = UniqueFd::open("/nonexistent/x", O_RDONLY);
    REQUIRE_FALSE(fd);
    CHECK(fd.error().to_string().find("/nonexistent/x") != std::string::npos);
    CHECK(fd.error().errno_value == ENOENT);
}

TEST_CASE("read_file enforces the size limit") {
    char path[] = "/tmp/sbx-base-test-XXXXXX";
    int raw = ::mkstemp(path);
    REQUIRE(raw >= 0);
    UniqueFd fd(raw);
    REQUIRE(write_all(fd.get(), "hello", 5));
    auto whole = read_file(path, 5);
    REQUIRE(whole);
    CHECK(*whole == "hello");
    CHECK_FALSE(read_file(path, 4));
    CHECK_FALSE(read_file("/dev", 100));  // not a regular file
    ::unlink(path);
}

TEST_CASE("MmapRegion maps zeroed memory") {
    auto region = MmapRegion::anonymous(1 << 20);
    REQUIRE(region);
    CHECK(region->size() == (1U << 20));
    CHECK(region->data()[12345] == 0);
    region->data()[12345] = 9;
    MmapRegion moved = std::move(*region);
    CHECK(moved.data()[12345] == 9);
    CHECK(region->data() == nullptr);
}

#include <cstdio>
#include <fstream>

TEST_CASE("MmapRegion::guest_ram is 2 MiB aligned, zeroed and asks for huge pages") {
    constexpr std::size_t kSize = 6 << 20;
    auto ram = MmapRegion::guest_ram(kSize);
    REQUIRE(ram);
    CHECK(reinterpret_cast<std::uintptr_t>(ram->data()) % (2 << 20) == 0);
    CHECK(ram->size() == kSize);
    CHECK(std::all_of(ram->data(), ram->data() + kSize, [](std::uint8_t b) { return b == 0; }));
    ram->data()[kSize - 1] = 7;
    // smaps: the mapping is exactly [data, data + size) and, where the
    // kernel has THP, carries the "hg" (MADV_HUGEPAGE) flag.
    std::ifstream smaps("/proc/self/smaps");
    std::string line;
    const auto start = reinterpret_cast<std::uintptr_t>(ram->data());
    bool found = false;
    bool huge = false;
    while (std::getline(smaps, line)) {
        unsigned long lo = 0, hi = 0;
        if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2 && line.find("-") < line.find(' ')) {
            found = lo == start && hi == start + kSize;
            continue;
        }
        if (found && line.starts_with("VmFlags:")) {
            huge = line.find(" hg") != std::string::npos;
            break;
        }
    }
    REQUIRE(found);
    if (access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) == 0) {
        CHECK(huge);
    }
}

TEST_CASE("MmapRegion maps a file read-only and refuses empty, oversized and odd files") {
    char path[] = "/tmp/sbx-map-test-XXXXXX";
    int raw = ::mkstemp(path);
    REQUIRE(raw >= 0);
    UniqueFd fd(raw);
    CHECK(MmapRegion::map_file(path, 100).error().message.find("is empty") != std::string::npos);
    REQUIRE(write_all(fd.get(), "kernel", 6));
    auto mapped = MmapRegion::map_file(path, 6);
    REQUIRE(mapped);
    CHECK(std::string(reinterpret_cast<const char*>(mapped->data()), mapped->size()) == "kernel");
    CHECK_FALSE(MmapRegion::map_file(path, 5));
    CHECK_FALSE(MmapRegion::map_file("/dev", 100));
    CHECK_FALSE(MmapRegion::map_file("/nonexistent", 100));
    ::unlink(path);
}

TEST_CASE("EventFd counts signals") {
    auto ev = EventFd::create();
    REQUIRE(ev);
    CHECK(*ev->consume() == 0);
    REQUIRE(ev->signal(2));
    REQUIRE(ev->signal(3));
    CHECK(*ev->consume() == 5);
}

#include "base/epoll.hpp"

TEST_CASE("Epoll reports a signalled eventfd with its token") {
    auto ep = Epoll::create();
    REQUIRE(ep);
    auto ev = EventFd::create();
    REQUIRE(ev);
    REQUIRE(ep->add(ev->fd(), 0x001 /* EPOLLIN */, 77));
    Epoll::Event out[4];
    CHECK(*ep->wait(out, 0) == 0);
    REQUIRE(ev->signal());
    REQUIRE(*ep->wait(out, 100) == 1);
    CHECK(out[0].token == 77);
    REQUIRE(ep->remove(ev->fd()));
    CHECK(*ep->wait(out, 0) == 0);
}

#include "base/byte_codec.hpp"

TEST_CASE("ByteWriter and ByteReader round-trip little-endian fields") {
    ByteWriter w;
    w.u8(0xab);
    w.u16(0x1234);
    w.u32(0xdeadbeef);
    w.u64(0x0102030405060708ULL);
    w.boolean(true);
    w.string("vda");
    struct Pod {
        std::uint32_t a;
        std::uint16_t b;
    } pod{7, 9};
    w.pod(pod);
    CHECK(w.bytes()[1] == 0x34);  // little-endian
    ByteReader r(w.bytes());
    CHECK(r.u8() == 0xab);
    CHECK(r.u16() == 0x1234);
    CHECK(r.u32() == 0xdeadbeef);
    CHECK(r.u64() == 0x0102030405060708ULL);
    CHECK(r.boolean());
    CHECK(r.string(16) == "vda");
    auto back = r.pod<Pod>();
    CHECK(back.a == 7);
    CHECK(back.b == 9);
    CHECK(r.finish("test"));
}

TEST_CASE("ByteReader refuses truncation, trailing bytes, bad booleans and huge counts") {
    ByteWriter w;
    w.u32(5);
    auto bytes = w.take();
    {
        ByteReader r(bytes);
        CHECK(r.u64() == 0);
        auto result = r.finish("state");
        REQUIRE_FALSE(result);
        CHECK(result.error().message.find("truncated") != std::string::npos);
    }
    {
        ByteReader r(bytes);
        r.u16();
        CHECK_FALSE(r.finish("state"));  // two bytes left over
    }
    {
        std::vector<std::uint8_t> two{2};
        ByteReader r(two);
        r.boolean();
        CHECK_FALSE(r.finish("state"));
    }
    {
        ByteReader r(bytes);  // a count of 5 items of 8 bytes with nothing after
        CHECK(r.count(8, 100) == 0);
        CHECK(r.failed());
    }
    {
        ByteWriter pw;
        pw.blob(std::vector<std::uint8_t>(3, 0));
        auto pb = pw.take();
        ByteReader r(pb);
        r.pod<std::uint64_t>();  // a 3-byte blob is not a u64
        CHECK_FALSE(r.finish("state"));
    }
}

#include <thread>

#include "base/event_loop.hpp"

TEST_CASE("EventLoop runs again after stop (a paused VM's device loop)") {
    auto loop = EventLoop::create();
    REQUIRE(loop);
    auto fd = EventFd::create();
    REQUIRE(fd);
    int calls = 0;
    REQUIRE((*loop)->add(fd->fd(), 1 /* EPOLLIN */, [&](std::uint32_t) {
        [[maybe_unused]] auto r = fd->consume();
        ++calls;
        (*loop)->stop();
    }));
    for (int round = 1; round <= 2; ++round) {
        REQUIRE(fd->signal());
        REQUIRE((*loop)->run());  // the handler's stop() ends this run
        CHECK(calls == round);
    }
    (*loop)->stop();  // a stop before run() ends that run at once
    CHECK((*loop)->run());
}

TEST_CASE("MmapRegion::private_copy reads the file and keeps writes to itself") {
    char path[] = "/tmp/sbx-cow-test-XXXXXX";
    int raw = ::mkstemp(path);
    REQUIRE(raw >= 0);
    UniqueFd file(raw);
    ::unlink(path);
    std::vector<std::uint8_t> page(8192, 0x5a);
    REQUIRE(::pwrite(file.get(), page.data(), page.size(), 0) == 8192);
    auto region = MmapRegion::private_copy(file.get(), 4096, 4096);  // the second page
    REQUIRE(region);
    CHECK(region->data()[0] == 0x5a);
    region->data()[0] = 1;
    std::uint8_t on_disk = 0;
    REQUIRE(::pread(file.get(), &on_disk, 1, 4096) == 1);
    CHECK(on_disk == 0x5a);
}

namespace {

std::vector<std::string> entries(const std::string& dir) {
    std::vector<std::string> out;
    DIR* d = ::opendir(dir.c_str());
    REQUIRE(d != nullptr);
    while (const dirent* e = ::readdir(d)) {
        std::string name = e->d_name;
        if (name != "." && name != "..") {
            out.push_back(name);
        }
    }
    ::closedir(d);
    std::sort(out.begin(), out.end());
    return out;
}

}  // namespace

TEST_CASE("listen_unix gives a shared socket its mode and group before it appears") {
    char templ[] = "/tmp/sbx-base-sock-XXXXXX";
    REQUIRE(::mkdtemp(templ) != nullptr);
    const std::string path = std::string(templ) + "/shared.sock";
    const mode_t old_umask = ::umask(077);  // would leave only the owner's bits
    {
        auto listener = listen_unix(path, Blocking::Yes, 16, SocketAccess{0660, static_cast<int>(::getegid())});
        REQUIRE_MESSAGE(listener, listener.error().to_string());
        struct stat st {};
        REQUIRE(::lstat(path.c_str(), &st) == 0);
        CHECK((st.st_mode & 07777) == 0660);
        CHECK(st.st_gid == ::getegid());
        CHECK(connect_unix(path));
    }
    ::umask(old_umask);
    ::unlink(path.c_str());
    CHECK(entries(templ).empty());
    ::rmdir(templ);
}

TEST_CASE("listen_unix makes a 0600 socket whatever the umask, and leaves nothing else behind") {
    char templ[] = "/tmp/sbx-base-sock-XXXXXX";
    REQUIRE(::mkdtemp(templ) != nullptr);
    // A short path, and one whose directory is so long that the private
    // directory's socket name would not fit sun_path (bound through
    // /proc/self/fd).
    const std::string long_dir = std::string(templ) + "/" + std::string(99 - sizeof templ, 'd');
    REQUIRE(::mkdir(long_dir.c_str(), 0700) == 0);
    const mode_t old_umask = ::umask(0);  // bind alone would make it 0777
    for (const std::string& dir : {std::string(templ), long_dir}) {
        const std::string name = "s.sock";
        const std::string path = dir + "/" + name;
        REQUIRE(path.size() < 108);
        const std::vector<std::string> before = entries(dir);
        {
            auto listener = listen_unix(path);
            REQUIRE_MESSAGE(listener, listener.error().to_string());
            struct stat st {};
            REQUIRE(::lstat(path.c_str(), &st) == 0);
            CHECK(S_ISSOCK(st.st_mode));
            CHECK((st.st_mode & 07777) == 0600);
            auto after = entries(dir);  // the socket and nothing else: no private directory left
            std::erase(after, name);
            CHECK(after == before);
            auto client = connect_unix(path);
            CHECK(client);
            CHECK_FALSE(listen_unix(path));  // a live listener is not replaced
        }
        auto again = listen_unix(path);  // the stale socket is
        CHECK(again);
        ::unlink(path.c_str());
        CHECK(entries(dir) == before);
    }
    ::umask(old_umask);
    ::rmdir(long_dir.c_str());
    CHECK(entries(templ).empty());
    ::rmdir(templ);
}

#include "base/mac_address.hpp"

TEST_CASE("MAC addresses: parse_mac, format_mac, random_local_mac") {
    auto mac = sbx::parse_mac("52:54:00:AB:cd:Ef");
    REQUIRE(mac.has_value());
    CHECK(*mac == sbx::MacAddress{0x52, 0x54, 0x00, 0xab, 0xcd, 0xef});
    CHECK(sbx::format_mac(*mac) == "52:54:00:ab:cd:ef");
    for (const char* bad :
         {"", "52:54:00:12:34", "52:54:00:12:34:56:78", "52-54-00-12-34-56", "52:54:00:12:34:5g",
          "525400123456", " 52:54:00:12:34:56", "52:54:00:12:34:56 ", "5:254:00:12:34:56"}) {
        CAPTURE(bad);
        auto r = sbx::parse_mac(bad);
        REQUIRE_FALSE(r.has_value());
        CHECK(r.error().message.find("52:54:00:12:34:56") != std::string::npos);
    }
    auto multicast = sbx::parse_mac("01:00:5e:00:00:01");
    REQUIRE_FALSE(multicast.has_value());
    CHECK(multicast.error().message.find("multicast") != std::string::npos);
    CHECK_FALSE(sbx::parse_mac("00:00:00:00:00:00").has_value());
    auto random = sbx::random_local_mac();
    REQUIRE(random.has_value());
    CHECK(sbx::parse_mac(sbx::format_mac(*random)).has_value());
}

#include "base/atomic_file.hpp"

TEST_CASE("write_file_atomically replaces a file whole, with its mode, over a stale temporary") {
    char templ[] = "/tmp/sbx-atomic-XXXXXX";
    REQUIRE(::mkdtemp(templ) != nullptr);
    const std::string path = std::string(templ) + "/secret";
    const mode_t old_umask = ::umask(022);
    REQUIRE(sbx::write_file_atomically(path, "first\n", 0600));
    CHECK(*sbx::read_file(path, 1024) == "first\n");
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0600);

    // A temporary left by a crash, readable by all: not reused.
    {
        UniqueFd stale(::open((path + ".tmp").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0666));
        REQUIRE(stale);
        REQUIRE(::fchmod(stale.get(), 0666) == 0);
        REQUIRE(::write(stale.get(), "stale", 5) == 5);
    }
    ::umask(0);
    REQUIRE(sbx::write_file_atomically(path, "second\n", 0640));
    ::umask(old_umask);
    CHECK(*sbx::read_file(path, 1024) == "second\n");
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0640);
    CHECK(::access((path + ".tmp").c_str(), F_OK) != 0);

    auto missing = sbx::write_file_atomically(std::string(templ) + "/no-dir/file", "x", 0600);
    REQUIRE_FALSE(missing);
    CHECK(missing.error().errno_value == ENOENT);
    ::unlink(path.c_str());
    ::rmdir(templ);
}

TEST_CASE("listen_unix binds without /proc wherever a name of 9 bytes or more fits (a jailed VMM)") {
    char templ[] = "/tmp/sbx-base-sock-XXXXXX";
    REQUIRE(::mkdtemp(templ) != nullptr);
    // "<dir>/control.sock" is 107 bytes, the longest sun_path takes.
    const std::string dir = std::string(templ) + "/" + std::string(107 - 13 - sizeof templ, 'd');
    REQUIRE(::mkdir(dir.c_str(), 0700) == 0);
    const std::string path = dir + "/control.sock";
    REQUIRE(path.size() == 107);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        // /proc hidden under an empty tmpfs in a mount namespace of its own
        // (root only: otherwise 77, not checked).
        if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
            ::mount("tmpfs", "/proc", "tmpfs", 0, "size=4k") != 0) {
            ::_exit(77);
        }
        auto listener = listen_unix(path);
        ::_exit(listener && connect_unix(path) ? 0 : 1);
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    REQUIRE(WIFEXITED(status));
    if (WEXITSTATUS(status) == 77) {
        MESSAGE("not checked: cannot hide /proc here (needs root)");
    } else {
        CHECK(WEXITSTATUS(status) == 0);
    }
    ::unlink(path.c_str());
    ::rmdir(dir.c_str());
    ::rmdir(templ);
}
