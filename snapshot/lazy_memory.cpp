#include "snapshot/lazy_memory.hpp"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <cstring>

#include "base/log.hpp"


namespace sbx::snapshot {

namespace {

constexpr std::uint64_t kPage = 4096;

// A userfaultfd that also sees faults from kernel mode (KVM reads guest
// memory through get_user_pages): the syscall needs CAP_SYS_PTRACE or
// vm.unprivileged_userfaultfd=1; /dev/userfaultfd (Linux 6.1) only needs
// access to the device node.
Result<UniqueFd> open_userfaultfd() {
    long fd = ::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int syscall_errno = errno;
        UniqueFd dev(::open("/dev/userfaultfd", O_RDWR | O_CLOEXEC));
#ifdef USERFAULTFD_IOC_NEW
        if (dev.get() >= 0) {
            fd = ::ioctl(dev.get(), USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
        }
#endif
        if (fd < 0) {
            return errno_error("lazy restore needs userfaultfd (run as root, set vm.unprivileged_userfaultfd=1, "
                               "or give access to /dev/userfaultfd)",
                               syscall_errno);
        }
    }
    UniqueFd uffd(static_cast<int>(fd));
    uffdio_api api{};
    api.api = UFFD_API;
    if (::ioctl(uffd.get(), UFFDIO_API, &api) < 0) {
        return sys_error("UFFDIO_API");
    }
    return uffd;
}

}  // namespace

Result<std::unique_ptr<LazyMemory>> LazyMemory::start(const SnapshotReader& reader, const GuestMemory& memory,
                                                      const ThreadStartHook& hook) {
    auto uffd = open_userfaultfd();
    if (!uffd) {
        return uffd.error();
    }
    for (const auto& region : memory.regions()) {
        uffdio_register reg{};
        reg.range.start = reinterpret_cast<std::uint64_t>(region.mapping.data());
        reg.range.len = region.size();
        reg.mode = UFFDIO_REGISTER_MODE_MISSING;
        if (::ioctl(uffd->get(), UFFDIO_REGISTER, &reg) < 0) {
            return sys_error("UFFDIO_REGISTER of guest memory at {:#x}", region.start.value);
        }
    }
    auto stop = EventFd::create();
    if (!stop) {
        return stop.error();
    }
    std::vector<Region> regions;
    for (const auto& region : memory.regions()) {
        regions.push_back({region.start.value, region.mapping.data(), region.size()});
    }
    std::unique_ptr<LazyMemory> lazy(new LazyMemory(reader, std::move(regions), std::move(*uffd), std::move(*stop)));
    for (const auto& region : lazy->regions_) {
        auto guard = MappingGuard::install(MappingGuard::Fault::Segv, region.host, region.size,
                                           "sbx-vmm: error: exit: vmm-error: lazy restore: guest memory that "
                                           "failed to load from the snapshot was touched");
        if (!guard) {
            return guard.error();
        }
        lazy->guards_.push_back(std::move(*guard));
    }
    lazy->fault_thread_ = std::thread([p = lazy.get(), hook] {
        start_thread_as(ThreadClass::LazyFault, 0, hook);
        p->serve_faults();
    });
    lazy->loader_thread_ = std::thread([p = lazy.get(), hook] {
        start_thread_as(ThreadClass::LazyLoader, 0, hook);
        p->load_all();
    });
    return lazy;
}

LazyMemory::LazyMemory(const SnapshotReader& reader, std::vector<Region> regions, UniqueFd uffd, EventFd stop)
    : reader_(reader),
      regions_(std::move(regions)),
      uffd_(std::move(uffd)),
      stop_(std::move(stop)),
      state_(reader.chunk_count()),
      start_(std::chrono::steady_clock::now()) {}

LazyMemory::~LazyMemory() {
    stopping_ = true;
    [[maybe_unused]] auto r = stop_.signal();
    if (loader_thread_.joinable()) {
        loader_thread_.join();
    }
    if (fault_thread_.joinable()) {
        fault_thread_.join();
    }
}

LazyMemory::Stats LazyMemory::stats() const {
    Stats s;
    s.faults = faults_;
    s.chunks_by_fault = chunks_by_fault_;
    s.chunks_total = state_.size();
    if (auto us = fully_loaded_us_.load(); us >= 0) {
        s.fully_loaded = std::chrono::microseconds(us);
    }
    return s;
}

void LazyMemory::on_error(std::function<void(const Error&)> handler) {
    std::lock_guard lock(error_mutex_);
    if (error_) {
        handler(*error_);
    }
    error_handler_ = std::move(handler);
}

void LazyMemory::record_error(const Error& error) {
    std::lock_guard lock(error_mutex_);
    if (error_) {
        return;
    }
    error_ = error.context("lazy restore");
    // Before any chunk becomes PROT_NONE: a thread touching one says why.
    for (auto& guard : guards_) {
        guard.set_message(fmt::format("sbx-vmm: error: exit: vmm-error: {}", error_->to_string()));
    }
    if (error_handler_) {
        error_handler_(*error_);
    }
}

std::uint8_t* LazyMemory::host_address(std::uint64_t guest, std::uint64_t length) const {
    for (const auto& region : regions_) {
        if (guest >= region.guest_start && guest - region.guest_start <= region.size &&
            length <= region.size - (guest - region.guest_start)) {
            return region.host + (guest - region.guest_start);
        }
    }
    return nullptr;
}

std::optional<std::uint64_t> LazyMemory::guest_address(std::uint64_t host) const {
    for (const auto& region : regions_) {
        auto base = reinterpret_cast<std::uint64_t>(region.host);
        if (host >= base && host - base < region.size) {
            return region.guest_start + (host - base);
        }
    }
    return std::nullopt;
}

// Installs the chunk; when that fails, the chunk's pages are made
// inaccessible and every thread waiting on them is woken (fail_chunk).
Result<void> LazyMemory::install(std::size_t index, std::vector<std::uint8_t>& buffer) {
    std::uint8_t expected = kMissing;
    if (!state_[index].compare_exchange_strong(expected, kInstalling)) {
        return ok();
    }
    const ChunkRef chunk = reader_.chunk(index);
    std::uint8_t* host = host_address(chunk.guest_start, chunk.length);
    if (host == nullptr) {
        state_[index] = kFailed;
        return make_error("corrupt: chunk {} at {:#x} is outside guest memory", index, chunk.guest_start);
    }
    auto copied = copy_chunk(index, chunk, host, buffer);
    if (!copied) {
        // The embedder hears of it before a vCPU can fault on the chunk
        // (its KVM_RUN error would be a less telling first error).
        record_error(copied.error());
        fail_chunk(index, chunk, host);
        return copied.error();
    }
    state_[index] = kInstalled;
    if (++installed_ == state_.size()) {
        auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start_);
        fully_loaded_us_ = us.count();
        log::info("guest memory fully loaded from the snapshot {:.1f} ms after the start ({} faults served, {} of {} "
                  "chunks installed by a fault first)",
                  static_cast<double>(us.count()) / 1000, faults_.load(), chunks_by_fault_.load(), state_.size());
    }
    return ok();
}

