// LazyMemory over a real userfaultfd: threads touching guest memory while
// the loader fills it, many restores in a row, and a chunk that fails its
// checksum. Exits 77 (SKIP) where userfaultfd is not available.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>

#include "snapshot/format/layout.hpp"
#include "snapshot/format/test_util.hpp"
#include "snapshot/lazy_memory.hpp"

using namespace sbx;
using namespace sbx::snapshot;
using namespace sbx::snapshot::test;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t kPage = 4096;

// The same test as LazyMemory::start needs: the syscall, else /dev/userfaultfd.
void require_userfaultfd() {
    long fd = ::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        fd = ::open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
    }
    if (fd < 0) {
        std::printf("SKIP: no userfaultfd here (root, vm.unprivileged_userfaultfd=1 or /dev/userfaultfd)\n");
        std::exit(77);
    }
    ::close(static_cast<int>(fd));
}

// A hang is this test's failure mode: report it and end the process rather
// than wait for the meson timeout.
class Watchdog {
public:
    Watchdog(std::chrono::seconds bound, std::string what) : what_(std::move(what)) {
        thread_ = std::thread([this, bound] {
            std::unique_lock lock(mutex_);
            if (!cv_.wait_for(lock, bound, [this] { return done_; })) {
                std::fprintf(stderr, "FAIL: %s: still waiting after %lld s\n", what_.c_str(),
                             static_cast<long long>(bound.count()));
                std::_Exit(1);
            }
        });
    }
    Watchdog(const Watchdog&) = delete;
    Watchdog& operator=(const Watchdog&) = delete;
    ~Watchdog() {
        {
            std::lock_guard lock(mutex_);
            done_ = true;
        }
        cv_.notify_all();
        thread_.join();
    }

private:
    std::string what_;
    std::mutex mutex_;
    std::condition_variable cv_;
    bool done_ = false;
    std::thread thread_;
};

TestMemory source_memory() {
    TestMemory m;
    m.add(0, 2 << 20, Fill::HalfZero, 11);
    m.add(3 << 20, 1 << 20, Fill::Random, 12);
    m.add(6 << 20, (1 << 20) + 12288, Fill::Text, 13);  // ends in a short chunk
    m.add(9 << 20, 512 * 1024, Fill::Zero);
    return m;
}

Result<GuestMemory> fresh_memory_like(const TestMemory& m) {
    std::vector<MemoryRegionSpec> specs;
    for (const auto& v : m.views) {
        specs.push_back({GuestAddress(v.guest_start), v.host.size()});
    }
    return GuestMemory::create(specs);
}

// Every page of `memory`, in a shuffled order per thread, compared with `source`.
std::size_t touch_and_compare(const TestMemory& source, const GuestMemory& memory, unsigned threads,
                              std::uint32_t seed) {
    struct Page {
        const std::uint8_t* want;
        const std::uint8_t* got;
    };
    std::vector<Page> pages;
    for (std::size_t r = 0; r < source.views.size(); ++r) {
        for (std::size_t off = 0; off < source.views[r].host.size(); off += kPage) {
            pages.push_back({source.views[r].host.data() + off, memory.regions()[r].mapping.data() + off});
        }
    }
    std::atomic<std::size_t> mismatches{0};
    std::vector<std::thread> workers;
    for (unsigned t = 0; t < threads; ++t) {
        workers.emplace_back([&, t] {
            std::vector<std::size_t> order(pages.size());
            std::iota(order.begin(), order.end(), 0);
            std::shuffle(order.begin(), order.end(), std::mt19937(seed * 31 + t));
            for (std::size_t i : order) {
                if (std::memcmp(pages[i].want, pages[i].got, kPage) != 0) {
                    ++mismatches;
                }
            }
        });
    }
    for (auto& w : workers) {
        w.join();
    }
    return mismatches;
}

void wait_fully_loaded(const LazyMemory& lazy) {
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (!lazy.stats().fully_loaded && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(1ms);
    }
}

}  // namespace

