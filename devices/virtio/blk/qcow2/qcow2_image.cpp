#include "devices/virtio/blk/qcow2/qcow2_image.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "base/log.hpp"

namespace sbx::qcow2 {
namespace {

Error corrupt(std::string message) {
    return Error{std::move(message), 0, std::string(kCodeCorrupt)};
}

// The releases a flush() would do that are allowed to wait before one is
// forced (each is one refcount update at the flush).
constexpr std::size_t kMaxPendingReleases = 4096;

Result<std::uint64_t> file_bytes_of(int fd) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        return sys_error("cannot stat");
    }
    if (S_ISREG(st.st_mode)) {
        return static_cast<std::uint64_t>(st.st_size);
    }
    const off_t end = ::lseek(fd, 0, SEEK_END);
    if (end < 0) {
        return sys_error("cannot find its size");
    }
    return static_cast<std::uint64_t>(end);
}

Result<void> pread_fd(int fd, std::uint64_t offset, std::span<std::uint8_t> out) {
    std::size_t done = 0;
    while (done < out.size()) {
        const ssize_t n =
            ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return sys_error("read of {} bytes at {} failed", out.size(), offset);
        }
        if (n == 0) {
            std::fill(out.begin() + static_cast<std::ptrdiff_t>(done), out.end(), 0);  // past the end: zeroes
            return ok();
        }
        done += static_cast<std::size_t>(n);
    }
    return ok();
}

// A raw backing file.
class RawDisk final : public DiskReader {
public:
    RawDisk(UniqueFd file, std::uint64_t size) : file_(std::move(file)), size_(size) {}
    Result<void> read(std::uint64_t offset, std::span<std::uint8_t> out) override {
        return pread_fd(file_.get(), offset, out);
    }
    [[nodiscard]] std::uint64_t size() const override { return size_; }
    Result<std::optional<Extent>> read_extent(std::uint64_t offset, std::uint64_t len) override {
        if (offset > size_ || len > size_ - offset) {
            return std::optional<Extent>{};
        }
        return std::optional<Extent>{Extent{file_.get(), offset}};
    }

private:
    UniqueFd file_;
    std::uint64_t size_;
};

}  // namespace

std::string resolve_backing(const std::string& image_path, const std::string& name) {
    if (name.starts_with('/')) {
        return name;
    }
    const auto slash = image_path.rfind('/');
    return slash == std::string::npos ? name : image_path.substr(0, slash + 1) + name;
}

Result<bool> has_qcow2_magic(int fd) {
    std::uint8_t magic[4] = {};
    const ssize_t n = ::pread(fd, magic, sizeof magic, 0);
    if (n < 0) {
        return sys_error("cannot read the first bytes");
    }
    return n == sizeof magic && load_be32(magic) == kMagic;
}

Result<std::unique_ptr<DiskReader>> open_backing(const std::string& path, BackingFormat format,
                                                 unsigned depth) {
    if (depth > kMaxChainDepth) {
        return make_coded_error(kCodeBacking, "the backing chain is deeper than {} at {}", kMaxChainDepth,
                                path);
    }
    // O_NONBLOCK: a name that is a FIFO must not hang the open.
    auto file = UniqueFd::open(path, O_RDONLY | O_NONBLOCK);
    if (!file) {
        return file.error().context("backing file").with_code(kCodeBacking);
    }
    struct stat st {};
    if (::fstat(file->get(), &st) != 0 || (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode))) {
        return make_coded_error(kCodeBacking, "backing file {} is not a regular file or block device", path);
    }
    if (format == BackingFormat::Probe) {
        auto magic = has_qcow2_magic(file->get());
        if (!magic) {
            return magic.error().context(fmt::format("backing file {}", path)).with_code(kCodeBacking);
        }
        format = *magic ? BackingFormat::Qcow2 : BackingFormat::Raw;
    }
    if (format == BackingFormat::Qcow2) {
        auto image = Image::open(std::move(*file), path, /*writable=*/false, BackingFiles::Follow, depth);
        if (!image) {
            return image.error().context(fmt::format("backing file {}", path));
        }
        return std::unique_ptr<DiskReader>(std::move(*image));
    }
    auto bytes = file_bytes_of(file->get());
    if (!bytes) {
        return bytes.error().context(fmt::format("backing file {}", path)).with_code(kCodeBacking);
    }
    return std::unique_ptr<DiskReader>(std::make_unique<RawDisk>(std::move(*file), *bytes));
}

