#include "guest-agent/files/make_dirs.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/unique_fd.hpp"

namespace sbx::agent::files {

Result<void> make_dirs(const std::string& path, std::uint32_t mode, const Owner& owner) {
    auto current = UniqueFd::open("/", O_RDONLY | O_DIRECTORY);
    if (!current) {
        return current.error();
    }
    std::string_view rest = path;
    std::string walked;
    while (!rest.empty()) {
        const auto slash = rest.find('/');
        const std::string part(rest.substr(0, slash));
        rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
        if (part.empty()) {
            continue;
        }
        walked += "/" + part;
        const bool created = ::mkdirat(current->get(), part.c_str(), mode) == 0;
        if (!created && errno != EEXIST) {
            return sys_error("mkdir {}", walked);
        }
        UniqueFd next(::openat(current->get(), part.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        if (!next) {
            if (errno == ENOTDIR) {
                const bool last = rest.find_first_not_of('/') == std::string_view::npos;
                return errno_error(fmt::format("{} exists and is not a directory", walked),
                                   last ? EEXIST : ENOTDIR);
            }
            return sys_error("opening {}", walked);
        }
        if (created) {
            if (auto r = apply_owner(next.get(), owner); !r) {
                return r.error().context(walked);
            }
            if (::fchmod(next.get(), mode) != 0) {
                return sys_error("chmod {}", walked);
            }
        }
        *current = std::move(next);
    }
    return ok();
}

}  // namespace sbx::agent::files