TEST_CASE("faults from many threads, racing the loader, see every byte; 40 restores in a row") {
    require_userfaultfd();
    ScratchDir dir;
    auto source = source_memory();
    auto contents = make_contents(source, MemoryMode::Compressed, 64 * 1024);
    contents.working_set = {{(3 << 20) + 8192, 64 * 1024}, {0, 4096}};
    const auto path = dir.path("vm.snap");
    auto written = write_snapshot(path, contents);
    REQUIRE_MESSAGE(written, written.error().to_string());
    auto reader = SnapshotReader::open(path);
    REQUIRE_MESSAGE(reader, reader.error().to_string());

    std::uint64_t faults = 0;
    std::uint64_t by_fault = 0;
    for (std::uint32_t round = 0; round < 40; ++round) {
        Watchdog watchdog(60s, fmt::format("lazy restore round {}", round));
        auto memory = fresh_memory_like(source);
        REQUIRE_MESSAGE(memory, memory.error().to_string());
        auto lazy = LazyMemory::start(*reader, *memory);
        REQUIRE_MESSAGE(lazy, lazy.error().to_string());
        std::atomic<int> errors{0};
        (*lazy)->on_error([&](const Error&) { ++errors; });
        CHECK(touch_and_compare(source, *memory, 4, round) == 0);
        wait_fully_loaded(**lazy);
        auto stats = (*lazy)->stats();
        REQUIRE(stats.fully_loaded);
        CHECK(stats.chunks_total == reader->chunk_count());
        CHECK(errors == 0);
        faults += stats.faults;
        by_fault += stats.chunks_by_fault;
        lazy->reset();
    }
    MESSAGE("40 restores: " << faults << " faults served, " << by_fault << " chunks installed by a fault first");
    // The threads start touching before the loader is done: faults happen.
    CHECK(faults > 0);
}

TEST_CASE("a chunk that fails its checksum is one error, and reading it fails instead of waiting") {
    require_userfaultfd();
    ScratchDir dir;
    auto source = source_memory();
    const auto good = dir.path("good.snap");
    const auto bad = dir.path("bad.snap");
    auto written = write_snapshot(good, make_contents(source, MemoryMode::Compressed, 64 * 1024));
    REQUIRE_MESSAGE(written, written.error().to_string());
    // A byte flipped inside the last stored chunk's data: open() still
    // succeeds (chunk checksums are checked when the chunk is read).
    auto bytes = read_bytes(good);
    auto header = layout::decode_header(bytes, bytes.size());
    REQUIRE(header);
    auto trailer = layout::decode_trailer(std::span(bytes).subspan(header->trailer_offset), *header);
    REQUIRE(trailer);
    std::size_t victim = trailer->chunks.size();
    for (std::size_t i = 0; i < trailer->chunks.size(); ++i) {
        if (trailer->chunks[i].kind == layout::ChunkKind::Zstd) {
            victim = i;
        }
    }
    REQUIRE(victim < trailer->chunks.size());
    const auto& c = trailer->chunks[victim];
    bytes.at(c.file_offset + c.stored_bytes / 2) ^= 0x40;
    write_bytes(bad, bytes);
    auto reader = SnapshotReader::open(bad);
    REQUIRE_MESSAGE(reader, reader.error().to_string());
    const ChunkRef chunk = reader->chunk(victim);

    Watchdog watchdog(60s, "a failed chunk");
    auto memory = fresh_memory_like(source);
    REQUIRE_MESSAGE(memory, memory.error().to_string());
    auto slice = memory->slice(GuestAddress(chunk.guest_start), kPage);
    REQUIRE(slice);
    // A system call reading the page from the kernel side, as KVM's
    // get_user_pages does for a vCPU: it waits on the userfaultfd while the
    // chunk is missing, and must then fail rather than wait for ever.
    int pipe_fds[2];
    REQUIRE(::pipe2(pipe_fds, O_CLOEXEC) == 0);
    UniqueFd read_end(pipe_fds[0]);
    UniqueFd write_end(pipe_fds[1]);

    std::mutex mutex;
    std::vector<std::string> errors;
    auto lazy = LazyMemory::start(*reader, *memory);
    REQUIRE_MESSAGE(lazy, lazy.error().to_string());
    (*lazy)->on_error([&](const Error& e) {
        std::lock_guard lock(mutex);
        errors.push_back(e.to_string());
    });
    const ssize_t n = ::write(write_end.get(), slice->data(), kPage);
    const int write_errno = errno;
    CHECK(n == -1);
    CHECK(write_errno == EFAULT);
    // The loader goes on with the other chunks; this one is never installed.
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (std::chrono::steady_clock::now() < deadline) {
        {
            std::lock_guard lock(mutex);
            if (!errors.empty()) {
                break;
            }
        }
        std::this_thread::sleep_for(1ms);
    }
    std::this_thread::sleep_for(200ms);
    {
        std::lock_guard lock(mutex);
        REQUIRE(errors.size() == 1);
        CHECK(errors[0].find("checksum_mismatch") != std::string::npos);
        CHECK(errors[0].find("lazy restore") != std::string::npos);
    }
    CHECK_FALSE((*lazy)->stats().fully_loaded);
    // Another chunk reads back as saved.
    const auto& first = source.views[0];
    auto other = memory->slice(GuestAddress(first.guest_start), kPage);
    REQUIRE(other);
    CHECK(std::memcmp(other->data(), first.host.data(), kPage) == 0);
    // A thread of the VMM's own (a device's) touching the failed chunk: not
    // a SIGSEGV death but the error and status 4 (MappingGuard), shown in a
    // child, which inherits the mapping, its PROT_NONE and the guard.
    int err_pipe[2];
    REQUIRE(::pipe2(err_pipe, O_CLOEXEC) == 0);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        ::dup2(err_pipe[1], STDERR_FILENO);
        volatile std::uint8_t touched = slice->data()[0];
        (void)touched;
        ::_exit(92);
    }
    ::close(err_pipe[1]);
    std::string said;
    char buf[512];
    for (ssize_t got; (got = ::read(err_pipe[0], buf, sizeof buf)) > 0;) {
        said.append(buf, static_cast<std::size_t>(got));
    }
    ::close(err_pipe[0]);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == MappingGuard::kExitStatus);
    CHECK(said.find("checksum_mismatch") != std::string::npos);
}

