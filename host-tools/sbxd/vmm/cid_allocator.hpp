// vsock context ids for the running VMMs (virtio 1.2 §5.10.4: 0-2 are
// reserved, the host is 2): each live VMM has one no other live VMM has.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <set>

namespace sbx::sbxd {

inline constexpr std::uint32_t kFirstGuestCid = 3;

class CidAllocator {
public:
    explicit CidAllocator(std::uint32_t limit = 1U << 20) : limit_(limit) {}
    // The lowest free CID; nullopt when all below the limit are taken.
    [[nodiscard]] std::optional<std::uint32_t> allocate();
    // Marks a CID in use (a VMM adopted after a restart); false if it was.
    bool reserve(std::uint32_t cid);
    void release(std::uint32_t cid);

private:
    std::mutex mutex_;
    std::set<std::uint32_t> used_;
    std::uint32_t limit_;
};

}  // namespace sbx::sbxd
