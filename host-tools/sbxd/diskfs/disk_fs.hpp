// A stopped sandbox's root file system read from its disk, read-only:
// libext2fs over the qcow2 chain (disk_io.hpp), for the file routes
// (docs/api.md, "Files") while no VMM runs. The disk is the guest's, so
// untrusted: every failure is a coded error, and every walk is bounded
// (symlink follows, path and target lengths, directory sizes and entries).
//
// Layout: what images/build rootfs ships, one ext2/3/4 file system on the
// whole disk (mkfs.ext4 -d on the image file, root=/dev/vda). A partition
// table (MBR, GPT) or anything else is refused with kUnsupported.
//
// Paths are absolute guest paths resolved inside this file system only:
// "..", relative and absolute symlinks (the latter from the guest's root)
// never leave it. One DiskFs serves one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"
#include "devices/virtio/blk/qcow2/qcow2_image.hpp"

struct struct_ext2_filsys;

namespace sbx::diskfs {

namespace code {
inline constexpr std::string_view kNotFound = "not_found";
inline constexpr std::string_view kNotADirectory = "not_a_directory";
inline constexpr std::string_view kNotAFile = "not_a_file";
inline constexpr std::string_view kBadPath = "bad_path";           // not absolute, too long, a NUL
inline constexpr std::string_view kSymlinkLoop = "symlink_loop";   // over kMaxSymlinkFollows
inline constexpr std::string_view kLimit = "limit";                // a directory over the bounds
inline constexpr std::string_view kCorrupt = "corrupt_disk";       // libext2fs refused what it read
inline constexpr std::string_view kUnsupported = "unsupported_disk";  // a partition table, no ext4
// The journal holds changes not yet written in place (the guest's file
// systems were not frozen before it stopped): reading past them would show
// an older tree, so it is refused.
inline constexpr std::string_view kNeedsRecovery = "needs_recovery";
inline constexpr std::string_view kIo = "io_error";  // the qcow2 chain could not be read
}  // namespace code

// Linux's MAXSYMLINKS and PATH_MAX.
inline constexpr unsigned kMaxSymlinkFollows = 40;
inline constexpr std::size_t kMaxPath = 4096;
inline constexpr std::size_t kMaxName = 255;
// As the agent's list (guest-agent/files/path_ops.cpp).
inline constexpr std::size_t kMaxListEntries = 100'000;
// A directory larger than this is not read (a real one of kMaxListEntries
// long names is under 30 MiB).
inline constexpr std::uint64_t kMaxDirBytes = std::uint64_t{256} << 20;
// Records (entries, deleted and empty ones too) read from one directory
// before giving up: a crafted one may map many blocks whatever its size.
inline constexpr std::size_t kMaxDirRecords = 4 * kMaxListEntries;

enum class Kind { File, Dir, Symlink, Other };
[[nodiscard]] std::string_view kind_name(Kind kind);  // file, dir, symlink, other

struct Stat {
    Kind kind = Kind::Other;
    std::uint64_t size = 0;
    std::uint32_t mode = 0;  // permission bits (07777)
    std::int64_t mtime = 0;  // seconds since the epoch
    std::uint32_t uid = 0;
    std::uint32_t gid = 0;
    std::string target;     // a symlink's
    std::uint32_t ino = 0;  // the inode (a walk of the tree tells a directory seen before)
};

struct DirEntry {
    std::string name;
    Stat stat;  // of the entry itself, not followed; no target
};

using ChunkSink = std::function<Result<void>(std::span<const std::uint8_t>)>;

class DiskChannel;

class DiskFs {
public:
    // The qcow2 image sbxd made (its backing chain followed: sbxd's own
    // overlays and layers) or a raw disk, opened read-only.
    [[nodiscard]] static Result<std::unique_ptr<DiskFs>> open(const std::string& path);
    [[nodiscard]] static Result<std::unique_ptr<DiskFs>> open(std::unique_ptr<qcow2::DiskReader> disk);
    ~DiskFs();
    DiskFs(const DiskFs&) = delete;
    DiskFs& operator=(const DiskFs&) = delete;
    DiskFs(DiskFs&&) = delete;
    DiskFs& operator=(DiskFs&&) = delete;

    // lstat (follow false) or stat.
    [[nodiscard]] Result<Stat> stat(std::string_view path, bool follow);
    // The directory at `path` (followed), sorted by name, without . and ..
    [[nodiscard]] Result<std::vector<DirEntry>> list(std::string_view path);
    // The regular file at `path` (followed), streamed to `sink` in pieces
    // of at most 256 KiB; returns its size.
    [[nodiscard]] Result<std::uint64_t> read(std::string_view path, const ChunkSink& sink);

    // The same by inode (Stat::ino of an earlier stat or list entry), so a
    // walk of a tree need not resolve every path from the root again;
    // `path` only names it in errors. stat_at gives a symlink's target.
    [[nodiscard]] Result<Stat> stat_at(std::uint32_t ino, std::string_view path);
    [[nodiscard]] Result<std::vector<DirEntry>> list_at(std::uint32_t ino, std::string_view path);
    [[nodiscard]] Result<std::uint64_t> read_at(std::uint32_t ino, std::string_view path,
                                                const ChunkSink& sink);

private:
    struct Closer {
        void operator()(struct_ext2_filsys* fs) const;
    };
    DiskFs(std::unique_ptr<DiskChannel> channel, std::unique_ptr<struct_ext2_filsys, Closer> fs);

    // The inode `path` names, following symlinks on the way (and at the end
    // with `follow`).
    [[nodiscard]] Result<std::uint32_t> resolve(std::string_view path, bool follow);
    [[nodiscard]] Result<std::uint32_t> lookup(std::uint32_t dir, std::string_view name, std::string_view path);
    [[nodiscard]] Result<Stat> stat_inode(std::uint32_t ino, bool with_target, std::string_view path);
    [[nodiscard]] Result<std::string> read_link(std::uint32_t ino, std::string_view path);
    [[nodiscard]] Result<void> check_dir(std::uint32_t ino, std::string_view path);
    // kCorrupt for an inode number the file system cannot have.
    [[nodiscard]] Result<void> check_ino(std::uint32_t ino, std::string_view path) const;
    // Calls `each` with every live entry of directory `dir` (. and .. too)
    // until it returns false; kLimit past kMaxDirRecords records.
    [[nodiscard]] Result<void> scan_dir(std::uint32_t dir, std::string_view path,
                                        const std::function<bool(std::string_view, std::uint32_t)>& each);
    // libext2fs' errcode as an error: the disk's own error when a read of
    // it failed, else kNotFound or kCorrupt.
    [[nodiscard]] Error ext2_error(long err, std::string_view what);

    std::unique_ptr<DiskChannel> channel_;
    std::unique_ptr<struct_ext2_filsys, Closer> fs_;
};

}  // namespace sbx::diskfs
