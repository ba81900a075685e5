// Lazy restore: guest memory that fills itself from a snapshot on demand.
// Every region is registered with userfaultfd (Documentation/admin-guide/
// mm/userfaultfd.rst, MISSING mode), so the VM can run before any memory is
// read. A fault thread installs the whole chunk (64 KiB..1 MiB) around each
// faulting address with UFFDIO_COPY, or UFFDIO_ZEROPAGE for a zero range;
// a loader thread installs the snapshot's working set first and then every
// other chunk, so memory is fully loaded soon after the VM starts.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "base/event_fd.hpp"
#include "base/thread_class.hpp"
#include "base/unique_fd.hpp"
#include "snapshot/format/reader.hpp"
#include "snapshot/mapping_guard.hpp"
#include "vmm/memory/guest_memory.hpp"

namespace sbx::snapshot {

class LazyMemory {
public:
    struct Stats {
        std::uint64_t faults = 0;             // fault messages served
        std::uint64_t chunks_by_fault = 0;    // chunks a fault installed first
        std::uint64_t chunks_total = 0;
        std::optional<std::chrono::microseconds> fully_loaded;  // since start()
    };

    // `memory` must be freshly mapped anonymous memory (nothing touched);
    // its mappings and `reader` must outlive this object (the GuestMemory
    // object itself may move). `hook` runs first on each of the two threads
    // (base/thread_class.hpp).
    static Result<std::unique_ptr<LazyMemory>> start(const SnapshotReader& reader, const GuestMemory& memory,
                                                     const ThreadStartHook& hook = {});
    LazyMemory(const LazyMemory&) = delete;
    LazyMemory& operator=(const LazyMemory&) = delete;
    ~LazyMemory();

    [[nodiscard]] Stats stats() const;
    // Called once, from a loader thread, with the first error met (a chunk
    // that fails its checksum, say): the guest cannot continue after one,
    // so the embedder stops the VM. Called at once if one already happened.
    // The failed chunk's pages are PROT_NONE from then on: a vCPU touching
    // them gets -EFAULT from KVM_RUN, never other bytes, and any other
    // thread touching them ends the process with this error and status 4
    // (MappingGuard).
    void on_error(std::function<void(const Error&)> handler);

private:
    enum ChunkState : std::uint8_t { kMissing, kInstalling, kInstalled, kFailed };
    struct Region {
        std::uint64_t guest_start;
        std::uint8_t* host;
        std::uint64_t size;
    };
    LazyMemory(const SnapshotReader& reader, std::vector<Region> regions, UniqueFd uffd, EventFd stop);

    void serve_faults();
    void load_all();
    // Installs chunk `index` unless another thread has claimed it.
    Result<void> install(std::size_t index, std::vector<std::uint8_t>& buffer);
    Result<void> copy_chunk(std::size_t index, const ChunkRef& chunk, std::uint8_t* host,
                            std::vector<std::uint8_t>& buffer);
    void fail_chunk(std::size_t index, const ChunkRef& chunk, std::uint8_t* host);
    // The host view of [guest, guest + length) inside one region, or null.
    [[nodiscard]] std::uint8_t* host_address(std::uint64_t guest, std::uint64_t length) const;
    [[nodiscard]] std::optional<std::uint64_t> guest_address(std::uint64_t host) const;
    void record_error(const Error& error);

    const SnapshotReader& reader_;
    std::vector<Region> regions_;
    UniqueFd uffd_;
    EventFd stop_;
    std::vector<std::atomic<std::uint8_t>> state_;  // per chunk
    std::atomic<bool> stopping_{false};
    std::atomic<std::uint64_t> faults_{0}, chunks_by_fault_{0}, installed_{0};
    std::atomic<std::int64_t> fully_loaded_us_{-1};
    std::chrono::steady_clock::time_point start_;
    mutable std::mutex error_mutex_;
    std::optional<Error> error_;
    std::function<void(const Error&)> error_handler_;
    std::vector<MappingGuard> guards_;  // one per region: SIGSEGV on a failed chunk
    std::thread fault_thread_;
    std::thread loader_thread_;
};

}  // namespace sbx::snapshot