// The lazy restore reads the snapshot with pread (never a mapping of it)
// and installs zero ranges as the shared zero page, so saving the memory it
// filled faults nothing in and fills no hole of the file (compare
// snapshot/format/private_save_test.cpp, the copy-on-write restore).
TEST_CASE("saving lazily restored memory faults in nothing and fills no hole of the snapshot") {
    require_userfaultfd();
    ScratchDir dir(tmpfs_base());
    constexpr std::size_t kRegion = 64 << 20, kData = 4 << 20;
    TestMemory source;
    source.add(0, kRegion, Fill::Zero);
    std::memset(source.views[0].host.data(), 0x77, kData);
    const auto template_path = dir.path("template.snap");
    REQUIRE(write_snapshot(template_path, make_contents(source, MemoryMode::Raw, kDefaultChunkSize)));
    auto reader = SnapshotReader::open(template_path);
    REQUIRE(reader);
    Watchdog watchdog(60s, "lazy restore, then a save");
    auto memory = fresh_memory_like(source);
    REQUIRE(memory);
    auto lazy = LazyMemory::start(*reader, *memory);
    REQUIRE_MESSAGE(lazy, (lazy ? "" : lazy.error().to_string()));
    wait_fully_loaded(**lazy);
    REQUIRE((*lazy)->stats().fully_loaded);

    const std::uint8_t* host = memory->regions()[0].mapping.data();
    const auto before = count_pages(host, kRegion / kPage);
    const auto template_before = allocated_bytes(template_path);
    const auto rss_before = rss_bytes();
    SnapshotContents contents = make_contents(source, MemoryMode::Raw, kDefaultChunkSize);
    contents.memory = {{0, memory->regions()[0].mapping.bytes(), std::nullopt}};
    const auto saved_path = dir.path("saved.snap");
    auto saved = write_snapshot(saved_path, contents, {.threads = 2});
    REQUIRE_MESSAGE(saved, (saved ? "" : saved.error().to_string()));
    const auto after = count_pages(host, kRegion / kPage);
    MESSAGE("lazy: " << before.present << " pages present before the save, " << after.present << " after; "
                     << "RSS " << (static_cast<long long>(rss_bytes()) - static_cast<long long>(rss_before)) / 1024
                     << " KiB more; template " << (template_before >> 10) << " KiB allocated before, "
                     << (allocated_bytes(template_path) >> 10) << " KiB after");
    CHECK(before.present == kRegion / kPage);  // data copied in, zero ranges the zero page
    CHECK(after.present == before.present);
    CHECK(after.private_copies == before.private_copies);
    CHECK(allocated_bytes(template_path) == template_before);
    CHECK(rss_bytes() < rss_before + (32 << 20));
    CHECK(saved->zero_bytes == kRegion - kData);
    CHECK(allocated_bytes(saved_path) <= kData + (64 << 10));
    lazy->reset();
}
