// The allow list of each sbx-vmm thread class (seccomp_policy.hpp). Each
// list is what that thread's code calls, as traced under strace -f over
// the guest tests (boot, devices, agent, snapshots, fork, sbxd) and read
// from the code for paths the tests do not take (errors, teardown).
// docs/security.md has the same lists in prose.
#include <fcntl.h>
#include <linux/if_tun.h>
#include <linux/seccomp.h>
#include <linux/userfaultfd.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sched.h>
#include <sys/socket.h>

#include <cerrno>
#include <csignal>
#include <initializer_list>

#include "host-tools/sbx-vmm/seccomp_policy.hpp"
#include "vmm/kvm/ioctl_numbers.hpp"

namespace sbx {

namespace {

using Op = SyscallArg::Op;

SyscallArg arg_eq(unsigned arg, std::uint64_t value) { return {arg, Op::Equal, value, 0}; }
SyscallArg arg_masked(unsigned arg, std::uint64_t mask, std::uint64_t value) {
    return {arg, Op::MaskedEqual, value, mask};
}

class ListBuilder {
public:
    ListBuilder& any(std::initializer_list<int> calls) {
        for (int nr : calls) {
            rules_.push_back({nr, {}});
        }
        return *this;
    }
    ListBuilder& with(int nr, std::vector<SyscallArg> args) {
        rules_.push_back({nr, std::move(args)});
        return *this;
    }
    ListBuilder& ioctls(std::initializer_list<std::uint64_t> requests) {
        for (std::uint64_t r : requests) {
            with(SCMP_SYS(ioctl), {arg_eq(1, r)});
        }
        return *this;
    }
    ListBuilder& refuse(std::initializer_list<int> calls, int error) {
        for (int nr : calls) {
            rules_.push_back({nr, {}, error});
        }
        return *this;
    }
    std::vector<SyscallRule> take() { return std::move(rules_); }

private:
    std::vector<SyscallRule> rules_;
};

// Every thread: memory (never executable), locks, time, signals, its own
// end, a line on stderr, and what the SIGSYS reporter and abort() need.
void runtime(ListBuilder& b, const PolicyContext& context) {
    const auto pid = static_cast<std::uint64_t>(context.pid);
    b.any({SCMP_SYS(munmap), SCMP_SYS(madvise), SCMP_SYS(brk), SCMP_SYS(mremap), SCMP_SYS(futex),
           SCMP_SYS(sched_yield), SCMP_SYS(nanosleep), SCMP_SYS(clock_nanosleep), SCMP_SYS(clock_gettime),
           SCMP_SYS(gettimeofday), SCMP_SYS(rt_sigreturn), SCMP_SYS(rt_sigprocmask), SCMP_SYS(rt_sigaction),
           SCMP_SYS(restart_syscall), SCMP_SYS(gettid), SCMP_SYS(getpid), SCMP_SYS(getrandom), SCMP_SYS(exit),
           SCMP_SYS(exit_group)});
    b.with(SCMP_SYS(mmap), {arg_masked(2, PROT_EXEC, 0)});
    b.with(SCMP_SYS(mprotect), {arg_masked(2, PROT_EXEC, 0)});
    b.with(SCMP_SYS(tgkill), {arg_eq(0, pid)});
    b.with(SCMP_SYS(write), {arg_eq(0, 2)});
    b.with(SCMP_SYS(writev), {arg_eq(0, 2)});
    b.with(SCMP_SYS(prctl), {arg_eq(0, PR_GET_NAME)});
    // A thread starting asks whether it inherited a filter (main.cpp's
    // confine_each_thread: then it inherited no capability either).
    b.with(SCMP_SYS(prctl), {arg_eq(0, PR_GET_SECCOMP)});
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    // A sanitizer build's runtime (tests only): each thread's alternate
    // signal stack, the pipe it checks thread creation with.
    b.any({SCMP_SYS(sigaltstack), SCMP_SYS(pipe2)});
#endif
}

// A thread that opens no file: open fails with EACCES rather than trapping
// (glibc's malloc may open /proc/sys/vm/overcommit_memory from any thread).
void no_files(ListBuilder& b) {
    b.refuse({SCMP_SYS(openat), SCMP_SYS(open)}, EACCES);
}

// Reading and writing descriptors the thread was given, and waiting on them.
void descriptor_io(ListBuilder& b) {
    b.any({SCMP_SYS(read), SCMP_SYS(readv), SCMP_SYS(write), SCMP_SYS(writev), SCMP_SYS(close),
           SCMP_SYS(epoll_ctl), SCMP_SYS(epoll_wait), SCMP_SYS(epoll_pwait), SCMP_SYS(poll), SCMP_SYS(ppoll),
           SCMP_SYS(timerfd_settime), SCMP_SYS(timerfd_gettime), SCMP_SYS(fstat), SCMP_SYS(lseek)});
}

// The virtio backends: disk images (io_uring and plain calls), the tap,
// vsock's Unix sockets (accepting host connections, connecting to the
// host's listeners for guest connections), virtio-rng's getrandom().
void device_backends(ListBuilder& b) {
    descriptor_io(b);
    b.any({SCMP_SYS(io_uring_enter), SCMP_SYS(pread64), SCMP_SYS(pwrite64), SCMP_SYS(preadv), SCMP_SYS(pwritev),
           SCMP_SYS(preadv2), SCMP_SYS(pwritev2), SCMP_SYS(fsync), SCMP_SYS(fdatasync), SCMP_SYS(fallocate),
           SCMP_SYS(accept4), SCMP_SYS(connect), SCMP_SYS(shutdown), SCMP_SYS(recvfrom), SCMP_SYS(recvmsg),
           SCMP_SYS(sendto), SCMP_SYS(sendmsg), SCMP_SYS(getsockopt), SCMP_SYS(setsockopt), SCMP_SYS(fcntl),
           SCMP_SYS(eventfd2), SCMP_SYS(timerfd_create)});
    b.with(SCMP_SYS(socket), {arg_masked(0, 0xffffffff, AF_UNIX)});
    b.ioctls({kvm::ioctls::irq_line(), TUNSETOFFLOAD, FIONREAD, FIONBIO});
}

// Starting a thread that confines itself (the device loop after a resume,
// a snapshot's compression workers): clone, the new thread's set-up, its
// name and its own filter.
void thread_start(ListBuilder& b) {
    b.any({SCMP_SYS(clone3), SCMP_SYS(set_robust_list), SCMP_SYS(rseq), SCMP_SYS(sched_getaffinity)});
    b.with(SCMP_SYS(clone), {arg_masked(0, CLONE_THREAD, CLONE_THREAD)});
    b.with(SCMP_SYS(prctl), {arg_eq(0, PR_SET_NAME)});
    b.with(SCMP_SYS(seccomp), {arg_eq(0, SECCOMP_SET_MODE_FILTER)});
}

// Files in directories given on the command line: snapshots (the control
// socket's snapshot op), the crash dump, the control socket's removal.
void file_writes(ListBuilder& b) {
    b.any({SCMP_SYS(openat), SCMP_SYS(open), SCMP_SYS(newfstatat), SCMP_SYS(statx), SCMP_SYS(fstatfs),
           SCMP_SYS(ftruncate), SCMP_SYS(pwrite64), SCMP_SYS(pread64), SCMP_SYS(fsync), SCMP_SYS(fdatasync),
           SCMP_SYS(fallocate), SCMP_SYS(renameat), SCMP_SYS(renameat2), SCMP_SYS(rename), SCMP_SYS(unlink),
           SCMP_SYS(unlinkat), SCMP_SYS(linkat), SCMP_SYS(getdents64), SCMP_SYS(fchmod), SCMP_SYS(mkdirat),
           SCMP_SYS(dup), SCMP_SYS(fcntl), SCMP_SYS(memfd_create), SCMP_SYS(readlink), SCMP_SYS(readlinkat),
           SCMP_SYS(getcwd)});
}

}  // namespace

std::vector<SyscallRule> allow_list(ThreadClass c, const PolicyContext& context) {
    ListBuilder b;
    runtime(b, context);
    switch (c) {
        case ThreadClass::Vcpu:
            // KVM_RUN, and the exits it hands to devices on this thread:
            // legacy ports, virtio-mmio registers (a queue notify without
            // an ioeventfd; a device's activation and reset: its event
            // registrations, eventfds and timers, a disk's I/O in flight
            // reaped, a vsock connection closed, tap offloads). No socket
            // is made and no file opened here.
            descriptor_io(b);
            b.any({SCMP_SYS(eventfd2), SCMP_SYS(timerfd_create), SCMP_SYS(io_uring_enter), SCMP_SYS(shutdown),
                   SCMP_SYS(sendto), SCMP_SYS(sendmsg), SCMP_SYS(recvfrom), SCMP_SYS(recvmsg), SCMP_SYS(fcntl)});
            b.ioctls({kvm::ioctls::run(), kvm::ioctls::irq_line(), TUNSETOFFLOAD});
            no_files(b);
            break;
        case ThreadClass::Device:
            device_backends(b);
            no_files(b);
            break;
        case ThreadClass::Main:
            // The run loop (exit requests, console in and out, its timer),
            // kicking and joining the vCPUs, then the exit path: devices
            // stopped, the control socket removed, a crash dump.
            descriptor_io(b);
            device_backends(b);
            file_writes(b);
            b.with(SCMP_SYS(ioctl), {arg_masked(1, kvm::ioctls::kTypeMask, kvm::ioctls::kvm_type())});
            break;
        case ThreadClass::Control:
            // Requests (pause, resume, snapshot, diagnose, stop): every KVM
            // state ioctl, dirty logging, the snapshot's files and its
            // workers, the device loop restarted on resume (device_backends:
            // its list is stacked on this one).
            device_backends(b);
            file_writes(b);
            thread_start(b);
            b.any({SCMP_SYS(io_uring_setup), SCMP_SYS(io_uring_register)});  // a disk's ring, again on resume
            b.with(SCMP_SYS(ioctl), {arg_masked(1, kvm::ioctls::kTypeMask, kvm::ioctls::kvm_type())});
            break;
        case ThreadClass::Signals:
            // sigtimedwait, then an exit request (an eventfd write).
            b.any({SCMP_SYS(rt_sigtimedwait), SCMP_SYS(write)});
            no_files(b);
            break;
        case ThreadClass::LazyFault:
        case ThreadClass::LazyLoader:
            // userfaultfd messages and UFFDIO_COPY/ZEROPAGE/WAKE; snapshot
            // chunks read with pread; a failed chunk made PROT_NONE.
            descriptor_io(b);
            b.any({SCMP_SYS(pread64), SCMP_SYS(preadv)});
            b.with(SCMP_SYS(ioctl), {arg_masked(1, kvm::ioctls::kTypeMask, std::uint64_t{UFFDIO} << 8)});
            no_files(b);
            if (context.jail) {
                // They run when the main thread enters the jail, and glibc
                // makes every thread take the new ids (its setxid
                // broadcast): exactly those ids, nothing else.
                const auto u = context.jail->uid;
                const auto g = context.jail->gid;
                b.with(SCMP_SYS(setgroups), {arg_eq(0, 0)});
                b.with(SCMP_SYS(setresgid), {arg_eq(0, g), arg_eq(1, g), arg_eq(2, g)});
                b.with(SCMP_SYS(setresuid), {arg_eq(0, u), arg_eq(1, u), arg_eq(2, u)});
            }
            break;
    }
    return b.take();
}

}  // namespace sbx