Result<std::unique_ptr<Image>> Image::open(UniqueFd file, const std::string& path, bool writable,
                                           BackingFiles backing_files, unsigned depth) {
    auto fail = [&](const Error& e) { return e.context(fmt::format("qcow2 image {}", path)); };
    auto file_bytes = file_bytes_of(file.get());
    if (!file_bytes) {
        return fail(file_bytes.error());
    }
    // The header's fixed part says the cluster size; the header cluster
    // (extensions, backing name) is then read whole.
    std::vector<std::uint8_t> first(std::min<std::uint64_t>(*file_bytes, kHeaderV3Bytes));
    if (auto r = pread_fd(file.get(), 0, first); !r) {
        return fail(r.error());
    }
    if (first.size() == kHeaderV3Bytes) {
        const std::uint32_t bits = load_be32(&first[20]);
        if (bits >= kMinClusterBits && bits <= kMaxClusterBits) {
            first.resize(std::min<std::uint64_t>(*file_bytes, 1ULL << bits));
            if (auto r = pread_fd(file.get(), 0, first); !r) {
                return fail(r.error());
            }
        }
    }
    auto header = parse_header(first, *file_bytes);
    if (!header) {
        return fail(header.error());
    }
    std::unique_ptr<Image> image(new Image(std::move(file), path, std::move(*header), writable));
    if (auto r = image->load_tables(*file_bytes); !r) {
        return fail(r.error());
    }
    if (!image->header_.backing_name.empty() && backing_files == BackingFiles::Refuse) {
        return fail(make_coded_error(kCodeBacking,
                                     "it names a backing file ({}) and backing files are not allowed "
                                     "for this disk (--disk PATH,backing=on allows them)",
                                     image->header_.backing_name));
    }
    if (!image->header_.backing_name.empty()) {
        auto backing = open_backing(resolve_backing(path, image->header_.backing_name),
                                    image->header_.backing_format, depth + 1);
        if (!backing) {
            return fail(backing.error());
        }
        image->backing_ = std::move(*backing);
    }
    if (writable && image->header_.autoclear_features != 0) {
        std::uint8_t zero[8] = {};
        if (auto r = image->pwrite_all(kAutoclearOffset, zero); !r) {
            return fail(r.error());
        }
        image->header_.autoclear_features = 0;
    }
    image->next_free_ = (*file_bytes + image->cluster_size() - 1) & ~(image->cluster_size() - 1);
    return image;
}

Image::Image(UniqueFd file, std::string path, Header header, bool writable)
    : file_(std::move(file)), path_(std::move(path)), header_(std::move(header)), writable_(writable) {
    l2_cache_.reserve(kCachedTables);  // never reallocates: table() hands out pointers
    refblock_cache_.reserve(kCachedTables);
}

Image::~Image() {
    if (writable_) {
        if (auto r = flush(); !r) {
            log::warn("qcow2 image {}: final flush: {}", path_, r.error().to_string());
        }
    }
}

Result<void> Image::check_l2_entry(std::uint64_t entry, std::uint64_t file_bytes) const {
    if ((entry & kFlagCompressed) != 0) {
        return make_coded_error(kCodeUnsupported, "compressed clusters");
    }
    if ((entry & kL2Reserved) != 0) {
        return corrupt(fmt::format("L2 entry {:#x} sets reserved bits", entry));
    }
    const std::uint64_t host = entry & kOffsetMask;
    if ((host & (cluster_size() - 1)) != 0 || host >= std::max(file_bytes, next_free_)) {
        return corrupt(fmt::format("L2 entry {:#x} is not a cluster in the file", entry));
    }
    return ok();
}

