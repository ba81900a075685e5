#include "host-tools/sbx-vmm/seccomp_policy.hpp"

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <csignal>
#include <cstring>

#include "base/unique_fd.hpp"

namespace sbx {

namespace {

// The SIGSYS handler can take no argument, so what it reports from lives
// here: the class of the thread that trapped, and system call names
// resolved before any filter was loaded (libseccomp allocates).
constexpr int kNamedCalls = 512;
std::array<const char*, kNamedCalls> g_call_names{};
thread_local const char* t_class_name = "unconfined";

// Async-signal-safe and past any interceptor (a sanitizer's _exit runs
// a leak check, which its filter would trap): the report is built in a
// buffer and written with one raw write(2), so another thread's log line
// cannot land inside it; then a raw exit_group(2).
class Line {
public:
    void put(const char* s) {
        while (*s != '\0' && len_ < sizeof buf_ - 1) {
            buf_[len_++] = *s++;
        }
    }
    void put_number(long v) {
        char digits[24];
        char* p = digits + sizeof digits;
        *--p = '\0';
        const bool negative = v < 0;
        unsigned long u = negative ? 0UL - static_cast<unsigned long>(v) : static_cast<unsigned long>(v);
        do {
            *--p = static_cast<char>('0' + u % 10);
            u /= 10;
        } while (u != 0);
        if (negative) {
            *--p = '-';
        }
        put(p);
    }
    void write_out() {
        buf_[len_] = '\n';
        [[maybe_unused]] long r = ::syscall(SYS_write, STDERR_FILENO, buf_, len_ + 1);
    }

private:
    char buf_[256];
    std::size_t len_ = 0;
};

[[noreturn]] void exit_process(int status) {
    ::syscall(SYS_exit_group, status);
    __builtin_unreachable();
}

void on_sigsys(int, siginfo_t* info, void*) {
    char thread[16] = "?";
    ::syscall(SYS_prctl, PR_GET_NAME, thread, 0, 0, 0);
    const int nr = info->si_syscall;
    Line line;
    line.put("sbx-vmm: error: exit: seccomp: thread ");
    line.put(thread);
    line.put(" (");
    line.put(t_class_name);
    line.put(") made system call ");
    line.put_number(nr);
    if (nr >= 0 && nr < kNamedCalls && g_call_names[static_cast<std::size_t>(nr)] != nullptr) {
        line.put(" (");
        line.put(g_call_names[static_cast<std::size_t>(nr)]);
        line.put(")");
    }
    line.put(", which its filter forbids");
    line.write_out();
    exit_process(kExitSeccomp);
}

constexpr std::array kClasses = {
    ThreadClass::Main,    ThreadClass::Vcpu,      ThreadClass::Device,     ThreadClass::Control,
    ThreadClass::Signals, ThreadClass::LazyFault, ThreadClass::LazyLoader,
};

scmp_arg_cmp to_scmp(const SyscallArg& a) {
    if (a.op == SyscallArg::Op::MaskedEqual) {
        return scmp_arg_cmp{a.arg, SCMP_CMP_MASKED_EQ, a.mask, a.value};
    }
    return scmp_arg_cmp{a.arg, SCMP_CMP_EQ, a.value, 0};
}

struct FilterContext {
    scmp_filter_ctx ctx;
    explicit FilterContext(std::uint32_t action) : ctx(seccomp_init(action)) {}
    ~FilterContext() {
        if (ctx != nullptr) {
            seccomp_release(ctx);
        }
    }
    FilterContext(const FilterContext&) = delete;
    FilterContext& operator=(const FilterContext&) = delete;
};

Error libseccomp_error(int rc, std::string_view what, ThreadClass c) {
    return make_coded_error("seccomp", "libseccomp: {} for the {} filter: {}", what, thread_class_name(c),
                            std::strerror(-rc));
}

// The class's list compiled to classic BPF (seccomp_export_bpf writes it
// to an fd; a memfd holds it).
Result<std::vector<sock_filter>> compile(ThreadClass c, const PolicyContext& context) {
    FilterContext f(SCMP_ACT_TRAP);
    if (f.ctx == nullptr) {
        return make_coded_error("seccomp", "libseccomp: seccomp_init failed");
    }
    // no_new_privs is set once for the process (SeccompPolicy::create).
    if (int rc = seccomp_attr_set(f.ctx, SCMP_FLTATR_CTL_NNP, 0); rc < 0) {
        return libseccomp_error(rc, "no_new_privs attribute", c);
    }
    for (const SyscallRule& rule : allow_list(c, context)) {
        std::vector<scmp_arg_cmp> args;
        for (const auto& a : rule.args) {
            args.push_back(to_scmp(a));
        }
        const std::uint32_t action =
            rule.refuse_errno != 0 ? SCMP_ACT_ERRNO(static_cast<std::uint16_t>(rule.refuse_errno)) : SCMP_ACT_ALLOW;
        int rc = seccomp_rule_add_array(f.ctx, action, rule.nr, static_cast<unsigned>(args.size()),
                                        args.empty() ? nullptr : args.data());
        if (rc < 0) {
            return libseccomp_error(rc, fmt::format("system call {}", rule.nr), c);
        }
    }
    UniqueFd mem(::memfd_create("sbx-seccomp", MFD_CLOEXEC));
    if (!mem) {
        return sys_error("memfd_create for the {} filter", thread_class_name(c));
    }
    if (int rc = seccomp_export_bpf(f.ctx, mem.get()); rc < 0) {
        return libseccomp_error(rc, "export", c);
    }
    const off_t size = ::lseek(mem.get(), 0, SEEK_END);
    if (size <= 0 || size % static_cast<off_t>(sizeof(sock_filter)) != 0) {
        return make_coded_error("seccomp", "the {} filter compiled to {} bytes", thread_class_name(c), size);
    }
    std::vector<sock_filter> program(static_cast<std::size_t>(size) / sizeof(sock_filter));
    if (::pread(mem.get(), program.data(), static_cast<std::size_t>(size), 0) != size) {
        return sys_error("reading back the {} filter", thread_class_name(c));
    }
    return program;
}

}  // namespace

struct SeccompPolicy::Program {
    std::vector<sock_filter> code;
};

SeccompPolicy::SeccompPolicy() = default;
SeccompPolicy::~SeccompPolicy() = default;

Result<std::unique_ptr<SeccompPolicy>> SeccompPolicy::create(std::optional<JailIdentity> jail) {
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
        return sys_error("prctl(PR_SET_NO_NEW_PRIVS)");
    }
    for (int nr = 0; nr < kNamedCalls; ++nr) {
        g_call_names[static_cast<std::size_t>(nr)] = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, nr);
    }
    struct sigaction sa {};
    sa.sa_sigaction = on_sigsys;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (::sigaction(SIGSYS, &sa, nullptr) != 0) {
        return sys_error("sigaction(SIGSYS)");
    }
    std::unique_ptr<SeccompPolicy> policy(new SeccompPolicy());
    const PolicyContext context{static_cast<int>(::getpid()), jail};
    for (ThreadClass c : kClasses) {
        auto program = compile(c, context);
        if (!program) {
            return program.error();
        }
        policy->programs_.push_back(Program{std::move(*program)});
    }
    return policy;
}

