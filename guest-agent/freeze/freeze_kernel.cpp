#include "guest-agent/freeze/freeze_kernel.hpp"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <set>
#include <sstream>

#include "base/unique_fd.hpp"
#include "guest-agent/protocol/messages.hpp"

namespace sbx::agent {
namespace {

// proc(5): a space, tab, newline or backslash in a field is \ooo.
std::string unescape(std::string_view field) {
    auto octal = [](char c) { return c >= '0' && c <= '7'; };
    std::string out;
    for (std::size_t i = 0; i < field.size(); ++i) {
        if (field[i] == '\\' && field.size() - i > 3 && octal(field[i + 1]) && octal(field[i + 2]) &&
            octal(field[i + 3])) {
            out.push_back(static_cast<char>((field[i + 1] - '0') * 64 + (field[i + 2] - '0') * 8 + (field[i + 3] - '0')));
            i += 3;
        } else {
            out.push_back(field[i]);
        }
    }
    return out;
}

bool has_option(std::string_view options, std::string_view wanted) {
    std::size_t i = 0;
    while (i <= options.size()) {
        std::size_t j = options.find(',', i);
        if (j == std::string_view::npos) {
            j = options.size();
        }
        if (options.substr(i, j - i) == wanted) {
            return true;
        }
        i = j + 1;
    }
    return false;
}

Result<bool> mount_ioctl(const std::string& mount_point, unsigned long request, int benign_errno,
                         std::string_view name) {
    UniqueFd fd(::open(mount_point.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd) {
        return sys_error("opening {} for {}", mount_point, name).with_code(code::kIoError);
    }
    if (::ioctl(fd.get(), request, 0) != 0) {
        if (errno == benign_errno) {
            return false;
        }
        return sys_error("{} {}", name, mount_point)
            .with_code(errno == EPERM ? code::kPermissionDenied : code::kIoError);
    }
    return true;
}

class SystemFreezeKernel final : public FreezeKernel {
public:
    Result<std::string> mounts() override {
        std::ifstream in("/proc/self/mounts");
        if (!in) {
            return make_coded_error(code::kIoError, "cannot read /proc/self/mounts");
        }
        std::stringstream text;
        text << in.rdbuf();
        return text.str();
    }
    Result<bool> freeze(const std::string& mount_point) override {
        return mount_ioctl(mount_point, FIFREEZE, EBUSY, "FIFREEZE");
    }
    Result<bool> thaw(const std::string& mount_point) override {
        return mount_ioctl(mount_point, FITHAW, EINVAL, "FITHAW");
    }
};

class RefusingFreezeKernel final : public FreezeKernel {
public:
    Result<std::string> mounts() override { return refuse(); }
    Result<bool> freeze(const std::string&) override { return refuse(); }
    Result<bool> thaw(const std::string&) override { return refuse(); }

private:
    static Error refuse() {
        return make_coded_error(code::kPermissionDenied,
                                "this agent does not run in a guest: it freezes no file systems");
    }
};

}  // namespace

std::shared_ptr<FreezeKernel> make_system_freeze_kernel() { return std::make_shared<SystemFreezeKernel>(); }
std::shared_ptr<FreezeKernel> make_refusing_freeze_kernel() { return std::make_shared<RefusingFreezeKernel>(); }

std::vector<std::string> freeze_targets(std::string_view proc_mounts) {
    static constexpr std::array<std::string_view, 6> kTypes = {"ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs"};
    std::vector<std::string> out;
    std::set<std::string> seen;
    std::istringstream lines{std::string(proc_mounts)};
    std::string line;
    while (std::getline(lines, line)) {
        std::istringstream fields(line);
        std::string source, mount_point, type, options;
        if (!(fields >> source >> mount_point >> type >> options)) {
            continue;
        }
        if (std::find(kTypes.begin(), kTypes.end(), type) == kTypes.end() || has_option(options, "ro")) {
            continue;
        }
        std::string point = unescape(mount_point);
        if (point.empty() || point.front() != '/' || !seen.insert(point).second) {
            continue;
        }
        out.push_back(std::move(point));
    }
    std::reverse(out.begin(), out.end());
    return out;
}

}  // namespace sbx::agent

namespace sbx::agent {

Result<std::vector<std::string>> freeze_all(FreezeKernel& kernel) {
    auto text = kernel.mounts();
    if (!text) {
        return text.error();
    }
    std::vector<std::string> frozen;
    for (const auto& point : freeze_targets(*text)) {
        auto done = kernel.freeze(point);
        if (!done) {
            for (auto it = frozen.rbegin(); it != frozen.rend(); ++it) {
                [[maybe_unused]] auto r = kernel.thaw(*it);
            }
            return done.error();
        }
        if (*done) {
            frozen.push_back(point);
        }
    }
    return frozen;
}

Result<std::vector<std::string>> thaw_all(FreezeKernel& kernel) {
    auto text = kernel.mounts();
    if (!text) {
        return text.error();
    }
    auto targets = freeze_targets(*text);
    std::vector<std::string> thawed;
    std::optional<Error> first;
    // The reverse of the freeze order: a mount's parent is writable before it.
    for (auto it = targets.rbegin(); it != targets.rend(); ++it) {
        auto done = kernel.thaw(*it);
        if (!done) {
            first = first ? first : done.error();
        } else if (*done) {
            thawed.push_back(*it);
        }
    }
    if (first) {
        return *first;
    }
    return thawed;
}

}  // namespace sbx::agent
