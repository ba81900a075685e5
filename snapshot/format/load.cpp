// SnapshotReader::load_memory: the eager restore pipeline. The calling
// thread queues io_uring reads (plain chunks straight into guest memory,
// compressed ones into one of a bounded set of buffers); worker threads
// check each chunk's XXH3 checksum and decompress it into place.
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "snapshot/format/io_queue.hpp"
#include "snapshot/format/reader.hpp"

namespace sbx::snapshot {

namespace {

using layout::ChunkEntry;
using layout::ChunkKind;

constexpr unsigned kIoDepth = 64;
constexpr std::uint64_t kNoSlot = 0xffff;

struct Work {
    std::size_t chunk;
    std::size_t region;
    std::uint64_t slot;  // kNoSlot: the chunk is read straight into guest memory
};

}  // namespace

Result<LoadStats> SnapshotReader::load_memory(std::span<const MemoryRegionView> dest, unsigned threads,
                                              bool dest_is_zeroed) const {
    const auto t0 = std::chrono::steady_clock::now();
    bool match = dest.size() == regions_.size();
    for (std::size_t i = 0; match && i < dest.size(); ++i) {
        match = dest[i].guest_start == regions_[i].guest_start && dest[i].host.size() == regions_[i].length;
    }
    if (!match) {
        return format_error("corrupt", "the destination memory layout does not match the snapshot's {} regions",
                          regions_.size());
    }
    const unsigned workers = threads != 0 ? threads : std::max(1U, std::thread::hardware_concurrency());
    const std::size_t slot_count = std::min<std::size_t>(std::max(8U, workers * 4), kNoSlot - 1);
    std::vector<std::vector<std::uint8_t>> slots(slot_count);
    auto target = [&](std::size_t chunk, std::size_t region) {
        const auto& c = chunks_[chunk];
        return dest[region].host.subspan(c.guest_start - regions_[region].guest_start, c.length);
    };

    std::mutex mutex;
    std::condition_variable work_cv, free_cv;
    std::deque<Work> queue;
    std::vector<std::uint64_t> free_slots;
    for (std::size_t s = 0; s < slot_count; ++s) {
        free_slots.push_back(s);
    }
    bool closed = false;
    bool failed = false;
    Error first_error;

    auto fail = [&](Error e) {
        std::lock_guard lock(mutex);
        if (!failed) {
            failed = true;
            first_error = std::move(e);
        }
    };
    auto worker = [&] {
        for (;;) {
            Work w{};
            {
                std::unique_lock lock(mutex);
                work_cv.wait(lock, [&] { return closed || !queue.empty(); });
                if (queue.empty()) {
                    return;
                }
                w = queue.front();
                queue.pop_front();
            }
            const auto& c = chunks_[w.chunk];
            auto out = target(w.chunk, w.region);
            Result<void> r = ok();
            if (c.kind == ChunkKind::Zero) {
                std::memset(out.data(), 0, out.size());
            } else if (w.slot == kNoSlot) {
                r = decode_chunk(c, out, out);
            } else {
                r = decode_chunk(c, std::span(slots[w.slot]).first(c.stored_bytes), out);
            }
            if (!r) {
                fail(r.error());
            }
            if (w.slot != kNoSlot) {
                std::lock_guard lock(mutex);
                free_slots.push_back(w.slot);
            }
            free_cv.notify_one();
        }
    };
    auto push = [&](Work w) {
        {
            std::lock_guard lock(mutex);
            queue.push_back(w);
        }
        work_cv.notify_one();
    };
    auto on_read = [&](std::uint64_t tag) {
        const std::uint64_t slot = tag & 0xffff;
        const std::uint64_t chunk = tag >> 16;
        std::size_t region = 0;
        const auto& c = chunks_[chunk];
        while (c.guest_start >= regions_[region].guest_start + regions_[region].length) {
            ++region;
        }
        push({chunk, region, slot});
    };

    // Declared after the buffers, so it waits for reads in flight before they go.
    IoQueue io = IoQueue::create(fd_.get(), kIoDepth);
    std::vector<std::jthread> pool;
    struct Closer {
        std::mutex& m;
        bool& closed;
        std::condition_variable& cv;
        Closer(std::mutex& mu, bool& c, std::condition_variable& v) : m(mu), closed(c), cv(v) {}
        Closer(const Closer&) = delete;
        Closer& operator=(const Closer&) = delete;
        Closer(Closer&&) = delete;
        Closer& operator=(Closer&&) = delete;
        ~Closer() {
            {
                std::lock_guard lock(m);
                closed = true;
            }
            cv.notify_all();
        }
    };
    for (unsigned t = 0; t < workers; ++t) {
        pool.emplace_back(worker);
    }
    Closer closer{mutex, closed, work_cv};  // destroyed before the pool joins

    LoadStats stats;
    Result<void> io_result = ok();
    std::size_t region = 0;
    for (std::size_t i = 0; i < chunks_.size() && io_result; ++i) {
        {
            std::lock_guard lock(mutex);
            if (failed) {
                break;
            }
        }
        const auto& c = chunks_[i];
        while (c.guest_start >= regions_[region].guest_start + regions_[region].length) {
            ++region;
        }
        stats.memory_bytes += c.length;
        if (c.kind == ChunkKind::Zero) {
            if (!dest_is_zeroed) {
                push({i, region, kNoSlot});
            }
            continue;
        }
        std::uint64_t slot = kNoSlot;
        if (c.kind == ChunkKind::Zstd) {
            for (;;) {
                std::unique_lock lock(mutex);
                if (!free_slots.empty()) {
                    slot = free_slots.back();
                    free_slots.pop_back();
                    break;
                }
                if (io.pending() == 0) {
                    free_cv.wait(lock, [&] { return !free_slots.empty(); });
                    continue;
                }
                lock.unlock();
                io_result = io.wait(on_read);
                if (!io_result) {
                    break;
                }
            }
            if (!io_result) {
                break;
            }
            slots[slot].resize(info_.chunk_size);
        }
        while (io.full() && io_result) {
            io_result = io.wait(on_read);
        }
        if (!io_result) {
            break;
        }
        std::uint8_t* into = slot == kNoSlot ? target(i, region).data() : slots[slot].data();
        io_result =
            io.read((static_cast<std::uint64_t>(i) << 16) | slot, into, c.stored_bytes, c.file_offset);
        stats.bytes_read += c.stored_bytes;
    }
    if (io_result) {
        io_result = io.drain(on_read);
    }
    {
        std::lock_guard lock(mutex);
        closed = true;
    }
    work_cv.notify_all();
    for (auto& t : pool) {
        t.join();
    }
    if (!io_result) {
        return io_result.error();
    }
    if (failed) {
        return first_error;
    }
    stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return stats;
}

}  // namespace sbx::snapshot
