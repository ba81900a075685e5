// Snapshots of whole VMs: save a paused Vm (configuration, machine state,
// guest memory) to one file, and restore a new Vm from it. The file format
// is snapshot/format (docs/snapshot-format.md).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "snapshot/format/reader.hpp"
#include "snapshot/format/writer.hpp"
#include "snapshot/lazy_memory.hpp"
#include "snapshot/mapping_guard.hpp"
#include "snapshot/restore_config.hpp"
#include "vmm/vm_builder.hpp"

namespace sbx::snapshot {

struct SaveOptions {
    MemoryMode mode = MemoryMode::Compressed;
    int zstd_level = 1;
    unsigned threads = 0;  // compression threads; 0: one per host CPU
    // Guest ranges a lazy restore loads first (Vm::stop_dirty_tracking).
    std::vector<MemoryRegionSpec> working_set;
};

// Writes a snapshot of `vm`, which must be paused, built from `config`.
[[nodiscard]] Result<WriteStats> save_vm(const Vm& vm, const VmConfig& config, const std::string& path,
                                         const SaveOptions& options = {});

enum class RestoreMode {
    Eager,    // read and decompress all memory before the first instruction
    Lazy,     // start at once; userfaultfd installs chunks on fault, the rest loads behind
    Private,  // map a raw-mode file copy-on-write: pages load on first touch
};

struct RestoreOptions {
    RestoreMode mode = RestoreMode::Eager;
    Vm::Clock::time_point start = Vm::Clock::now();  // the zero of the VM's set-up time
    unsigned threads = 0;  // decompression threads; 0: one per host CPU
    // Every host resource the VM opens, and the limits on what the file may
    // ask for (restore_config.hpp): the file itself names none.
    RestoreHost host;
    // Runs on each thread a lazy restore starts, and is given to the VM
    // (Vm::set_thread_start_hook).
    ThreadStartHook thread_hook;
};

// A restored VM with what its memory still reads from: destroy (or
// reset) it only after vm->run() has returned.
struct RestoredVm {
    std::unique_ptr<SnapshotReader> reader;
    // Private mode: the file's mappings, guarded until the VM is gone.
    std::vector<MappingGuard> guards;
    std::unique_ptr<Vm> vm;
    std::unique_ptr<LazyMemory> lazy;  // Lazy mode: serves faults while the VM runs
    VmConfig config;  // as restored: the saved machine on the caller's host side
    double memory_seconds = 0;  // Eager: loading all guest memory
};

[[nodiscard]] Result<RestoredVm> restore_vm(const std::string& path, const RestoreOptions& options = {});

}  // namespace sbx::snapshot
