// Writes a tar archive as a stream: headers and file contents go through
// one fixed buffer to a sink, which gets them in pieces of exactly `chunk`
// bytes (the last one shorter), so an archive of any size costs `chunk`
// bytes of memory and each piece can be one DATA frame.
#pragma once

#include <vector>

#include "guest-agent/files/tar_format.hpp"

namespace sbx::agent::tar {

class TarWriter {
public:
    TarWriter(ByteSink sink, std::size_t chunk);

    // A header-only entry: a directory, symlink or hard link.
    [[nodiscard]] Result<void> add(const Entry& entry);
    // A regular file: the header, then exactly entry.size bytes read from
    // `fd` (zeros where the file turned out shorter; a file that grew is cut
    // at entry.size, so the archive stays well-formed).
    [[nodiscard]] Result<void> add_file(const Entry& entry, int fd);
    // A regular file whose content `produce` pushes through the sink it is
    // given (for content that is not a file descriptor: a disk image read
    // through a library). The same rule: exactly entry.size bytes go into
    // the archive, zeros for what `produce` fell short of, the excess cut.
    using ContentProducer = std::function<Result<void>(const ByteSink& sink)>;
    [[nodiscard]] Result<void> add_content(const Entry& entry, const ContentProducer& produce);
    // The end-of-archive blocks; then everything has reached the sink.
    [[nodiscard]] Result<void> finish();

    [[nodiscard]] std::uint64_t bytes() const { return bytes_; }
    [[nodiscard]] std::uint64_t entries() const { return entries_; }

private:
    [[nodiscard]] Result<void> put(std::span<const std::uint8_t> bytes);
    [[nodiscard]] Result<void> put_zeros(std::size_t count);
    [[nodiscard]] Result<void> flush_if_full();

    ByteSink sink_;
    std::vector<std::uint8_t> buffer_;
    std::size_t used_ = 0;
    std::uint64_t bytes_ = 0;
    std::uint64_t entries_ = 0;
};

// The header blocks of one entry: a PAX extended header first when a field
// does not fit ustar, then the ustar header (also used by tests).
[[nodiscard]] std::vector<std::uint8_t> encode_header(const Entry& entry);

}  // namespace sbx::agent::tar