// Reads the L1 and refcount tables and checks every entry of them and of
// every L2 table, each L2 table once (a table named twice is corrupt).
Result<void> Image::load_tables(std::uint64_t file_bytes) {
    const std::uint64_t cluster = cluster_size();
    std::vector<std::uint8_t> raw(std::uint64_t{header_.l1_size} * 8);
    if (auto r = pread_all(header_.l1_table_offset, raw); !r) {
        return r;
    }
    l1_.resize(header_.l1_size);
    std::vector<std::uint64_t> tables;
    for (std::size_t i = 0; i < l1_.size(); ++i) {
        const std::uint64_t entry = load_be64(&raw[i * 8]);
        const std::uint64_t offset = entry & kOffsetMask;
        if ((entry & kL1Reserved) != 0 || (offset & (cluster - 1)) != 0 ||
            (offset != 0 && (offset > file_bytes || cluster > file_bytes - offset))) {
            return corrupt(fmt::format("L1 entry {} ({:#x}) is not a cluster in the file", i, entry));
        }
        l1_[i] = entry;
        if (offset != 0) {
            tables.push_back(offset);
        }
    }
    std::sort(tables.begin(), tables.end());
    if (std::adjacent_find(tables.begin(), tables.end()) != tables.end()) {
        return corrupt("two L1 entries name the same L2 table");
    }
    std::vector<std::uint8_t> l2(cluster);
    for (std::uint64_t offset : tables) {
        if (auto r = pread_all(offset, l2); !r) {
            return r;
        }
        for (std::uint64_t i = 0; i < header_.l2_entries(); ++i) {
            if (auto r = check_l2_entry(load_be64(&l2[i * 8]), file_bytes); !r) {
                return r.error().context(fmt::format("L2 table at {:#x}", offset));
            }
        }
    }
    raw.resize(std::uint64_t{header_.refcount_table_clusters} * cluster);
    if (auto r = pread_all(header_.refcount_table_offset, raw); !r) {
        return r;
    }
    refcount_table_.resize(raw.size() / 8);
    for (std::size_t i = 0; i < refcount_table_.size(); ++i) {
        const std::uint64_t entry = load_be64(&raw[i * 8]);
        if ((entry & (cluster - 1)) != 0 ||
            (entry != 0 && (entry > file_bytes || cluster > file_bytes - entry))) {
            return corrupt(
                fmt::format("refcount table entry {} ({:#x}) is not a cluster in the file", i, entry));
        }
        refcount_table_[i] = entry;
    }
    scratch_.resize(cluster);
    return ok();
}

Result<void> Image::pread_all(std::uint64_t offset, std::span<std::uint8_t> out) const {
    return pread_fd(file_.get(), offset, out);
}

Result<void> Image::pwrite_all(std::uint64_t offset, std::span<const std::uint8_t> data) const {
    std::size_t done = 0;
    while (done < data.size()) {
        const ssize_t n =
            ::pwrite(file_.get(), data.data() + done, data.size() - done, static_cast<off_t>(offset + done));
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return sys_error("write of {} bytes at {} failed", data.size(), offset);
        }
        done += static_cast<std::size_t>(n);
    }
    return ok();
}

Result<Image::CachedTable*> Image::table(std::vector<CachedTable>& cache, std::uint64_t offset) {
    ++use_clock_;
    for (CachedTable& t : cache) {
        if (t.offset == offset) {
            t.last_use = use_clock_;
            return &t;
        }
    }
    CachedTable* slot = nullptr;
    if (cache.size() < kCachedTables) {
        slot = &cache.emplace_back();
    } else {
        // Entries are written through: evicting loses nothing.
        slot = &*std::min_element(cache.begin(), cache.end(), [](const CachedTable& a, const CachedTable& b) {
            return a.last_use < b.last_use;
        });
    }
    slot->offset = 0;
    slot->bytes.resize(cluster_size());
    if (auto r = pread_all(offset, slot->bytes); !r) {
        return r.error();
    }
    slot->offset = offset;
    slot->last_use = use_clock_;
    return slot;
}

Result<std::uint64_t> Image::l2_entry(std::uint64_t offset) {
    const std::uint64_t l1_index = offset >> (header_.cluster_bits * 2 - 3);
    const std::uint64_t l2_offset = l1_index < l1_.size() ? l1_[l1_index] & kOffsetMask : 0;
    if (l2_offset == 0) {
        return std::uint64_t{0};
    }
    auto t = table(l2_cache_, l2_offset);
    if (!t) {
        return t.error();
    }
    const std::uint64_t index = (offset >> header_.cluster_bits) & (header_.l2_entries() - 1);
    const std::uint64_t entry = load_be64(&(*t)->bytes[index * 8]);
    if ((entry & (kFlagCompressed | kL2Reserved)) != 0) {
        return corrupt(fmt::format("L2 entry {:#x} for offset {} changed under us", entry, offset));
    }
    return entry;
}

Result<void> Image::set_l2_entry(std::uint64_t offset, std::uint64_t entry) {
    const std::uint64_t l1_index = offset >> (header_.cluster_bits * 2 - 3);
    if (l1_index >= l1_.size()) {
        return corrupt(fmt::format("offset {} is past the L1 table", offset));
    }
    std::uint64_t l2_offset = l1_[l1_index] & kOffsetMask;
    const bool fresh = l2_offset == 0;
    if (fresh) {
        auto allocated = allocate_cluster();
        if (!allocated) {
            return allocated.error();
        }
        l2_offset = *allocated;
        std::fill(scratch_.begin(), scratch_.end(), 0);
        if (auto r = pwrite_all(l2_offset, scratch_); !r) {
            return r;
        }
    }
    auto t = table(l2_cache_, l2_offset);
    if (!t) {
        return t.error();
    }
    const std::uint64_t index = (offset >> header_.cluster_bits) & (header_.l2_entries() - 1);
    std::uint8_t* at = &(*t)->bytes[index * 8];
    store_be64(at, entry);
    if (auto r = pwrite_all(l2_offset + index * 8, std::span(at, 8)); !r) {
        return r;
    }
    if (fresh) {
        // The table is counted and filled before the L1 entry names it.
        std::uint8_t l1_entry[8];
        store_be64(l1_entry, l2_offset | kFlagCopied);
        if (auto r = pwrite_all(header_.l1_table_offset + l1_index * 8, l1_entry); !r) {
            return r;
        }
        l1_[l1_index] = l2_offset | kFlagCopied;
    }
    return ok();
}

