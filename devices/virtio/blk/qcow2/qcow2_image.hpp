// A qcow2 v3 image with its backing chain: guest offsets mapped through
// the L1 and L2 tables to host clusters, unallocated clusters read from the
// backing file (raw or qcow2, several deep), zero clusters, allocation with
// 16-bit refcounts kept exact. Synchronous pread/pwrite: the caller (the
// virtio-blk device thread) owns the image and serializes calls.
//
// Crash consistency (a process killed at any point): every metadata update
// is written through at once, in the order data, refcount, L2 entry, L1
// entry, so a killed writer leaves at worst clusters counted but not yet
// referenced (leaks). Clusters released by discard or overwrite are
// decremented only at the next flush(), after an fdatasync made the L2
// entries that dropped them durable, so even a power loss leaves leaks,
// never a referenced cluster counted zero. Allocation appends at the end
// of the file; released clusters are punched out, not reused.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/result.hpp"
#include "base/unique_fd.hpp"
#include "devices/virtio/blk/qcow2/qcow2_format.hpp"

namespace sbx::qcow2 {

inline constexpr unsigned kMaxChainDepth = 16;

// A byte range of the disk that is one contiguous range of one file, for
// the caller to transfer itself (with io_uring).
struct Extent {
    int fd = -1;
    std::uint64_t offset = 0;
};

// A disk read-only in a backing chain: a raw file or a qcow2 image. Reads
// past its end return zeroes (a backing file may be smaller than the disk).
class DiskReader {
public:
    virtual ~DiskReader() = default;
    [[nodiscard]] virtual Result<void> read(std::uint64_t offset, std::span<std::uint8_t> out) = 0;
    [[nodiscard]] virtual std::uint64_t size() const = 0;
    // Where [offset, offset + len) reads from when that is one contiguous
    // range of one file; nullopt when it is not (zeroes, clusters apart,
    // past the end): then read() it.
    [[nodiscard]] virtual Result<std::optional<Extent>> read_extent(std::uint64_t offset,
                                                                    std::uint64_t len) = 0;
};

// Opens `path` read-only as a backing disk: `format` Probe looks at the magic.
[[nodiscard]] Result<std::unique_ptr<DiskReader>> open_backing(const std::string& path, BackingFormat format,
                                                               unsigned depth);

// Resolves a backing name as QEMU does: relative to the image's directory.
[[nodiscard]] std::string resolve_backing(const std::string& image_path, const std::string& name);

// Whether the file starts with the qcow2 magic.
[[nodiscard]] Result<bool> has_qcow2_magic(int fd);

// Whether an image may name a backing file. The header's backing name is
// any host path (qcow2.txt: backing_file_offset), so an image from someone
// else would otherwise read any file the VMM can open; like Cloud
// Hypervisor's backing_files=off, that is refused unless the caller made
// or vetted the image (sbxd's overlays on its own images and templates).
enum class BackingFiles { Refuse, Follow };

class Image final : public DiskReader {
public:
    // Opens and checks an image: the header, every L1 and L2 entry and the
    // refcount table (bounds, alignment, reserved bits, compressed clusters
    // refused), then, with BackingFiles::Follow, its backing chain (an image
    // naming one is refused with kCodeBacking otherwise). A writable open
    // clears autoclear feature bits we do not maintain (qcow2.txt:
    // autoclear_features).
    static Result<std::unique_ptr<Image>> open(UniqueFd file, const std::string& path, bool writable,
                                               BackingFiles backing = BackingFiles::Refuse,
                                               unsigned depth = 0);
    ~Image() override;
    Image(const Image&) = delete;
    Image& operator=(const Image&) = delete;
    Image(Image&&) = delete;
    Image& operator=(Image&&) = delete;

    [[nodiscard]] Result<void> read(std::uint64_t offset, std::span<std::uint8_t> out) override;
    [[nodiscard]] std::uint64_t size() const override { return header_.size; }
    [[nodiscard]] Result<std::optional<Extent>> read_extent(std::uint64_t offset, std::uint64_t len) override;
    // Where a write of [offset, offset + len) may go in place: clusters this
    // image owns, allocated back to back and not zero clusters. nullopt
    // otherwise: then write() it (allocation and metadata).
    [[nodiscard]] Result<std::optional<Extent>> write_extent(std::uint64_t offset, std::uint64_t len);

