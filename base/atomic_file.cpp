#include "base/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/unique_fd.hpp"

namespace sbx {

namespace {

std::string parent_of(const std::string& path) {
    const auto slash = path.rfind('/');
    if (slash == std::string::npos) {
        return ".";
    }
    return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

Result<void> write_file_atomically(const std::string& path, std::string_view data, mode_t mode) {
    const std::string temp = path + ".tmp";
    // A stale temporary may have another owner or mode: make a fresh one.
    if (::unlink(temp.c_str()) != 0 && errno != ENOENT) {
        return sys_error("cannot remove {}", temp);
    }
    auto fd = UniqueFd::open(temp, O_WRONLY | O_CREAT | O_EXCL, mode);
    if (!fd) {
        return fd.error();
    }
    if (::fchmod(fd->get(), mode) != 0) {
        const Error e = sys_error("cannot set the mode of {}", temp);
        ::unlink(temp.c_str());
        return e;
    }
    if (auto written = write_all(fd->get(), data.data(), data.size()); !written) {
        ::unlink(temp.c_str());
        return written.error().context("writing " + temp);
    }
    if (::fsync(fd->get()) != 0) {
        const Error e = sys_error("fsync of {}", temp);
        ::unlink(temp.c_str());
        return e;
    }
    fd->reset();
    if (::rename(temp.c_str(), path.c_str()) != 0) {
        const Error e = sys_error("cannot rename {} to {}", temp, path);
        ::unlink(temp.c_str());
        return e;
    }
    const std::string dir = parent_of(path);
    auto dir_fd = UniqueFd::open(dir, O_RDONLY | O_DIRECTORY);
    if (!dir_fd) {
        return dir_fd.error();
    }
    if (::fsync(dir_fd->get()) != 0) {
        return sys_error("fsync of {}", dir);
    }
    return ok();
}

}  // namespace sbx