Result<void> Image::read_cluster_piece(std::uint64_t entry, std::uint64_t offset,
                                       std::span<std::uint8_t> out) {
    const std::uint64_t host = entry & kOffsetMask;
    if ((entry & kFlagZero) != 0 || (host == 0 && !backing_)) {
        std::fill(out.begin(), out.end(), 0);
        return ok();
    }
    if (host != 0) {
        return pread_all(host + (offset & (cluster_size() - 1)), out);
    }
    return backing_->read(offset, out);
}

Result<void> Image::read(std::uint64_t offset, std::span<std::uint8_t> out) {
    // A backing image smaller than its overlay reads as zeroes past its end.
    const std::uint64_t inside = offset >= size() ? 0 : std::min<std::uint64_t>(out.size(), size() - offset);
    std::fill(out.begin() + static_cast<std::ptrdiff_t>(inside), out.end(), 0);
    std::uint64_t done = 0;
    while (done < inside) {
        const std::uint64_t at = offset + done;
        const std::uint64_t piece = std::min(inside - done, cluster_size() - (at & (cluster_size() - 1)));
        auto entry = l2_entry(at);
        if (!entry) {
            return entry.error();
        }
        if (auto r = read_cluster_piece(*entry, at, out.subspan(done, piece)); !r) {
            return r;
        }
        done += piece;
    }
    return ok();
}

// The clusters of [offset, offset + len) all allocated here back to back
// (for a write: owned, not zero), or, for a read, all unallocated here
// with the backing disk's extent for the range.
Result<std::optional<Extent>> Image::extent(std::uint64_t offset, std::uint64_t len, bool for_write) {
    const std::optional<Extent> none;
    if (len == 0 || offset > size() || len > size() - offset) {
        return none;
    }
    const std::uint64_t mask = cluster_size() - 1;
    std::uint64_t first_host = 0;
    for (std::uint64_t at = offset & ~mask; at < offset + len; at += cluster_size()) {
        auto entry = l2_entry(at);
        if (!entry) {
            return entry.error();
        }
        const std::uint64_t host = *entry & kOffsetMask;
        if ((*entry & kFlagZero) != 0 || (for_write && (host == 0 || (*entry & kFlagCopied) == 0))) {
            return none;
        }
        if (at == (offset & ~mask)) {
            first_host = host;
        } else if ((host == 0) != (first_host == 0) ||
                   (host != 0 && host != first_host + (at - (offset & ~mask)))) {
            return none;
        }
    }
    if (first_host != 0) {
        return std::optional<Extent>{Extent{file_.get(), first_host + (offset & mask)}};
    }
    return backing_ ? backing_->read_extent(offset, len) : none;
}

Result<std::optional<Extent>> Image::read_extent(std::uint64_t offset, std::uint64_t len) {
    return extent(offset, len, /*for_write=*/false);
}

Result<std::optional<Extent>> Image::write_extent(std::uint64_t offset, std::uint64_t len) {
    if (!writable_) {
        return std::optional<Extent>{};
    }
    return extent(offset, len, /*for_write=*/true);
}

// A piece of one cluster: written in place when this image owns the
// cluster alone (copied flag), else copied on write into a new cluster. A
// zero cluster this image owns (zero flag and a host cluster) is filled
// in place: the piece amid zeroes, then the flag cleared.
Result<void> Image::write_cluster_piece(std::uint64_t offset, std::span<const std::uint8_t> data) {
    auto entry = l2_entry(offset);
    if (!entry) {
        return entry.error();
    }
    const std::uint64_t host = *entry & kOffsetMask;
    const std::uint64_t within = offset & (cluster_size() - 1);
    const bool owned = host != 0 && (*entry & kFlagCopied) != 0;
    if (owned && (*entry & kFlagZero) == 0) {
        return pwrite_all(host + within, data);
    }
    std::span<const std::uint8_t> whole = data;
    if (data.size() != cluster_size()) {
        if (auto r = read_cluster_piece(*entry, offset - within, scratch_); !r) {
            return r;
        }
        std::memcpy(scratch_.data() + within, data.data(), data.size());
        whole = scratch_;
    }
    if (owned) {
        if (auto r = pwrite_all(host, whole); !r) {
            return r;
        }
        return set_l2_entry(offset - within, host | kFlagCopied);
    }
    auto allocated = allocate_cluster();
    if (!allocated) {
        return allocated.error();
    }
    if (auto r = pwrite_all(*allocated, whole); !r) {
        return r;
    }
    if (auto r = set_l2_entry(offset - within, *allocated | kFlagCopied); !r) {
        return r;
    }
    if (host != 0) {
        release_later(host);
    }
    return ok();
}

