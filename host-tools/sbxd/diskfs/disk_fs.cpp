#include "host-tools/sbxd/diskfs/disk_fs.hpp"

extern "C" {
#include <et/com_err.h>  // no extern "C" of its own
}
#include <ext2fs/ext2fs.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <mutex>

#include "host-tools/sbxd/diskfs/disk_io.hpp"

namespace sbx::diskfs {

namespace {

constexpr std::size_t kChunk = 256 * 1024;

// An open ext2_file_t, closed on every path out.
class File {
public:
    File() = default;
    File(const File&) = delete;
    File& operator=(const File&) = delete;
    ~File() {
        if (file_ != nullptr) {
            ext2fs_file_close(file_);
        }
    }
    ext2_file_t* out() { return &file_; }
    ext2_file_t get() const { return file_; }

private:
    ext2_file_t file_ = nullptr;
};

// The inode as libext2fs reads it, with the large inode's extra fields
// (ext4 on-disk format, "Inode Table": i_extra_isize, i_mtime_extra).
struct Inode {
    ext2_inode_large raw{};
    ext2_inode* small() { return reinterpret_cast<ext2_inode*>(&raw); }
};

Kind kind_of(std::uint16_t mode) {
    if (LINUX_S_ISREG(mode)) {
        return Kind::File;
    }
    if (LINUX_S_ISDIR(mode)) {
        return Kind::Dir;
    }
    if (LINUX_S_ISLNK(mode)) {
        return Kind::Symlink;
    }
    return Kind::Other;
}

// i_mtime is signed 32-bit seconds; the low two bits of i_mtime_extra
// extend the epoch when the inode is large enough to hold it.
std::int64_t mtime_of(const ext2_inode_large& inode, int inode_size) {
    std::int64_t seconds = static_cast<std::int32_t>(inode.i_mtime);
    constexpr int kExtraEnd = offsetof(ext2_inode_large, i_mtime_extra) + sizeof(inode.i_mtime_extra);
    if (inode_size > EXT2_GOOD_OLD_INODE_SIZE && EXT2_GOOD_OLD_INODE_SIZE + inode.i_extra_isize >= kExtraEnd) {
        seconds += static_cast<std::int64_t>(inode.i_mtime_extra & EXT4_EPOCH_MASK) << 32;
    }
    return seconds;
}

// Splits an absolute path into its names ("" and "." dropped).
std::vector<std::string> components(std::string_view path) {
    std::vector<std::string> out;
    std::size_t i = 0;
    while (i < path.size()) {
        std::size_t j = path.find('/', i);
        if (j == std::string_view::npos) {
            j = path.size();
        }
        std::string_view name = path.substr(i, j - i);
        if (!name.empty() && name != ".") {
            out.emplace_back(name);
        }
        i = j + 1;
    }
    return out;
}

Result<void> check_path(std::string_view path) {
    if (path.empty() || path.front() != '/') {
        return make_coded_error(code::kBadPath, "'{}' is not an absolute guest path", path);
    }
    if (path.size() > kMaxPath || path.find('\0') != std::string_view::npos) {
        return make_coded_error(code::kBadPath, "a guest path must be under {} bytes without NUL", kMaxPath);
    }
    return {};
}

// The superblock's geometry before libext2fs sizes its tables by it (ext4
// on-disk format, "The Super Block"): a block size libext2fs handles, and
// a file system no larger than the disk (a grown disk may be larger).
Result<void> check_geometry(const std::array<std::uint8_t, 2048>& head, std::uint64_t disk_bytes) {
    static_assert(sizeof(ext2_super_block) == 1024);
    ext2_super_block sb{};
    std::memcpy(&sb, &head[1024], sizeof sb);  // little-endian on disk and here (x86-64)
    if (sb.s_log_block_size > EXT2_MAX_BLOCK_LOG_SIZE - EXT2_MIN_BLOCK_LOG_SIZE) {
        return make_coded_error(code::kCorrupt, "the superblock gives blocks of 2^{} KiB", sb.s_log_block_size);
    }
    const std::uint64_t block = std::uint64_t{EXT2_MIN_BLOCK_SIZE} << sb.s_log_block_size;
    std::uint64_t blocks = sb.s_blocks_count;
    if ((sb.s_feature_incompat & EXT4_FEATURE_INCOMPAT_64BIT) != 0) {
        blocks |= std::uint64_t{sb.s_blocks_count_hi} << 32;
    }
    if (blocks == 0 || blocks > disk_bytes / block || sb.s_blocks_per_group == 0 || sb.s_inodes_per_group == 0) {
        return make_coded_error(code::kCorrupt,
                                "the superblock's {} blocks of {} bytes ({} per group) do not fit the {}-byte disk",
                                blocks, block, sb.s_blocks_per_group, disk_bytes);
    }
    return {};
}

// What is at the start of the disk: ext2/3/4 (superblock at 1024, s_magic
// at 56 in it), or a partition table (MBR boot signature 0x55AA at 510,
// GPT "EFI PART" at LBA 1), or neither.
Result<void> check_layout(qcow2::DiskReader& disk) {
    std::array<std::uint8_t, 2048> head{};
    if (disk.size() < head.size()) {
        return make_coded_error(code::kUnsupported, "the disk is {} bytes, too small for a file system", disk.size());
    }
    if (auto r = disk.read(0, head); !r) {
        return r.error().context("reading the disk's first blocks").with_code(code::kIo);
    }
    if ((head[1024 + 56] | head[1024 + 57] << 8) == EXT2_SUPER_MAGIC) {
        return check_geometry(head, disk.size());
    }
    if (std::memcmp(&head[512], "EFI PART", 8) == 0 || (head[510] == 0x55 && head[511] == 0xaa)) {
        return make_coded_error(code::kUnsupported,
                                "the disk has a partition table; only a whole-disk ext2/3/4 file system "
                                "(the images/build rootfs layout) can be read without resuming the sandbox");
    }
    return make_coded_error(code::kUnsupported, "the disk holds no ext2/3/4 file system");
}

}  // namespace

std::string_view kind_name(Kind kind) {
    switch (kind) {
        case Kind::File:
            return "file";
        case Kind::Dir:
            return "dir";
        case Kind::Symlink:
            return "symlink";
        case Kind::Other:
            break;
    }
    return "other";
}

void DiskFs::Closer::operator()(struct_ext2_filsys* fs) const { ext2fs_close_free(&fs); }

DiskFs::DiskFs(std::unique_ptr<DiskChannel> channel, std::unique_ptr<struct_ext2_filsys, Closer> fs)
    : channel_(std::move(channel)), fs_(std::move(fs)) {}

DiskFs::~DiskFs() { fs_.reset(); }  // before the channel it reads through

Result<std::unique_ptr<DiskFs>> DiskFs::open(const std::string& path) {
    auto disk = qcow2::open_backing(path, qcow2::BackingFormat::Probe, 0);
    if (!disk) {
        return disk.error().context("opening the disk").with_code(code::kIo);
    }
    return open(std::move(*disk));
}

Result<std::unique_ptr<DiskFs>> DiskFs::open(std::unique_ptr<qcow2::DiskReader> disk) {
    // com_err's table list is the library's; adding ours twice is harmless
    // but not thread-safe.
    static std::once_flag error_table;
    std::call_once(error_table, [] { initialize_ext2_error_table(); });

    if (auto r = check_layout(*disk); !r) {
        return r.error();
    }
    auto channel = std::make_unique<DiskChannel>(std::move(disk));
    ext2_filsys raw = nullptr;
    const errcode_t err =
        ext2fs_open2(channel->name().c_str(), nullptr, EXT2_FLAG_64BITS, 0, 0, channel->manager(), &raw);
    std::unique_ptr<struct_ext2_filsys, Closer> fs(raw);
    if (err != 0) {
        if (auto disk_error = channel->take_error()) {
            return disk_error->context("opening the file system").with_code(code::kIo);
        }
        return make_coded_error(code::kCorrupt, "the disk's file system cannot be opened: {}", error_message(err));
    }
    if (ext2fs_has_feature_journal_needs_recovery(fs->super)) {
        return make_coded_error(code::kNeedsRecovery,
                                "the disk's journal holds changes not yet in place (the guest did not freeze "
                                "its file systems before it stopped); resume the sandbox to read its files");
    }
    if (ext2fs_has_feature_journal_dev(fs->super)) {
        return make_coded_error(code::kUnsupported, "the disk is an external journal, not a file system");
    }
    return std::unique_ptr<DiskFs>(new DiskFs(std::move(channel), std::move(fs)));
}

Error DiskFs::ext2_error(long err, std::string_view what) {
    if (auto disk_error = channel_->take_error()) {
        return disk_error->context(std::string(what)).with_code(code::kIo);
    }
    if (err == EXT2_ET_FILE_NOT_FOUND) {
        return make_coded_error(code::kNotFound, "{}: no such file or directory", what);
    }
    return make_coded_error(code::kCorrupt, "{}: {}", what, error_message(err));
}

Result<Stat> DiskFs::stat_inode(std::uint32_t ino, bool with_target, std::string_view path) {
    Inode inode;
    if (errcode_t err = ext2fs_read_inode_full(fs_.get(), ino, inode.small(), sizeof(inode.raw)); err != 0) {
        return ext2_error(err, path);
    }
    Stat out;
    out.kind = kind_of(inode.raw.i_mode);
    out.size = EXT2_I_SIZE(&inode.raw);
    out.mode = inode.raw.i_mode & 07777;
    out.mtime = mtime_of(inode.raw, EXT2_INODE_SIZE(fs_->super));
    out.uid = inode_uid(inode.raw);
    out.gid = inode_gid(inode.raw);
    out.ino = ino;
    if (with_target && out.kind == Kind::Symlink) {
        auto target = read_link(ino, path);
        if (!target) {
            return target.error();
        }
        out.target = std::move(*target);
    }
    return out;
}

Result<std::string> DiskFs::read_link(std::uint32_t ino, std::string_view path) {
    Inode inode;
    if (errcode_t err = ext2fs_read_inode_full(fs_.get(), ino, inode.small(), sizeof(inode.raw)); err != 0) {
        return ext2_error(err, path);
    }
    const std::uint64_t size = EXT2_I_SIZE(&inode.raw);
    if (size == 0 || size >= kMaxPath) {
        return make_coded_error(code::kCorrupt, "{}: a symlink of {} bytes", path, size);
    }
    std::string target(size, '\0');
    if (ext2fs_is_fast_symlink(inode.small())) {
        // The target inside i_block (ext4 on-disk format, "Symbolic Links").
        if (size >= sizeof(inode.raw.i_block)) {
            return make_coded_error(code::kCorrupt, "{}: a fast symlink of {} bytes", path, size);
        }
        std::memcpy(target.data(), inode.raw.i_block, size);
    } else {
        File file;
        if (errcode_t err = ext2fs_file_open2(fs_.get(), ino, inode.small(), 0, file.out()); err != 0) {
            return ext2_error(err, path);
        }
        unsigned int got = 0;
        if (errcode_t err = ext2fs_file_read(file.get(), target.data(), static_cast<unsigned>(size), &got);
            err != 0) {
            return ext2_error(err, path);
        }
        if (got != size) {
            return make_coded_error(code::kCorrupt, "{}: a symlink shorter than its size", path);
        }
    }
    if (target.find('\0') != std::string::npos) {
        return make_coded_error(code::kCorrupt, "{}: a symlink target with a NUL", path);
    }
    return target;
}

Result<void> DiskFs::check_dir(std::uint32_t ino, std::string_view path) {
    Inode inode;
    if (errcode_t err = ext2fs_read_inode_full(fs_.get(), ino, inode.small(), sizeof(inode.raw)); err != 0) {
        return ext2_error(err, path);
    }
    if (!LINUX_S_ISDIR(inode.raw.i_mode)) {
        return make_coded_error(code::kNotADirectory, "{} is not a directory", path);
    }
    if (EXT2_I_SIZE(&inode.raw) > kMaxDirBytes) {
        return make_coded_error(code::kLimit, "{} is a directory of {} bytes, over {}", path,
                                EXT2_I_SIZE(&inode.raw), kMaxDirBytes);
    }
    return {};
}

Result<void> DiskFs::scan_dir(std::uint32_t dir, std::string_view path,
                              const std::function<bool(std::string_view, std::uint32_t)>& each) {
    if (auto r = check_dir(dir, path); !r) {
        return r.error();
    }
    struct Scan {
        const std::function<bool(std::string_view, std::uint32_t)>* each;
        std::size_t records = 0;
        bool over = false;
    } scan{&each};
    auto visit = [](ext2_ino_t, int, ext2_dir_entry* entry, int, int, char*, void* data) -> int {
        auto* sc = static_cast<Scan*>(data);
        if (++sc->records > kMaxDirRecords) {
            sc->over = true;
            return DIRENT_ABORT;
        }
        if (entry->inode == 0) {
            return 0;
        }
        const std::string_view name(entry->name, static_cast<std::size_t>(ext2fs_dirent_name_len(entry)));
        return (*sc->each)(name, entry->inode) ? 0 : DIRENT_ABORT;
    };
    // Empty records too, so that every block read is counted.
    if (errcode_t err = ext2fs_dir_iterate2(fs_.get(), dir, DIRENT_FLAG_INCLUDE_EMPTY, nullptr, visit, &scan);
        err != 0) {
        return ext2_error(err, path);
    }
    if (scan.over) {
        return make_coded_error(code::kLimit, "{}: a directory of more than {} records", path, kMaxDirRecords);
    }
    return {};
}

Result<std::uint32_t> DiskFs::lookup(std::uint32_t dir, std::string_view name, std::string_view path) {
    if (name.size() > kMaxName) {
        return make_coded_error(code::kBadPath, "a name in {} is over {} bytes", path, kMaxName);
    }
    ext2_ino_t ino = 0;
    auto scanned = scan_dir(dir, path, [&](std::string_view entry, std::uint32_t entry_ino) {
        if (entry != name) {
            return true;
        }
        ino = entry_ino;
        return false;
    });
    if (!scanned) {
        return scanned.error();
    }
    if (ino == 0) {
        return make_coded_error(code::kNotFound, "{}: no such file or directory", path);
    }
    if (ino < EXT2_ROOT_INO || ino > fs_->super->s_inodes_count) {
        return make_coded_error(code::kCorrupt, "{}: a directory entry names inode {}", path, ino);
    }
    return ino;
}

Result<std::uint32_t> DiskFs::resolve(std::string_view path, bool follow) {
    if (auto r = check_path(path); !r) {
        return r.error();
    }
    // Names still to walk, the next at the back.
    std::vector<std::string> pending = components(path);
    std::reverse(pending.begin(), pending.end());
    ext2_ino_t current = EXT2_ROOT_INO;
    unsigned follows = 0;
    while (!pending.empty()) {
        const std::string name = std::move(pending.back());
        pending.pop_back();
        // The directory's own ".." entry: the root's is the root.
        auto next = lookup(current, name, path);
        if (!next) {
            return next.error();
        }
        Inode inode;
        if (errcode_t err = ext2fs_read_inode_full(fs_.get(), *next, inode.small(), sizeof(inode.raw)); err != 0) {
            return ext2_error(err, path);
        }
        if (!LINUX_S_ISLNK(inode.raw.i_mode) || (pending.empty() && !follow)) {
            current = *next;
            continue;
        }
        if (++follows > kMaxSymlinkFollows) {
            return make_coded_error(code::kSymlinkLoop, "{}: more than {} symlinks", path, kMaxSymlinkFollows);
        }
        auto target = read_link(*next, path);
        if (!target) {
            return target.error();
        }
        // An absolute target starts again from the guest's root, never the
        // host's; a relative one from the directory holding the link.
        if (target->front() == '/') {
            current = EXT2_ROOT_INO;
        }
        auto names = components(*target);
        pending.insert(pending.end(), names.rbegin(), names.rend());
    }
    return current;
}

Result<Stat> DiskFs::stat(std::string_view path, bool follow) {
    auto ino = resolve(path, follow);
    if (!ino) {
        return ino.error();
    }
    return stat_inode(*ino, true, path);
}

Result<std::vector<DirEntry>> DiskFs::list(std::string_view path) {
    auto ino = resolve(path, true);
    if (!ino) {
        return ino.error();
    }
    return list_at(*ino, path);
}

Result<void> DiskFs::check_ino(std::uint32_t ino, std::string_view path) const {
    if (ino == 0 || ino > fs_->super->s_inodes_count) {
        return make_coded_error(code::kCorrupt, "{}: inode {} is out of range", path, ino);
    }
    return {};
}

Result<Stat> DiskFs::stat_at(std::uint32_t ino, std::string_view path) {
    if (auto r = check_ino(ino, path); !r) {
        return r.error();
    }
    return stat_inode(ino, true, path);
}

Result<std::vector<DirEntry>> DiskFs::list_at(std::uint32_t ino, std::string_view path) {
    if (auto r = check_ino(ino, path); !r) {
        return r.error();
    }
    std::vector<std::pair<std::string, ext2_ino_t>> names;
    bool over = false;
    auto scanned = scan_dir(ino, path, [&](std::string_view name, std::uint32_t entry_ino) {
        if (name == "." || name == "..") {
            return true;
        }
        if (names.size() >= kMaxListEntries) {
            over = true;
            return false;
        }
        names.emplace_back(std::string(name), entry_ino);
        return true;
    });
    if (!scanned) {
        return scanned.error();
    }
    if (over) {
        return make_coded_error(code::kLimit, "{} has more than {} entries", path, kMaxListEntries);
    }
    std::sort(names.begin(), names.end());
    std::vector<DirEntry> out;
    out.reserve(names.size());
    for (auto& [name, entry_ino] : names) {
        if (entry_ino > fs_->super->s_inodes_count) {
            return make_coded_error(code::kCorrupt, "{}: entry {} names inode {}", path, name, entry_ino);
        }
        auto st = stat_inode(entry_ino, false, path);
        if (!st) {
            return st.error();
        }
        out.push_back(DirEntry{std::move(name), std::move(*st)});
    }
    return out;
}

Result<std::uint64_t> DiskFs::read(std::string_view path, const ChunkSink& sink) {
    auto ino = resolve(path, true);
    if (!ino) {
        return ino.error();
    }
    return read_at(*ino, path, sink);
}

Result<std::uint64_t> DiskFs::read_at(std::uint32_t ino, std::string_view path, const ChunkSink& sink) {
    if (auto r = check_ino(ino, path); !r) {
        return r.error();
    }
    Inode inode;
    if (errcode_t err = ext2fs_read_inode_full(fs_.get(), ino, inode.small(), sizeof(inode.raw)); err != 0) {
        return ext2_error(err, path);
    }
    if (!LINUX_S_ISREG(inode.raw.i_mode)) {
        return make_coded_error(code::kNotAFile, "{} is a {}, not a regular file", path,
                                kind_of(inode.raw.i_mode) == Kind::Dir ? "directory" : kind_name(kind_of(inode.raw.i_mode)));
    }
    File file;
    if (errcode_t err = ext2fs_file_open2(fs_.get(), ino, inode.small(), 0, file.out()); err != 0) {
        return ext2_error(err, path);
    }
    const std::uint64_t size = EXT2_I_SIZE(&inode.raw);
    std::vector<std::uint8_t> buffer(kChunk);
    std::uint64_t done = 0;
    while (done < size) {
        const auto want = static_cast<unsigned>(std::min<std::uint64_t>(kChunk, size - done));
        unsigned int got = 0;
        if (errcode_t err = ext2fs_file_read(file.get(), buffer.data(), want, &got); err != 0) {
            return ext2_error(err, path);
        }
        if (got == 0) {
            return make_coded_error(code::kCorrupt, "{}: the file ends at {} of its {} bytes", path, done, size);
        }
        if (auto r = sink(std::span(buffer.data(), got)); !r) {
            return r.error();
        }
        done += got;
    }
    return done;
}

}  // namespace sbx::diskfs
