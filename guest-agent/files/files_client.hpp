// The host side of the file ops (docs/agent-protocol.md, "Files"): blocking
// calls on one AgentClient connection, contents streamed through callbacks
// or local files in DATA-frame-sized chunks, never whole in memory. After
// an error reply the connection stays usable for the next call; after a
// broken connection (a read or write error) it does not.
//
// Everything the guest sends is checked (offsets, sizes, entry counts,
// archive entries): the guest is untrusted. Downloads stop at a
// caller-set size cap; a download over it, a reply breaking the protocol
// or a timeout abandons the connection (AgentClient::abandon()).
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "guest-agent/client/agent_client.hpp"

namespace sbx::agent::files {

// Receives file contents in order; an error stops the transfer.
using ChunkSink = std::function<Result<void>(std::span<const std::uint8_t>)>;
// Fills up to buffer.size() bytes and returns how many; 0 means the end.
using ChunkSource = std::function<Result<std::size_t>(std::span<std::uint8_t>)>;

struct ReadRange {
    std::uint64_t offset = 0;
    std::optional<std::uint64_t> length;  // unset: to the end of the file
};

// The default download cap (file_read, tar_get): more than this from the
// guest is an error. Callers expecting more pass their own.
inline constexpr std::uint64_t kDefaultMaxDownload = std::uint64_t{16} << 30;

// file_read: streams the guest file to `sink`; returns the bytes received.
// More than `max_bytes` (announced by the file's size, or sent) is an
// error "download of PATH: over the N-byte cap".
[[nodiscard]] Result<std::uint64_t> read_file(AgentClient& client, std::string_view guest_path,
                                              const ChunkSink& sink, ReadRange range = {},
                                              std::uint64_t max_bytes = kDefaultMaxDownload);
// Into a local file, written under a temporary name beside it and renamed
// over local_path only when complete: a failed download leaves no partial
// file (and an old file at local_path untouched). A local_path that is not
// a regular file (a fifo, /dev/stdout) is written in place.
[[nodiscard]] Result<std::uint64_t> read_file_to(AgentClient& client, std::string_view guest_path,
                                                 const std::string& local_path, ReadRange range = {},
                                                 std::uint64_t max_bytes = kDefaultMaxDownload);
// Into memory, for small files: more than max_bytes is an error.
[[nodiscard]] Result<std::string> read_file_text(AgentClient& client, std::string_view guest_path,
                                                 std::size_t max_bytes = 16 << 20);

struct Ownership {
    std::string user;                  // a name or uid in the guest's /etc/passwd (its uid and primary gid)
    std::optional<std::uint32_t> uid;  // these win over the user's
    std::optional<std::uint32_t> gid;
};

struct WriteOptions {
    std::optional<std::uint32_t> mode;  // unset: 0644 (write_file_from: the local file's mode)
    Ownership owner;                    // unset: the agent's default user (root unless --default-user)
    bool mkdirs = false;                // create missing parent directories (mode 0755, same owner)
    bool append = false;                // append in place (not atomic) instead of replacing
};

// file_write: streams `source` into the guest file; returns the bytes written.
// A source error cancels the write (the old file stays) and is returned.
[[nodiscard]] Result<std::uint64_t> write_file(AgentClient& client, std::string_view guest_path,
                                               const ChunkSource& source, const WriteOptions& options = {});
[[nodiscard]] Result<std::uint64_t> write_file_from(AgentClient& client, const std::string& local_path,
                                                    std::string_view guest_path, WriteOptions options = {});
[[nodiscard]] Result<std::uint64_t> write_file_text(AgentClient& client, std::string_view guest_path,
                                                    std::string_view content,
                                                    const WriteOptions& options = {});

struct FileInfo {
    std::string kind;  // "file", "dir", "symlink" or "other"
    std::uint64_t size = 0;
    std::uint32_t mode = 0;  // permission bits
    std::uint32_t uid = 0;
    std::uint32_t gid = 0;
    std::int64_t mtime = 0;  // seconds since the epoch
    std::string target;      // a symlink's target
};
[[nodiscard]] Result<FileInfo> stat(AgentClient& client, std::string_view guest_path, bool follow = false);

struct DirEntry {
    std::string name;
    std::string kind;
    std::uint64_t size = 0;
    std::uint32_t mode = 0;
    std::int64_t mtime = 0;
};
// At most 100 000 entries (more: error "limit: ...").
[[nodiscard]] Result<std::vector<DirEntry>> list(AgentClient& client, std::string_view guest_path);

struct MkdirOptions {
    std::uint32_t mode = 0755;
    bool parents = true;
    Ownership owner;
};
[[nodiscard]] Result<void> make_dir(AgentClient& client, std::string_view guest_path,
                                    const MkdirOptions& options = {});
[[nodiscard]] Result<void> remove(AgentClient& client, std::string_view guest_path, bool recursive = false);
[[nodiscard]] Result<void> rename(AgentClient& client, std::string_view from, std::string_view to);

struct TarResult {
    std::uint64_t bytes = 0;    // archive bytes transferred
    std::uint64_t entries = 0;  // entries archived / extracted
    std::uint64_t skipped = 0;  // devices, fifos, sockets: not transferred
};

// tar_get, extracted into local_dir (created with its parents if missing)
// with the same safety rules as the agent's tar_put; set-id bits are
// dropped and files belong to the calling process. If extraction fails,
// the rest of the archive is drained so the connection stays usable, and
// the error returned. An archive over `max_bytes` is an error; the entries
// extracted before it stay (a file cut short is removed).
[[nodiscard]] Result<TarResult> get_tree(AgentClient& client, std::string_view guest_path,
                                         const std::string& local_dir,
                                         std::uint64_t max_bytes = kDefaultMaxDownload);
// tar_put of a local directory's contents (or of one file) into guest_dir.
[[nodiscard]] Result<TarResult> put_tree(AgentClient& client, const std::string& local_path,
                                         std::string_view guest_dir, const Ownership& owner = {});

// The raw archives, for callers with their own tar handling: tar_get's
// stream into `sink`, and tar_put fed from `source`.
[[nodiscard]] Result<TarResult> get_tar(AgentClient& client, std::string_view guest_path,
                                        const ChunkSink& sink, std::uint64_t max_bytes = kDefaultMaxDownload);
[[nodiscard]] Result<TarResult> put_tar(AgentClient& client, std::string_view guest_dir,
                                        const ChunkSource& source, const Ownership& owner = {});

}  // namespace sbx::agent::files
