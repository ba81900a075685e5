// Extracts a tar archive below one directory: the receiving side of
// tar_put (in the guest, from the host) and of the client's get_tree (on
// the host, from a guest that may be hostile). Safety rules
// (docs/agent-protocol.md, "Files"):
//   - absolute names and ".." components are refused;
//   - every path is walked from the root directory's fd with O_NOFOLLOW:
//     a symlink (whether it came with this archive or was already there)
//     is never followed, and an entry below one is refused;
//   - a file, symlink or hard link replaces whatever non-directory is at
//     its name (never writing through it);
//   - a symlink's target must be relative and stay below the root (only
//     leading ".." components, no more of them than the link's depth), so
//     no chain of extracted links leads out;
//   - a hard link must name an entry already below the root;
//   - devices, fifos and the like are skipped, never created.
// A file cut short by an error is removed.
#pragma once

#include <optional>
#include <vector>

#include "base/unique_fd.hpp"
#include "guest-agent/files/tar_reader.hpp"

namespace sbx::agent::files {

struct ExtractOptions {
    // Owner of everything extracted; unset: whoever the process is (the
    // archive's uid/gid are never used: they mean nothing on the other side).
    std::optional<std::uint32_t> uid;
    std::optional<std::uint32_t> gid;
    // Applied to the archive's modes: the host drops set-id bits from a guest's archive.
    std::uint32_t mode_mask = 07777;
};

class TreeExtractor final : public tar::TarEntryHandler {
public:
    // `root_fd`: the target directory, borrowed for the extractor's lifetime.
    TreeExtractor(int root_fd, ExtractOptions options) : root_fd_(root_fd), options_(options) {}
    ~TreeExtractor() override;
    TreeExtractor(const TreeExtractor&) = delete;
    TreeExtractor& operator=(const TreeExtractor&) = delete;

    [[nodiscard]] Result<void> begin_entry(const tar::Entry& entry) override;
    [[nodiscard]] Result<void> entry_data(std::span<const std::uint8_t> bytes) override;
    [[nodiscard]] Result<void> end_entry() override;
    // After the archive: directories get their modes and times (late, so a
    // read-only directory could still take its entries).
    [[nodiscard]] Result<void> finish();

    [[nodiscard]] std::uint64_t extracted() const { return extracted_; }
    [[nodiscard]] std::uint64_t skipped() const { return skipped_; }

private:
    struct OpenFile {
        UniqueFd parent;
        std::string leaf;
        UniqueFd fd;
        tar::Entry entry;
    };
    struct DeferredDir {
        std::vector<std::string> parts;
        std::uint32_t mode;
        std::int64_t mtime;
        std::uint32_t mtime_nsec;
    };

    [[nodiscard]] Result<int> parent_fd(const std::vector<std::string>& parts, const std::string& shown);
    [[nodiscard]] Result<UniqueFd> open_dir(std::span<const std::string> parts, bool create,
                                            const std::string& shown);
    [[nodiscard]] Result<void> clear_way(int parent, const std::string& leaf, const std::string& shown);
    [[nodiscard]] Result<void> set_owner(int fd);
    [[nodiscard]] Result<void> directory(const tar::Entry& entry, std::vector<std::string> parts,
                                         const std::string& shown);
    [[nodiscard]] Result<void> symlink(const tar::Entry& entry, const std::vector<std::string>& parts,
                                       const std::string& shown);
    [[nodiscard]] Result<void> hard_link(const tar::Entry& entry, const std::vector<std::string>& parts,
                                         const std::string& shown);
    [[nodiscard]] Result<void> apply_dir(const DeferredDir& dir);

    int root_fd_;
    ExtractOptions options_;
    std::optional<OpenFile> file_;
    std::vector<DeferredDir> dirs_;
    std::size_t deferred_bytes_ = 0;
    // The last parent directory walked to (entries come grouped by directory).
    std::vector<std::string> cached_parts_;
    UniqueFd cached_fd_;
    std::uint64_t extracted_ = 0;
    std::uint64_t skipped_ = 0;
};

// The components of an archive path, "." and empty ones dropped; absolute
// paths, ".." and NUL bytes are errors.
[[nodiscard]] Result<std::vector<std::string>> archive_path_parts(std::string_view path);
// An archive path shortened for messages (a PAX name may be 1 MiB long).
[[nodiscard]] std::string shown_path(std::string_view path);

}  // namespace sbx::agent::files
