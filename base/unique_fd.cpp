#include "base/unique_fd.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sbx {

void UniqueFd::reset(int fd) {
    if (fd_ >= 0) {
        ::close(fd_);
    }
    fd_ = fd;
}

Result<UniqueFd> UniqueFd::open(const std::string& path, int flags, unsigned mode) {
    int fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
    if (fd < 0) {
        return sys_error("cannot open {}", path);
    }
    return UniqueFd(fd);
}

Result<RegularFile> open_regular_file(const std::string& path, std::size_t max_bytes) {
    auto fd = UniqueFd::open(path, O_RDONLY);
    if (!fd) {
        return fd.error();
    }
    struct stat st {};
    if (::fstat(fd->get(), &st) != 0) {
        return sys_error("cannot stat {}", path);
    }
    if (!S_ISREG(st.st_mode)) {
        return make_error("{} is not a regular file", path);
    }
    auto size = static_cast<std::size_t>(st.st_size);
    if (size > max_bytes) {
        return make_error("{} is {} bytes, over the limit of {}", path, size, max_bytes);
    }
    return RegularFile{std::move(*fd), size};
}

Result<std::string> read_file(const std::string& path, std::size_t max_bytes) {
    auto file = open_regular_file(path, max_bytes);
    if (!file) {
        return file.error();
    }
    auto& fd = file->fd;
    std::string data(file->size, '\0');
    std::size_t done = 0;
    while (done < data.size()) {
        ssize_t n = ::read(fd.get(), data.data() + done, data.size() - done);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return sys_error("cannot read {}", path);
        }
        if (n == 0) {
            data.resize(done);  // the file shrank while we read it
            break;
        }
        done += static_cast<std::size_t>(n);
    }
    return data;
}

Result<void> write_all(int fd, const void* data, std::size_t size) {
    const auto* p = static_cast<const char*>(data);
    while (size > 0) {
        ssize_t n = ::write(fd, p, size);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return sys_error("write");
        }
        p += n;
        size -= static_cast<std::size_t>(n);
    }
    return ok();
}

}  // namespace sbx
