#include "host-tools/sbxd/vmm/vmm_exit_cause.hpp"

#include <charconv>
#include <fstream>

namespace sbx::sbxd {

namespace {

constexpr std::string_view kErrorPrefix = "sbx-vmm: error: ";
constexpr std::string_view kSeccompMarker = "seccomp: thread ";
constexpr std::string_view kSyscallMarker = "made system call ";

// The last line holding `needle`, without its newline.
std::string_view last_line_with(std::string_view text, std::string_view needle) {
    const std::size_t at = text.rfind(needle);
    if (at == std::string_view::npos) {
        return {};
    }
    const std::size_t begin = text.rfind('\n', at);
    const std::size_t start = begin == std::string_view::npos ? 0 : begin + 1;
    const std::size_t end = text.find('\n', at);
    return text.substr(start, (end == std::string_view::npos ? text.size() : end) - start);
}

std::string reason_for_status(int code) {
    switch (code) {
        case 2: return "triple_fault";
        case 3: return "kvm_error";
        case 4: return "vmm_error";
        case 5: return "guest_panic";
        case kVmmExitSeccomp: return "seccomp";
        default: return "vmm_exited";
    }
}

}  // namespace

VmmExitCause vmm_exit_cause(const std::optional<ProcessEnd>& end, std::string_view log_tail) {
    VmmExitCause cause;
    const std::string_view seccomp_line = last_line_with(log_tail, kSeccompMarker);
    if (end && end->exit_code) {
        cause.reason = reason_for_status(*end->exit_code);
    } else if (end && end->signal) {
        cause.reason = "killed";
    } else {
        // Not our child: only the log can say.
        cause.reason = seccomp_line.empty() ? "vmm_exited" : "seccomp";
    }
    if (cause.reason == "seccomp" && !seccomp_line.empty()) {
        cause.detail = std::string(seccomp_line);
        const std::size_t at = seccomp_line.find(kSyscallMarker);
        if (at != std::string_view::npos) {
            const char* first = seccomp_line.data() + at + kSyscallMarker.size();
            long nr = 0;
            if (auto [ptr, ec] = std::from_chars(first, seccomp_line.data() + seccomp_line.size(), nr);
                ec == std::errc() && ptr != first) {
                cause.syscall = nr;
            }
        }
        return cause;
    }
    const std::string_view error_line = last_line_with(log_tail, kErrorPrefix);
    cause.detail = !error_line.empty() ? std::string(error_line)
                                       : (end ? describe(*end) : std::string("ended"));
    return cause;
}

std::string read_log_tail(const std::string& path, std::size_t max_bytes) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) {
        return {};
    }
    const std::streamoff size = in.tellg();
    const std::streamoff from = size > static_cast<std::streamoff>(max_bytes) ? size - static_cast<std::streamoff>(max_bytes) : 0;
    in.seekg(from);
    std::string text(static_cast<std::size_t>(size - from), '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<std::size_t>(in.gcount()));
    return text;
}

}  // namespace sbx::sbxd