Result<void> Image::write(std::uint64_t offset, std::span<const std::uint8_t> data) {
    if (!writable_) {
        return make_error("qcow2 image {} is read-only", path_);
    }
    if (offset > size() || data.size() > size() - offset) {
        return make_error("write of {} bytes at {} is past the disk's {} bytes", data.size(), offset, size());
    }
    std::uint64_t done = 0;
    while (done < data.size()) {
        const std::uint64_t at = offset + done;
        if ((at & (cluster_size() - 1)) == 0 && data.size() - done >= cluster_size()) {
            auto run =
                write_cluster_run(at, data.subspan(done, (data.size() - done) & ~(cluster_size() - 1)));
            if (!run) {
                return run.error();
            }
            done += *run;
            continue;
        }
        const std::uint64_t piece =
            std::min(data.size() - done, cluster_size() - (at & (cluster_size() - 1)));
        if (auto r = write_cluster_piece(at, data.subspan(done, piece)); !r) {
            return r;
        }
        done += piece;
    }
    return pending_releases_.size() >= kMaxPendingReleases ? flush() : ok();
}

// A whole cluster reads as zeroes from here on: the zero flag where a
// backing file would show through, else no entry at all; without unmap, a
// cluster this image owns keeps its host cluster under the zero flag.
Result<void> Image::zero_cluster(std::uint64_t offset, bool unmap) {
    auto entry = l2_entry(offset);
    if (!entry) {
        return entry.error();
    }
    const std::uint64_t host = *entry & kOffsetMask;
    const bool keep = !unmap && host != 0 && (*entry & kFlagCopied) != 0;
    const std::uint64_t target = keep ? host | kFlagCopied | kFlagZero : backing_ ? kFlagZero : 0;
    if (*entry == target) {
        return ok();
    }
    if (auto r = set_l2_entry(offset, target); !r) {
        return r;
    }
    if (host != 0 && !keep) {
        release_later(host);
    }
    return ok();
}

Result<void> Image::zero_range(std::uint64_t offset, std::uint64_t len, bool partial_too, bool unmap) {
    if (!writable_) {
        return make_error("qcow2 image {} is read-only", path_);
    }
    if (offset > size() || len > size() - offset) {
        return make_error("range of {} bytes at {} is past the disk's {} bytes", len, offset, size());
    }
    std::uint64_t done = 0;
    while (done < len) {
        const std::uint64_t at = offset + done;
        const std::uint64_t piece = std::min(len - done, cluster_size() - (at & (cluster_size() - 1)));
        done += piece;
        if (piece == cluster_size()) {
            if (auto r = zero_cluster(at, unmap); !r) {
                return r;
            }
            continue;
        }
        if (!partial_too) {
            continue;
        }
        auto entry = l2_entry(at);
        if (!entry) {
            return entry.error();
        }
        if ((*entry & kFlagZero) != 0 || ((*entry & kOffsetMask) == 0 && !backing_)) {
            continue;  // already reads as zeroes
        }
        const std::vector<std::uint8_t> zeroes(piece);
        if (auto r = write_cluster_piece(at, zeroes); !r) {
            return r;
        }
    }
    return pending_releases_.size() >= kMaxPendingReleases ? flush() : ok();
}

Result<void> Image::write_zeroes(std::uint64_t offset, std::uint64_t len, bool unmap) {
    return zero_range(offset, len, /*partial_too=*/true, unmap);
}

Result<void> Image::discard(std::uint64_t offset, std::uint64_t len) {
    return zero_range(offset, len, /*partial_too=*/false, /*unmap=*/true);
}

Result<void> Image::flush() {
    if (!writable_) {
        return ok();
    }
    if (::fdatasync(file_.get()) != 0) {
        return sys_error("qcow2 image {}: fdatasync", path_);
    }
    return release_pending();
}

}  // namespace sbx::qcow2