// A chunk that cannot be installed (it fails its checksum, say) must never
// be read as anything else: its pages become PROT_NONE, so a vCPU touching
// them gets -EFAULT from KVM_RUN (KVM's get_user_pages fails on the
// mapping) and a system call gets EFAULT, instead of a zero page or a wait
// that never ends. Threads already waiting on the chunk are woken to see it.
void LazyMemory::fail_chunk(std::size_t index, const ChunkRef& chunk, std::uint8_t* host) {
    if (::mprotect(host, chunk.length, PROT_NONE) < 0) {
        log::error("lazy restore: mprotect of failed chunk {}: {}", index, std::strerror(errno));
    }
    state_[index] = kFailed;
    uffdio_range range{reinterpret_cast<std::uint64_t>(host), chunk.length};
    ::ioctl(uffd_.get(), UFFDIO_WAKE, &range);
}

// UFFDIO_COPY / UFFDIO_ZEROPAGE over the chunk's pages. A page that is
// already present (EEXIST: the guest cannot have written a missing page,
// so only another installer put it there) is skipped.
Result<void> LazyMemory::copy_chunk(std::size_t index, const ChunkRef& chunk, std::uint8_t* host,
                                    std::vector<std::uint8_t>& buffer) {
    if (!chunk.zero) {
        buffer.resize(chunk.length);
        if (auto r = reader_.read_chunk(index, buffer); !r) {
            return r.error();
        }
    }
    std::uint64_t done = 0;
    while (done < chunk.length) {
        long result = 0;
        if (chunk.zero) {
            uffdio_zeropage zero{};
            zero.range.start = reinterpret_cast<std::uint64_t>(host) + done;
            zero.range.len = chunk.length - done;
            result = ::ioctl(uffd_.get(), UFFDIO_ZEROPAGE, &zero);
            done += zero.zeropage > 0 ? static_cast<std::uint64_t>(zero.zeropage) : 0;
        } else {
            uffdio_copy copy{};
            copy.dst = reinterpret_cast<std::uint64_t>(host) + done;
            copy.src = reinterpret_cast<std::uint64_t>(buffer.data()) + done;
            copy.len = chunk.length - done;
            result = ::ioctl(uffd_.get(), UFFDIO_COPY, &copy);
            done += copy.copy > 0 ? static_cast<std::uint64_t>(copy.copy) : 0;
        }
        if (result < 0 && errno == EEXIST) {
            done = (done / kPage + 1) * kPage;
        } else if (result < 0 && errno != EAGAIN && errno != EINTR) {
            return sys_error("installing guest memory at {:#x}", chunk.guest_start + done);
        }
    }
    return ok();
}

