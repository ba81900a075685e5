#include "snapshot/vm_snapshot.hpp"

#include <chrono>

#include "base/log.hpp"
#include "snapshot/hole_overlay.hpp"
#include "snapshot/machine_codec.hpp"
#include "vmm/boot/layout.hpp"

namespace sbx::snapshot {

namespace {

std::uint64_t unix_ms_now() {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                          std::chrono::system_clock::now().time_since_epoch())
                                          .count());
}

Result<void> check_memory_layout(const SnapshotReader& reader, const VmConfig& config) {
    auto expected = boot::ram_regions(config.memory_mib << 20);
    auto stored = reader.memory_regions();
    bool same = expected.size() == stored.size();
    for (std::size_t i = 0; same && i < stored.size(); ++i) {
        same = stored[i].start == expected[i].start.value && stored[i].length == expected[i].size;
    }
    if (!same) {
        return make_error("config_mismatch: the snapshot's memory layout is not that of {} MiB", config.memory_mib);
    }
    return ok();
}

VmBuilder::RestoredMemory eager_memory(const SnapshotReader& reader, unsigned threads, double& seconds) {
    return {
        [](const MemoryRegionSpec& spec, std::size_t) {
            return GuestMemory::unbacked(MmapRegion::guest_ram(spec.size));
        },
        [&reader, threads, &seconds](const GuestMemory& memory) -> Result<void> {
            std::vector<MemoryRegionView> dest;
            for (const auto& region : memory.regions()) {
                dest.push_back({region.start.value, region.mapping.bytes()});
            }
            auto loaded = reader.load_memory(dest, threads, true);
            if (!loaded) {
                return loaded.error();
            }
            seconds = loaded->seconds;
            return ok();
        },
    };
}

VmBuilder::RestoredMemory private_memory(const SnapshotReader& reader, const std::string& path,
                                         std::vector<MappingGuard>& guards) {
    return {
        [&reader, &path, &guards](const MemoryRegionSpec& spec,
                                  std::size_t index) -> Result<GuestMemory::MappedRegion> {
            auto offset = reader.raw_region_offset(index);
            if (!offset) {
                return offset.error();
            }
            auto mapped = MmapRegion::private_copy(reader.fd(), spec.size, static_cast<off_t>(*offset));
            if (!mapped) {
                return mapped.error();
            }
            // Before anything reads it: the builder restores queues from it.
            auto guard = MappingGuard::install(
                MappingGuard::Fault::Bus, mapped->data(), mapped->size(),
                fmt::format("sbx-vmm: error: exit: vmm-error: the snapshot file {} shrank under the running VM "
                            "(SIGBUS reading guest memory mapped from it)",
                            path));
            if (!guard) {
                return guard.error();
            }
            guards.push_back(std::move(*guard));
            // Without it the restore is only dearer (hole_overlay.hpp): a warning, no failure.
            if (auto overlaid = overlay_holes(mapped->data(), mapped->size(), reader.fd(), *offset); !overlaid) {
                log::warn("snapshot {}: its holes stay mapped from the file: {}", path, overlaid.error().to_string());
            }
            // A save of this VM reads the pages it never wrote from the file (snapshot/format/writer.hpp).
            return GuestMemory::private_file(std::move(mapped), reader.fd(), *offset);
        },
        {},
    };
}

VmBuilder::RestoredMemory lazy_memory(const SnapshotReader& reader, std::unique_ptr<LazyMemory>& lazy,
                                      const ThreadStartHook& hook) {
    return {
        [](const MemoryRegionSpec& spec, std::size_t) {
            return GuestMemory::unbacked(MmapRegion::anonymous(spec.size));
        },
        [&reader, &lazy, &hook](const GuestMemory& memory) -> Result<void> {
            auto started = LazyMemory::start(reader, memory, hook);
            if (!started) {
                return started.error();
            }
            lazy = std::move(*started);
            return ok();
        },
    };
}

}  // namespace

Result<WriteStats> save_vm(const Vm& vm, const VmConfig& config, const std::string& path,
                           const SaveOptions& options) {
    auto machine = vm.save_state();
    if (!machine) {
        return machine.error();
    }
    SnapshotContents contents;
    auto cpu = kvm::summarize_cpuid(machine->vcpus.at(0).cpuid);
    contents.info.cpu = CpuFingerprint{cpu.vendor, cpu.family, cpu.model, cpu.stepping, cpu.feature_hash};
    contents.info.mode = options.mode;
    contents.info.created_unix_ms = unix_ms_now();
    contents.sections.push_back({kConfigSection, encode_config(config)});
    contents.sections.push_back({kMachineSection, encode_machine(*machine)});
    for (const auto& region : vm.memory().regions()) {
        contents.memory.push_back({region.start.value, region.mapping.bytes(), std::nullopt});
        if (region.file.fd) {
            contents.memory.back().file = MappedFile{region.file.fd.get(), region.file.offset};
        }
    }
    for (const auto& range : options.working_set) {
        contents.working_set.push_back({range.start.value, range.size});
    }
    return write_snapshot(path, contents, WriteOptions{options.zstd_level, options.threads});
}

Result<RestoredVm> restore_vm(const std::string& path, const RestoreOptions& options) {
    auto opened = SnapshotReader::open(path);
    if (!opened) {
        return opened.error();
    }
    RestoredVm restored;
    restored.reader = std::make_unique<SnapshotReader>(std::move(*opened));
    const SnapshotReader* reader = restored.reader.get();
    auto config_bytes = reader->section(kConfigSection);
    auto machine_bytes = reader->section(kMachineSection);
    if (!config_bytes || !machine_bytes) {
        return (!config_bytes ? config_bytes.error() : machine_bytes.error());
    }
    auto saved = decode_config(*config_bytes);
    if (!saved) {
        return saved.error();
    }
    auto machine = decode_machine(*machine_bytes);
    if (!machine) {
        return machine.error();
    }
    auto config = restored_config(*saved, options.host);
    if (!config) {
        return config.error();
    }
    if (auto r = check_memory_layout(*reader, *config); !r) {
        return r.error();
    }
    if (options.mode == RestoreMode::Private && reader->info().mode != MemoryMode::Raw) {
        return make_error("wrong_mode: a copy-on-write restore needs a snapshot written in raw mode");
    }
    VmBuilder::RestoredMemory memory;
    switch (options.mode) {
        case RestoreMode::Eager: memory = eager_memory(*reader, options.threads, restored.memory_seconds); break;
        case RestoreMode::Lazy: memory = lazy_memory(*reader, restored.lazy, options.thread_hook); break;
        case RestoreMode::Private: memory = private_memory(*reader, path, restored.guards); break;
    }
    auto vm = VmBuilder(*config, options.start).restore(*machine, memory);
    if (!vm) {
        return vm.error();
    }
    restored.vm = std::move(*vm);
    restored.vm->set_thread_start_hook(options.thread_hook);
    if (restored.lazy) {
        restored.lazy->on_error([machine_vm = restored.vm.get()](const Error& error) {
            machine_vm->request_exit({ExitReason::VmmError, error.to_string()});
        });
    }
    restored.config = std::move(*config);
    return restored;
}

}  // namespace sbx::snapshot
