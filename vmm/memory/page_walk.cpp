#include "vmm/memory/page_walk.hpp"

namespace sbx {

namespace {

constexpr std::uint64_t kPresent = 1ULL << 0;
constexpr std::uint64_t kWritable = 1ULL << 1;
constexpr std::uint64_t kUser = 1ULL << 2;
constexpr std::uint64_t kPageSize = 1ULL << 7;  // PS in a PDPTE or PDE
constexpr std::uint64_t kNoExecute = 1ULL << 63;
constexpr std::uint64_t kAddress = 0x000FFFFFFFFFF000ULL;  // bits 51:12

}  // namespace

Result<PageWalk> walk_long_mode(const GuestMemory& memory, std::uint64_t cr3, bool la57, std::uint64_t vaddr) {
    PageWalk walk;
    walk.writable = walk.user = walk.executable = true;
    std::uint64_t table = cr3 & kAddress;
    const int top = la57 ? 4 : 3;  // level 4 = PML5 ... level 0 = PT
    for (int level = top; level >= 0; --level) {
        const unsigned shift = 12 + 9 * static_cast<unsigned>(level);
        const std::uint64_t index = (vaddr >> shift) & 0x1ff;
        auto entry = memory.read_obj<std::uint64_t>(GuestAddress(table + index * 8));
        if (!entry) {
            return entry.error().context(fmt::format("the level-{} table at {:#x}", level + 1, table));
        }
        walk.entries.push_back(*entry);
        if ((*entry & kPresent) == 0) {
            walk.writable = walk.user = walk.executable = false;
            return walk;
        }
        walk.writable = walk.writable && (*entry & kWritable) != 0;
        walk.user = walk.user && (*entry & kUser) != 0;
        walk.executable = walk.executable && (*entry & kNoExecute) == 0;
        const bool leaf = level == 0 || ((level == 1 || level == 2) && (*entry & kPageSize) != 0);
        if (leaf) {
            walk.present = true;
            walk.page_size = 1ULL << shift;
            walk.physical = (*entry & kAddress & ~(walk.page_size - 1)) | (vaddr & (walk.page_size - 1));
            return walk;
        }
        table = *entry & kAddress;
    }
    return walk;  // not reached: level 0 is always a leaf
}

}  // namespace sbx