    // Offsets and lengths are bytes and must lie inside the disk.
    [[nodiscard]] Result<void> write(std::uint64_t offset, std::span<const std::uint8_t> data);
    // Whole clusters in the range become zero clusters (or unallocated when
    // nothing backs them) and, with `unmap`, release their host cluster;
    // without, a cluster this image owns stays allocated with the zero flag
    // (virtio 1.2 §5.2.6.2: only an unmap request may deallocate). Partial
    // clusters at the ends are written with zeroes.
    [[nodiscard]] Result<void> write_zeroes(std::uint64_t offset, std::uint64_t len, bool unmap = true);
    // Whole clusters as write_zeroes; partial ones are left as they are
    // (a discard is a hint, virtio 1.2 §5.2.6.2).
    [[nodiscard]] Result<void> discard(std::uint64_t offset, std::uint64_t len);
    // Makes everything written durable (fdatasync), then releases the
    // clusters dropped since the last flush.
    [[nodiscard]] Result<void> flush();

    [[nodiscard]] const Header& header() const { return header_; }
    [[nodiscard]] std::uint64_t cluster_size() const { return header_.cluster_size(); }
    [[nodiscard]] const DiskReader* backing() const { return backing_.get(); }
    // Clusters released and waiting for the next flush.
    [[nodiscard]] std::size_t pending_releases() const { return pending_releases_.size(); }

private:
    // One cached metadata cluster (an L2 table or a refcount block), kept
    // as its on-disk big-endian bytes; updates are written through.
    struct CachedTable {
        std::uint64_t offset = 0;
        std::uint64_t last_use = 0;
        std::vector<std::uint8_t> bytes;
    };
    static constexpr std::size_t kCachedTables = 32;

    Image(UniqueFd file, std::string path, Header header, bool writable);
    [[nodiscard]] Result<void> load_tables(std::uint64_t file_bytes);
    [[nodiscard]] Result<void> check_l2_entry(std::uint64_t entry, std::uint64_t file_bytes) const;

    [[nodiscard]] Result<CachedTable*> table(std::vector<CachedTable>& cache, std::uint64_t offset);
    // The L2 entry of the cluster at guest `offset` (0 when its L1 entry is 0).
    [[nodiscard]] Result<std::uint64_t> l2_entry(std::uint64_t offset);
    // Writes `entry` for the cluster at guest `offset`, allocating its L2
    // table first when the L1 entry is 0.
    [[nodiscard]] Result<void> set_l2_entry(std::uint64_t offset, std::uint64_t entry);
    [[nodiscard]] Result<std::optional<Extent>> extent(std::uint64_t offset, std::uint64_t len,
                                                       bool for_write);
    [[nodiscard]] Result<void> read_cluster_piece(std::uint64_t entry, std::uint64_t offset,
                                                  std::span<std::uint8_t> out);
    [[nodiscard]] Result<void> write_cluster_piece(std::uint64_t offset, std::span<const std::uint8_t> data);
    // Whole clusters from `offset` (qcow2_cluster_run.cpp): as many as go in one
    // pwrite (in place, or newly allocated back to back), with their
    // refcounts and L2 entries written in one pwrite each. Returns the bytes
    // written, at least one cluster.
    [[nodiscard]] Result<std::uint64_t> write_cluster_run(std::uint64_t offset,
                                                          std::span<const std::uint8_t> data);
    // Up to `count` new clusters back to back with refcount 1: the first
    // host offset and how many.
    [[nodiscard]] Result<std::pair<std::uint64_t, std::uint64_t>> allocate_run(std::uint64_t count);
    [[nodiscard]] Result<void> zero_cluster(std::uint64_t offset, bool unmap);
    [[nodiscard]] Result<void> zero_range(std::uint64_t offset, std::uint64_t len, bool partial_too,
                                          bool unmap);

    // Refcounts (refcount.cpp).
    [[nodiscard]] Result<std::uint16_t> refcount(std::uint64_t host_offset);
    [[nodiscard]] Result<void> set_refcount(std::uint64_t host_offset, std::uint16_t value);
    // A new cluster at the end of the file with refcount 1 (its refcount
    // block allocated first when missing).
    [[nodiscard]] Result<std::uint64_t> allocate_cluster();
    void release_later(std::uint64_t entry);
    [[nodiscard]] Result<void> release_pending();

    [[nodiscard]] Result<void> pread_all(std::uint64_t offset, std::span<std::uint8_t> out) const;
    [[nodiscard]] Result<void> pwrite_all(std::uint64_t offset, std::span<const std::uint8_t> data) const;

    UniqueFd file_;
    std::string path_;
    Header header_;
    bool writable_;
    std::unique_ptr<DiskReader> backing_;
    std::vector<std::uint64_t> l1_;              // host order, as on disk
    std::vector<std::uint64_t> refcount_table_;  // host order, as on disk
    std::vector<CachedTable> l2_cache_;
    std::vector<CachedTable> refblock_cache_;
    std::uint64_t use_clock_ = 0;
    std::uint64_t next_free_ = 0;                  // where the next cluster is allocated
    std::vector<std::uint64_t> pending_releases_;  // host offsets dropped since the last flush
    std::vector<std::uint8_t> scratch_;            // one cluster, for copy-on-write
};

}  // namespace sbx::qcow2
