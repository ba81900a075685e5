#include "host-tools/sbxd/vmm/cid_allocator.hpp"

namespace sbx::sbxd {

std::optional<std::uint32_t> CidAllocator::allocate() {
    std::lock_guard lock(mutex_);
    std::uint32_t cid = kFirstGuestCid;
    for (std::uint32_t taken : used_) {  // ascending: the first gap
        if (taken != cid) {
            break;
        }
        ++cid;
    }
    if (cid >= limit_) {
        return std::nullopt;
    }
    used_.insert(cid);
    return cid;
}

bool CidAllocator::reserve(std::uint32_t cid) {
    std::lock_guard lock(mutex_);
    return cid >= kFirstGuestCid && used_.insert(cid).second;
}

void CidAllocator::release(std::uint32_t cid) {
    std::lock_guard lock(mutex_);
    used_.erase(cid);
}

}  // namespace sbx::sbxd
