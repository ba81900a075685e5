// IoQueue against a real file: many transfers in flight at once come back
// with every byte in place, a read past the end is "truncated" (after the
// part before the end was read, as a short transfer continued), and the
// queue can be destroyed with transfers in flight; a write that finds no
// space is told from other failures.
#include "snapshot/format/io_queue.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "base/unique_fd.hpp"

using namespace sbx;
using namespace sbx::snapshot;

namespace {

struct TempFile {
    std::string path;
    UniqueFd fd;
    TempFile() {
        std::string tmpl = "/tmp/sbx-io-queue-XXXXXX";
        int raw = ::mkstemp(tmpl.data());
        REQUIRE(raw >= 0);
        path = tmpl;
        fd = UniqueFd(raw);
    }
    ~TempFile() { ::unlink(path.c_str()); }
    TempFile(const TempFile&) = delete;
    TempFile& operator=(const TempFile&) = delete;
};

constexpr std::size_t kChunk = 64 * 1024;
constexpr unsigned kChunks = 32;

std::vector<std::uint8_t> chunk_bytes(unsigned i) {
    std::vector<std::uint8_t> out(kChunk);
    std::iota(out.begin(), out.end(), static_cast<std::uint8_t>(i * 7));
    return out;
}

// Queues transfer i for i in [0, count) through start(i), waiting for
// room whenever the queue is full, then drains it; the tags reported.
template <typename Start>
std::set<std::uint64_t> run_all(IoQueue& io, unsigned count, Start start) {
    std::set<std::uint64_t> done;
    auto note = [&done](std::uint64_t tag) { done.insert(tag); };
    for (unsigned i = 0; i < count; ++i) {
        while (io.full()) {
            REQUIRE(io.wait(note));
        }
        REQUIRE(start(i));
    }
    REQUIRE(io.drain(note));
    return done;
}

}  // namespace

TEST_CASE("writes and reads with several in flight move every byte") {
    TempFile file;
    IoQueue io = IoQueue::create(file.fd.get(), 4);
    MESSAGE("io_uring: " << io.uses_io_uring());
    std::vector<std::vector<std::uint8_t>> source;
    for (unsigned i = 0; i < kChunks; ++i) {
        source.push_back(chunk_bytes(i));
    }
    auto written = run_all(io, kChunks, [&](unsigned i) {
        return io.write(i, source[i].data(), kChunk, std::uint64_t{i} * kChunk);
    });
    CHECK(written.size() == kChunks);
    CHECK(io.pending() == 0);

    std::vector<std::vector<std::uint8_t>> back(kChunks, std::vector<std::uint8_t>(kChunk));
    auto read = run_all(io, kChunks, [&](unsigned i) {
        return io.read(i, back[i].data(), kChunk, std::uint64_t{i} * kChunk);
    });
    CHECK(read.size() == kChunks);
    CHECK(back == source);
}

TEST_CASE("a read past the end keeps what it read and is refused as truncated") {
    TempFile file;
    const auto data = chunk_bytes(3);
    REQUIRE(::pwrite(file.fd.get(), data.data(), 1000, 0) == 1000);
    IoQueue io = IoQueue::create(file.fd.get(), 2);
    std::vector<std::uint8_t> back(4096, 0xee);
    REQUIRE(io.read(9, back.data(), back.size(), 0));
    std::set<std::uint64_t> done;
    auto drained = io.drain([&](std::uint64_t tag) { done.insert(tag); });
    REQUIRE_FALSE(drained);
    CHECK(drained.error().code == "truncated");
    CHECK(done.empty());
    CHECK(io.pending() == 0);
    CHECK(std::equal(back.begin(), back.begin() + 1000, data.begin()));
}

TEST_CASE("a queue destroyed with transfers in flight outwaits them") {
    TempFile file;
    std::vector<std::vector<std::uint8_t>> source;
    for (unsigned i = 0; i < 8; ++i) {
        source.push_back(chunk_bytes(i));
    }
    {
        IoQueue io = IoQueue::create(file.fd.get(), 8);
        for (unsigned i = 0; i < 8; ++i) {
            REQUIRE(io.write(i, source[i].data(), kChunk, std::uint64_t{i} * kChunk));
        }
    }
    std::vector<std::uint8_t> back(kChunk);
    for (unsigned i = 0; i < 8; ++i) {
        REQUIRE(::pread(file.fd.get(), back.data(), kChunk, static_cast<off_t>(i) * kChunk) == kChunk);
        CHECK(back == source[i]);
    }
}

TEST_CASE("a write that finds no space is no_space, any other failure io") {
    // /dev/full answers every write with ENOSPC (null(4)); a read-only fd
    // answers a write with EBADF.
    const std::vector<std::uint8_t> bytes = chunk_bytes(1);
    const auto write_code = [&bytes](int fd, unsigned depth) {
        auto io = IoQueue::create(fd, depth);
        auto r = io.write(1, bytes.data(), bytes.size(), 0);
        if (r) {
            r = io.drain([](std::uint64_t) {});
        }
        REQUIRE_FALSE(r);
        return r.error().code;
    };
    for (unsigned depth : {1U, 4U}) {
        UniqueFd full(::open("/dev/full", O_WRONLY | O_CLOEXEC));
        REQUIRE(full);
        CHECK(write_code(full.get(), depth) == "no_space");
        TempFile f;
        UniqueFd read_only(::open(f.path.c_str(), O_RDONLY | O_CLOEXEC));
        CHECK(write_code(read_only.get(), depth) == "io");
    }
}
