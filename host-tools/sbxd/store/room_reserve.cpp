#include "host-tools/sbxd/store/room_reserve.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "base/unique_fd.hpp"

namespace sbx::sbxd {

Result<void> RoomReserve::fill() {
    if (path_.empty() || held()) {
        return ok();
    }
    const std::string temp = path_ + ".tmp";
    auto fd = UniqueFd::open(temp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (!fd) {
        return fd.error();
    }
    // Mode 0 allocates the blocks (tmpfs: its pages), so the room is
    // taken from the file system now; renamed only when whole.
    if (::fallocate(fd->get(), 0, 0, static_cast<off_t>(bytes_)) != 0) {
        const int saved = errno;
        ::unlink(temp.c_str());
        errno = saved;
        Error error = sys_error("allocating {} bytes at {}", bytes_, temp);
        return saved == ENOSPC || saved == EDQUOT ? error.with_code("no_space") : error;
    }
    if (::rename(temp.c_str(), path_.c_str()) != 0) {
        Error error = sys_error("renaming {}", temp);
        ::unlink(temp.c_str());
        return error;
    }
    return ok();
}

bool RoomReserve::release() {
    const bool had = held();
    if (!path_.empty()) {
        ::unlink(path_.c_str());
    }
    return had;
}

bool RoomReserve::held() const {
    struct stat st {};
    return !path_.empty() && ::stat(path_.c_str(), &st) == 0 &&
           static_cast<std::uint64_t>(st.st_blocks) * 512 >= bytes_;
}

}  // namespace sbx::sbxd