void LazyMemory::serve_faults() {
    std::vector<std::uint8_t> buffer;
    std::array<uffd_msg, 16> msgs{};
    while (!stopping_) {
        std::array<pollfd, 2> fds{pollfd{uffd_.get(), POLLIN, 0}, pollfd{stop_.fd(), POLLIN, 0}};
        if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) {
            record_error(sys_error("poll on the userfaultfd"));
            return;
        }
        if (fds[1].revents != 0) {
            return;
        }
        ssize_t n = ::read(uffd_.get(), msgs.data(), sizeof msgs);
        if (n < 0) {
            continue;  // EAGAIN: another wake-up took it
        }
        for (std::size_t i = 0; i < static_cast<std::size_t>(n) / sizeof(uffd_msg); ++i) {
            if (msgs[i].event != UFFD_EVENT_PAGEFAULT) {
                continue;
            }
            ++faults_;
            const std::uint64_t host = msgs[i].arg.pagefault.address & ~(kPage - 1);
            auto guest = guest_address(host);
            auto index = guest ? reader_.chunk_at(*guest) : std::nullopt;
            if (!index) {
                record_error(make_error("corrupt: no chunk holds guest address {:#x}", guest.value_or(0)));
                continue;
            }
            if (state_[*index] == kMissing) {
                ++chunks_by_fault_;
            }
            if (auto r = install(*index, buffer); !r) {
                record_error(r.error());
            }
            // The page may have been installed by the loader thread in the
            // meantime: wake the faulting thread either way.
            uffdio_range range{host, kPage};
            ::ioctl(uffd_.get(), UFFDIO_WAKE, &range);
        }
    }
}

void LazyMemory::load_all() {
    std::vector<std::uint8_t> buffer;
    auto load = [&](std::size_t index) {
        if (auto r = install(index, buffer); !r) {
            record_error(r.error());
        }
    };
    for (const auto& range : reader_.working_set()) {
        for (std::uint64_t addr = range.start; addr < range.start + range.length && !stopping_;) {
            auto index = reader_.chunk_at(addr);
            if (!index) {
                break;
            }
            load(*index);
            const ChunkRef chunk = reader_.chunk(*index);
            addr = chunk.guest_start + chunk.length;
        }
    }
    for (std::size_t i = 0; i < state_.size() && !stopping_; ++i) {
        load(i);
    }
}

}  // namespace sbx::snapshot
