// Reads a tar archive pushed at it in pieces of any size (DATA frames) and
// hands its entries to a handler, file contents streamed through. Holds at
// most one header block and one PAX header (kMaxMetaSize) in memory.
// Understands ustar, PAX ('x', 'g' skipped) and GNU long names ('L', 'K')
// and base-256 numbers; the archive is untrusted: every field is checked,
// and the first problem fails the reader for good. Entry paths come out as
// written in the archive: making them safe is the extractor's job.
#pragma once

#include <array>
#include <optional>

#include "guest-agent/files/tar_format.hpp"

namespace sbx::agent::tar {

class TarEntryHandler {
public:
    virtual ~TarEntryHandler() = default;
    [[nodiscard]] virtual Result<void> begin_entry(const Entry& entry) = 0;
    // A File's content, in order; entry.size bytes in all.
    [[nodiscard]] virtual Result<void> entry_data(std::span<const std::uint8_t> bytes) = 0;
    [[nodiscard]] virtual Result<void> end_entry() = 0;
};

class TarReader {
public:
    explicit TarReader(TarEntryHandler& handler) : handler_(handler) {}

    // Consumes all of `bytes`. Bytes after the end-of-archive block are ignored.
    [[nodiscard]] Result<void> feed(std::span<const std::uint8_t> bytes);
    // The input ended: an error unless the end-of-archive block was seen.
    [[nodiscard]] Result<void> finish();

    [[nodiscard]] std::uint64_t entries() const { return entries_; }

private:
    enum class State { Header, Content, Meta, Skip, End };

    [[nodiscard]] Result<void> on_header();
    [[nodiscard]] Result<void> on_meta();
    [[nodiscard]] Result<void> fail(Error error);
    void skip_then_header(std::uint64_t bytes);

    TarEntryHandler& handler_;
    State state_ = State::Header;
    std::array<std::uint8_t, kBlock> block_{};
    std::size_t block_used_ = 0;
    std::uint64_t remaining_ = 0;  // Content or Skip bytes left
    std::uint64_t padding_ = 0;    // to skip after Content or Meta
    std::uint64_t position_ = 0;   // archive offset of the current header (for messages)
    std::uint64_t consumed_ = 0;
    std::uint64_t entries_ = 0;
    std::string meta_;  // the PAX header or GNU long name being collected
    std::uint8_t meta_type_ = 0;

    // Fields for the next entry from the PAX and GNU headers before it.
    std::optional<std::string> next_path_;
    std::optional<std::string> next_link_;
    std::optional<std::uint64_t> next_size_;
    std::optional<std::uint64_t> next_uid_;
    std::optional<std::uint64_t> next_gid_;
    std::optional<std::pair<std::int64_t, std::uint32_t>> next_mtime_;

    std::optional<Error> error_;
};

}  // namespace sbx::agent::tar
