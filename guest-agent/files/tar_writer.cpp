#include "guest-agent/files/tar_writer.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>

namespace sbx::agent::tar {
namespace {

using Block = std::array<std::uint8_t, kBlock>;

// An octal field holds width - 1 digits and a NUL.
bool fits_octal(std::uint64_t value, Field field) {
    const std::size_t digits = field.width - 1;
    return digits >= 22 || value < (std::uint64_t{1} << (3 * digits));
}

void put_octal(Block& block, Field field, std::uint64_t value) {
    const std::size_t digits = field.width - 1;
    for (std::size_t i = digits; i-- > 0;) {
        block[field.offset + i] = static_cast<std::uint8_t>('0' + (value & 7));
        value >>= 3;
    }
    block[field.offset + digits] = 0;
}

// Copies up to the field's width; a name of exactly that width has no NUL.
void put_text(Block& block, Field field, std::string_view text) {
    std::copy_n(text.begin(), std::min(text.size(), field.width),
                block.begin() + static_cast<std::ptrdiff_t>(field.offset));
}

void set_checksum(Block& block) {
    std::memset(block.data() + kChecksum.offset, ' ', kChecksum.width);
    unsigned sum = 0;
    for (std::uint8_t b : block) {
        sum += b;
    }
    // Six digits, NUL, space: the traditional layout every reader accepts.
    for (std::size_t i = 6; i-- > 0;) {
        block[kChecksum.offset + i] = static_cast<std::uint8_t>('0' + (sum & 7));
        sum >>= 3;
    }
    block[kChecksum.offset + 6] = 0;
}

Block ustar_header(std::string_view name, char typeflag, std::uint32_t mode, std::uint64_t uid,
                   std::uint64_t gid, std::uint64_t size, std::uint64_t mtime, std::string_view linkname) {
    Block block{};
    put_text(block, kName, name);
    put_octal(block, kMode, mode & 07777);
    put_octal(block, kUid, fits_octal(uid, kUid) ? uid : 0);
    put_octal(block, kGid, fits_octal(gid, kGid) ? gid : 0);
    put_octal(block, kSize, size);
    put_octal(block, kMtime, mtime);
    block[kTypeflag] = static_cast<std::uint8_t>(typeflag);
    put_text(block, kLinkname, linkname);
    put_text(block, kMagic, std::string_view("ustar\0", 6));
    put_text(block, kVersion, "00");
    set_checksum(block);
    return block;
}

// One PAX record, "LEN key=value\n", where LEN counts the whole record
// including its own digits.
void add_record(std::string& records, std::string_view key, std::string_view value) {
    const std::size_t base = key.size() + value.size() + 3;  // ' ', '=', '\n'
    std::size_t length = base + 1;
    while (length != base + std::to_string(length).size()) {
        length = base + std::to_string(length).size();
    }
    records += std::to_string(length);
    records += ' ';
    records += key;
    records += '=';
    records += value;
    records += '\n';
}

char typeflag_of(EntryType type) {
    switch (type) {
        case EntryType::Directory:
            return '5';
        case EntryType::Symlink:
            return '2';
        case EntryType::HardLink:
            return '1';
        default:
            return '0';
    }
}

void append_block(std::vector<std::uint8_t>& out, const Block& block) {
    out.insert(out.end(), block.begin(), block.end());
}

}  // namespace

std::vector<std::uint8_t> encode_header(const Entry& entry) {
    const std::uint64_t size = entry.type == EntryType::File ? entry.size : 0;
    const bool mtime_fits = entry.mtime >= 0 && fits_octal(static_cast<std::uint64_t>(entry.mtime), kMtime);
    std::string records;
    if (entry.path.size() > kName.width) {
        add_record(records, "path", entry.path);
    }
    if (entry.link_target.size() > kLinkname.width) {
        add_record(records, "linkpath", entry.link_target);
    }
    if (!fits_octal(size, kSize)) {
        add_record(records, "size", std::to_string(size));
    }
    if (!fits_octal(entry.uid, kUid)) {
        add_record(records, "uid", std::to_string(entry.uid));
    }
    if (!fits_octal(entry.gid, kGid)) {
        add_record(records, "gid", std::to_string(entry.gid));
    }
    if (!mtime_fits) {
        add_record(records, "mtime", std::to_string(entry.mtime));
    }

    std::vector<std::uint8_t> out;
    const std::uint64_t mtime = mtime_fits ? static_cast<std::uint64_t>(entry.mtime) : 0;
    if (!records.empty()) {
        append_block(out, ustar_header("././@PaxHeader", 'x', 0644, 0, 0, records.size(), mtime, {}));
        out.insert(out.end(), records.begin(), records.end());
        out.resize((out.size() + kBlock - 1) / kBlock * kBlock, 0);
    }
    append_block(out, ustar_header(entry.path, typeflag_of(entry.type), entry.mode, entry.uid, entry.gid,
                                   fits_octal(size, kSize) ? size : 0, mtime, entry.link_target));
    return out;
}

TarWriter::TarWriter(ByteSink sink, std::size_t chunk)
    : sink_(std::move(sink)), buffer_(std::max(chunk, kBlock)) {}

Result<void> TarWriter::flush_if_full() {
    if (used_ < buffer_.size()) {
        return ok();
    }
    used_ = 0;
    return sink_(buffer_);
}

Result<void> TarWriter::put(std::span<const std::uint8_t> bytes) {
    while (!bytes.empty()) {
        const std::size_t n = std::min(bytes.size(), buffer_.size() - used_);
        std::memcpy(buffer_.data() + used_, bytes.data(), n);
        used_ += n;
        bytes_ += n;
        bytes = bytes.subspan(n);
        if (auto r = flush_if_full(); !r) {
            return r;
        }
    }
    return ok();
}

Result<void> TarWriter::put_zeros(std::size_t count) {
    while (count > 0) {
        const std::size_t n = std::min(count, buffer_.size() - used_);
        std::memset(buffer_.data() + used_, 0, n);
        used_ += n;
        bytes_ += n;
        count -= n;
        if (auto r = flush_if_full(); !r) {
            return r;
        }
    }
    return ok();
}

Result<void> TarWriter::add(const Entry& entry) {
    ++entries_;
    return put(encode_header(entry));
}

Result<void> TarWriter::add_file(const Entry& entry, int fd) {
    if (auto r = add(entry); !r) {
        return r;
    }
    // Read straight into the output buffer: one copy from the file to the sink.
    std::uint64_t remaining = entry.size;
    while (remaining > 0) {
        const std::size_t want =
            static_cast<std::size_t>(std::min<std::uint64_t>(remaining, buffer_.size() - used_));
        const ssize_t n = ::read(fd, buffer_.data() + used_, want);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return sys_error("reading {}", entry.path);
        }
        if (n == 0) {
            // The file shrank since its header was written: keep the archive whole.
            if (auto r = put_zeros(static_cast<std::size_t>(remaining)); !r) {
                return r;
            }
            break;
        }
        used_ += static_cast<std::size_t>(n);
        bytes_ += static_cast<std::size_t>(n);
        remaining -= static_cast<std::size_t>(n);
        if (auto r = flush_if_full(); !r) {
            return r;
        }
    }
    return put_zeros(static_cast<std::size_t>((kBlock - entry.size % kBlock) % kBlock));
}

Result<void> TarWriter::add_content(const Entry& entry, const ContentProducer& produce) {
    if (auto r = add(entry); !r) {
        return r;
    }
    std::uint64_t remaining = entry.size;
    auto sink = [&](std::span<const std::uint8_t> bytes) -> Result<void> {
        bytes = bytes.first(static_cast<std::size_t>(std::min<std::uint64_t>(bytes.size(), remaining)));
        remaining -= bytes.size();
        return put(bytes);
    };
    if (auto r = produce(sink); !r) {
        return r;
    }
    if (auto r = put_zeros(static_cast<std::size_t>(remaining)); !r) {
        return r;
    }
    return put_zeros(static_cast<std::size_t>((kBlock - entry.size % kBlock) % kBlock));
}

Result<void> TarWriter::finish() {
    if (auto r = put_zeros(2 * kBlock); !r) {
        return r;
    }
    if (used_ == 0) {
        return ok();
    }
    const std::size_t n = std::exchange(used_, 0);
    return sink_(std::span(buffer_).first(n));
}

}  // namespace sbx::agent::tar
