// The tar format of tar_get and tar_put (docs/agent-protocol.md, "Files"):
// POSIX ustar blocks, with a PAX extended header in front of an entry whose
// name, link target, size, owner or mtime does not fit its ustar field.
// Both ends speak it: the agent archives and extracts guest trees, the
// client host trees, through the same writer and reader.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "base/result.hpp"

namespace sbx::agent::tar {

inline constexpr std::size_t kBlock = 512;

// ustar header field offsets and widths (POSIX.1-2001, "ustar Interchange Format").
struct Field {
    std::size_t offset;
    std::size_t width;
};
inline constexpr Field kName{0, 100};
inline constexpr Field kMode{100, 8};
inline constexpr Field kUid{108, 8};
inline constexpr Field kGid{116, 8};
inline constexpr Field kSize{124, 12};
inline constexpr Field kMtime{136, 12};
inline constexpr Field kChecksum{148, 8};
inline constexpr std::size_t kTypeflag = 156;
inline constexpr Field kLinkname{157, 100};
inline constexpr Field kMagic{257, 6};
inline constexpr Field kVersion{263, 2};
inline constexpr Field kPrefix{345, 155};
// The largest PAX extended header or GNU long name a reader accepts: the
// reader holds one in memory, and real ones are a few hundred bytes.
inline constexpr std::size_t kMaxMetaSize = 1 << 20;

enum class EntryType { File, Directory, Symlink, HardLink, Other };

struct Entry {
    std::string path;  // as in the archive: "dir/", "dir/file"
    EntryType type = EntryType::File;
    std::uint32_t mode = 0;  // permission bits (07777)
    std::uint64_t uid = 0;
    std::uint64_t gid = 0;
    std::uint64_t size = 0;  // content bytes; only a File's are delivered
    std::int64_t mtime = 0;  // seconds since the epoch
    std::uint32_t mtime_nsec = 0;
    std::string link_target;  // Symlink: its target; HardLink: the archive path it links to
};

// Where archive bytes go, in order.
using ByteSink = std::function<Result<void>(std::span<const std::uint8_t>)>;

}  // namespace sbx::agent::tar
