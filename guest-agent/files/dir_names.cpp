#include "guest-agent/files/dir_names.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <memory>

namespace sbx::agent::files {

Result<std::vector<std::string>> read_dir_names(int dir_fd, std::size_t limit) {
    // fdopendir takes ownership of its fd: give it a duplicate.
    const int dup_fd = ::fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
    if (dup_fd < 0) {
        return sys_error("duplicating a directory descriptor");
    }
    std::unique_ptr<DIR, int (*)(DIR*)> dir(::fdopendir(dup_fd), ::closedir);
    if (!dir) {
        ::close(dup_fd);
        return sys_error("opening a directory stream");
    }
    ::rewinddir(dir.get());
    std::vector<std::string> names;
    while (names.size() <= limit) {
        errno = 0;
        const dirent* d = ::readdir(dir.get());
        if (d == nullptr) {
            if (errno != 0) {
                return sys_error("reading a directory");
            }
            break;
        }
        std::string_view name = d->d_name;
        if (name != "." && name != "..") {
            names.emplace_back(name);
        }
    }
    std::sort(names.begin(), names.end());
    return names;
}

}  // namespace sbx::agent::files
