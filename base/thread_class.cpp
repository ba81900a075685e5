#include "base/thread_class.hpp"

#include <pthread.h>

#include <fmt/format.h>

namespace sbx {

std::string_view thread_class_name(ThreadClass c) {
    switch (c) {
        case ThreadClass::Main:
            return "run";
        case ThreadClass::Vcpu:
            return "vcpu";
        case ThreadClass::Device:
            return "devices";
        case ThreadClass::Control:
            return "control";
        case ThreadClass::Signals:
            return "signals";
        case ThreadClass::LazyFault:
            return "lazy-fault";
        case ThreadClass::LazyLoader:
            return "lazy-load";
    }
    return "?";
}

void start_thread_as(ThreadClass c, unsigned index, const ThreadStartHook& hook) {
    std::string name = c == ThreadClass::Vcpu ? fmt::format("sbx-vcpu{}", index)
                                              : fmt::format("sbx-{}", thread_class_name(c));
    name.resize(std::min<std::size_t>(name.size(), 15));
    ::pthread_setname_np(::pthread_self(), name.c_str());
    if (hook) {
        hook(c, index);
    }
}

}  // namespace sbx