Result<void> SeccompPolicy::confine(ThreadClass c) const {
    const auto index = static_cast<std::size_t>(c);
    if (index >= programs_.size()) {
        return make_coded_error("seccomp", "no filter for thread class {}", static_cast<int>(c));
    }
    const auto& code = programs_[index].code;
    sock_fprog prog{static_cast<unsigned short>(code.size()), const_cast<sock_filter*>(code.data())};
    t_class_name = thread_class_name(c).data();  // the names are literals
    if (::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) {
        return sys_error("seccomp(SECCOMP_SET_MODE_FILTER) for the {} filter", thread_class_name(c));
    }
    return ok();
}

ThreadStartHook SeccompPolicy::hook(std::optional<ThreadClass> violate) const {
    return [this, violate](ThreadClass c, unsigned) {
        if (auto r = confine(c); !r) {
            Line line;
            line.put("sbx-vmm: error: exit: seccomp: ");
            line.put(r.error().to_string().c_str());
            line.write_out();
            exit_process(kExitSeccomp);
        }
        if (violate && *violate == c) {
            // mount(2) is in no list; with the filter off it fails (EFAULT).
            ::syscall(SYS_mount, nullptr, nullptr, nullptr, 0, nullptr);
        }
    };
}

std::optional<ThreadClass> parse_thread_class(std::string_view name) {
    for (ThreadClass c : kClasses) {
        if (thread_class_name(c) == name) {
            return c;
        }
    }
    return std::nullopt;
}

}  // namespace sbx
