// Room kept for the store's own writes on a file system that fills up.
// The state directory holds sandboxes' memory files beside sbxd's SQLite
// database, so a stop that runs out of room there would leave the state
// change that puts the sandbox back to running unwritable (SQLITE_FULL),
// and the sandbox half-way. A file of a fixed size, allocated beside the
// database, is that room: a write that fails for want of space frees it
// and runs once more; it is allocated again once there is room.
#pragma once

#include <cstdint>
#include <string>

#include "base/result.hpp"

namespace sbx::sbxd {

class RoomReserve {
public:
    RoomReserve() = default;
    RoomReserve(std::string path, std::uint64_t bytes) : path_(std::move(path)), bytes_(bytes) {}

    // Allocates the file (fallocate: blocks, not a sparse size) when it is
    // not there; with too little room nothing is left behind ("no_space").
    [[nodiscard]] Result<void> fill();
    // Removes the file; true when it held room.
    bool release();
    // True when the file is there, whole.
    [[nodiscard]] bool held() const;
    [[nodiscard]] const std::string& path() const { return path_; }

private:
    std::string path_;
    std::uint64_t bytes_ = 0;
};

}  // namespace sbx::sbxd
