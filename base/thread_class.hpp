// What a VMM thread is for, so an embedder can confine each kind of thread
// on its own (sbx-vmm installs one seccomp filter per class, docs/security.md).
// The library names its threads after their class ("sbx-vcpu0",
// "sbx-devices", "sbx-run" for the thread in Vm::run(), ...: visible in ps,
// top and /proc/PID/task/TID/comm) and,
// when given a ThreadStartHook, calls it on the new thread itself before
// that thread does any work: before a vCPU's first KVM_RUN, before the
// device loop's first wait, before a lazy restore serves its first fault.
#pragma once

#include <functional>
#include <string_view>

namespace sbx {

enum class ThreadClass {
    Main,        // the thread that called Vm::run(): run loop, console, exit path
    Vcpu,        // one per vCPU: KVM_RUN and the exits it hands to devices
    Device,      // the virtio device loop (queues, backends, interrupts)
    Control,     // the control socket: pause, resume, snapshot, diagnose
    Signals,     // waits for SIGTERM/SIGINT/SIGHUP and asks the VM to stop
    LazyFault,   // a lazy restore's userfaultfd server
    LazyLoader,  // a lazy restore's background loader
};

std::string_view thread_class_name(ThreadClass c);

// Called on the thread itself; `index` is the vCPU number (0 otherwise). A
// hook that cannot confine the thread should end the process: the thread
// must not go on unconfined.
using ThreadStartHook = std::function<void(ThreadClass, unsigned index)>;

// Names the calling thread "sbx-<class>[index]" (Linux keeps 15 bytes) and
// calls `hook` if there is one.
void start_thread_as(ThreadClass c, unsigned index, const ThreadStartHook& hook);

}  // namespace sbx
