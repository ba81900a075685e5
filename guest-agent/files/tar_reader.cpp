#include "guest-agent/files/tar_reader.hpp"

#include <algorithm>
#include <cstring>

namespace sbx::agent::tar {
namespace {

using Block = std::array<std::uint8_t, kBlock>;

// No entry is bigger than this; keeps size arithmetic far from overflow.
constexpr std::uint64_t kMaxEntrySize = std::uint64_t{1} << 62;

std::uint64_t padding_of(std::uint64_t size) {
    return (kBlock - size % kBlock) % kBlock;
}

std::string text_field(const Block& block, Field field) {
    const auto* begin = reinterpret_cast<const char*>(block.data() + field.offset);
    return {begin, ::strnlen(begin, field.width)};
}

// Octal digits (NUL- or space-terminated, leading spaces allowed), or
// base-256 (first byte 0x80: big-endian binary, as GNU tar writes large values).
Result<std::uint64_t> number_field(const Block& block, Field field, std::string_view what) {
    const std::uint8_t* p = block.data() + field.offset;
    std::uint64_t value = 0;
    if (p[0] & 0x80) {
        if (p[0] & 0x40) {
            return make_error("negative {} in base-256", what);
        }
        value = p[0] & 0x3f;
        for (std::size_t i = 1; i < field.width; ++i) {
            if (value >> 56) {
                return make_error("{} out of range", what);
            }
            value = (value << 8) | p[i];
        }
        return value;
    }
    std::size_t i = 0;
    while (i < field.width && p[i] == ' ') {
        ++i;
    }
    for (; i < field.width && p[i] >= '0' && p[i] <= '7'; ++i) {
        if (value >> 60) {
            return make_error("{} out of range", what);
        }
        value = value * 8 + (p[i] - '0');
    }
    for (; i < field.width; ++i) {
        if (p[i] != 0 && p[i] != ' ') {
            return make_error("{} field is not an octal number", what);
        }
    }
    return value;
}

bool checksum_matches(const Block& block, std::uint64_t stored) {
    // The checksum field counts as spaces; some old writers summed signed bytes.
    std::uint64_t unsigned_sum = 0;
    std::int64_t signed_sum = 0;
    for (std::size_t i = 0; i < kBlock; ++i) {
        const bool in_field = i >= kChecksum.offset && i < kChecksum.offset + kChecksum.width;
        const std::uint8_t b = in_field ? std::uint8_t{' '} : block[i];
        unsigned_sum += b;
        signed_sum += static_cast<std::int8_t>(b);
    }
    return stored == unsigned_sum || static_cast<std::int64_t>(stored) == signed_sum;
}

Result<std::uint64_t> decimal(std::string_view text, std::string_view what) {
    if (text.empty() || text.size() > 19 ||
        !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        return make_error("PAX {} \"{}\" is not a number", what, text.substr(0, 40));
    }
    std::uint64_t value = 0;
    for (char c : text) {
        value = value * 10 + static_cast<std::uint64_t>(c - '0');
    }
    return value;
}

// "-?SECONDS(.FRACTION)?"
Result<std::pair<std::int64_t, std::uint32_t>> pax_time(std::string_view text) {
    const bool negative = text.starts_with('-');
    if (negative) {
        text.remove_prefix(1);
    }
    const auto dot = text.find('.');
    auto seconds = decimal(text.substr(0, dot), "mtime");
    if (!seconds) {
        return seconds.error();
    }
    std::uint32_t nsec = 0;
    if (dot != std::string_view::npos) {
        std::string_view fraction = text.substr(dot + 1);
        if (!fraction.empty()) {
            auto digits = decimal(fraction.substr(0, 9), "mtime");
            if (!digits) {
                return digits.error();
            }
            nsec = static_cast<std::uint32_t>(*digits);
            for (std::size_t i = std::min<std::size_t>(fraction.size(), 9); i < 9; ++i) {
                nsec *= 10;
            }
        }
    }
    const auto s = static_cast<std::int64_t>(*seconds);
    return std::pair{negative ? -s : s, negative ? 0u : nsec};
}

}  // namespace

Result<void> TarReader::fail(Error error) {
    error_ = Error{fmt::format("tar: at byte {}: {}", position_, error.message), error.errno_value};
    return *error_;
}

void TarReader::skip_then_header(std::uint64_t bytes) {
    remaining_ = bytes;
    state_ = bytes > 0 ? State::Skip : State::Header;
}

Result<void> TarReader::feed(std::span<const std::uint8_t> bytes) {
    if (error_) {
        return *error_;
    }
    while (!bytes.empty()) {
        std::size_t n = 0;
        switch (state_) {
            case State::Header:
                if (block_used_ == 0) {
                    position_ = consumed_;
                }
                n = std::min(bytes.size(), kBlock - block_used_);
                std::memcpy(block_.data() + block_used_, bytes.data(), n);
                block_used_ += n;
                break;
            case State::Content:
            case State::Meta:
            case State::Skip:
                n = static_cast<std::size_t>(std::min<std::uint64_t>(bytes.size(), remaining_));
                remaining_ -= n;
                break;
            case State::End:
                n = bytes.size();
                break;
        }
        const auto piece = bytes.first(n);
        bytes = bytes.subspan(n);
        consumed_ += n;

        Result<void> step = ok();
        if (state_ == State::Header && block_used_ == kBlock) {
            block_used_ = 0;
            step = on_header();
        } else if (state_ == State::Content) {
            step = handler_.entry_data(piece);
            if (step && remaining_ == 0) {
                step = handler_.end_entry();
                skip_then_header(padding_);
            }
        } else if (state_ == State::Meta) {
            meta_.append(reinterpret_cast<const char*>(piece.data()), piece.size());
            if (remaining_ == 0) {
                step = on_meta();
            }
        } else if (state_ == State::Skip && remaining_ == 0) {
            state_ = State::Header;
        }
        if (!step) {
            return error_ ? *error_ : fail(step.error());
        }
    }
    return ok();
}

Result<void> TarReader::finish() {
    if (error_) {
        return *error_;
    }
    if (state_ == State::End) {
        return ok();
    }
    if (state_ == State::Header && block_used_ == 0) {
        return fail(make_error("the archive ends without its end-of-archive block (truncated?)"));
    }
    return fail(make_error("the archive is truncated inside an entry"));
}

Result<void> TarReader::on_header() {
    if (std::all_of(block_.begin(), block_.end(), [](std::uint8_t b) { return b == 0; })) {
        state_ = State::End;
        return ok();
    }
    auto checksum = number_field(block_, kChecksum, "checksum");
    if (!checksum || !checksum_matches(block_, *checksum)) {
        return fail(make_error("bad header checksum (not a tar archive, or corrupt)"));
    }
    auto mode = number_field(block_, kMode, "mode");
    auto uid = number_field(block_, kUid, "uid");
    auto gid = number_field(block_, kGid, "gid");
    auto size = number_field(block_, kSize, "size");
    auto mtime = number_field(block_, kMtime, "mtime");
    for (const auto* field : {&mode, &uid, &gid, &size, &mtime}) {
        if (!*field) {
            return fail(field->error());
        }
    }
    const char typeflag = static_cast<char>(block_[kTypeflag]);
    if (typeflag == 'x' || typeflag == 'g' || typeflag == 'L' || typeflag == 'K') {
        if (*size > kMaxMetaSize) {
            return fail(make_error("a {} header of {} bytes (the limit is {})",
                                   typeflag == 'L' || typeflag == 'K' ? "GNU long name" : "PAX", *size,
                                   kMaxMetaSize));
        }
        meta_.clear();
        meta_type_ = static_cast<std::uint8_t>(typeflag);
        padding_ = padding_of(*size);
        remaining_ = *size;
        state_ = State::Meta;
        return *size == 0 ? on_meta() : ok();
    }

    Entry entry;
    std::string name = text_field(block_, kName);
    // POSIX ustar splits long names into prefix/name; GNU tar's header uses
    // that area for other things and has "ustar  " as its magic.
    if (std::memcmp(block_.data() + 257, "ustar\0", 6) == 0) {
        std::string prefix = text_field(block_, kPrefix);
        if (!prefix.empty()) {
            name = prefix + "/" + name;
        }
    }
    entry.path = next_path_ ? std::move(*next_path_) : std::move(name);
    entry.link_target = next_link_ ? std::move(*next_link_) : text_field(block_, kLinkname);
    entry.size = next_size_.value_or(*size);
    entry.uid = next_uid_.value_or(*uid);
    entry.gid = next_gid_.value_or(*gid);
    entry.mode = static_cast<std::uint32_t>(*mode & 07777);
    if (next_mtime_) {
        entry.mtime = next_mtime_->first;
        entry.mtime_nsec = next_mtime_->second;
    } else {
        entry.mtime = static_cast<std::int64_t>(std::min<std::uint64_t>(*mtime, INT64_MAX));
    }
    next_path_.reset();
    next_link_.reset();
    next_size_.reset();
    next_uid_.reset();
    next_gid_.reset();
    next_mtime_.reset();
    if (entry.size > kMaxEntrySize) {
        return fail(make_error("entry \"{}\" claims {} bytes", entry.path, entry.size));
    }
    switch (typeflag) {
        case '0':
        case '\0':
        case '7':
            entry.type = EntryType::File;
            break;
        case '1':
            entry.type = EntryType::HardLink;
            break;
        case '2':
            entry.type = EntryType::Symlink;
            break;
        case '5':
            entry.type = EntryType::Directory;
            break;
        default:
            entry.type = EntryType::Other;
            break;  // devices, fifos, GNU extensions
    }
    ++entries_;
    if (auto r = handler_.begin_entry(entry); !r) {
        return fail(r.error());
    }
    if (entry.type == EntryType::File && entry.size > 0) {
        remaining_ = entry.size;
        padding_ = padding_of(entry.size);
        state_ = State::Content;
        return ok();
    }
    if (auto r = handler_.end_entry(); !r) {
        return fail(r.error());
    }
    // A non-file's content (a GNU dump directory, say) is not extracted.
    skip_then_header(entry.type == EntryType::File ? 0 : entry.size + padding_of(entry.size));
    return ok();
}

Result<void> TarReader::on_meta() {
    if (meta_type_ == 'L' || meta_type_ == 'K') {
        std::string name = meta_.substr(0, meta_.find('\0'));
        (meta_type_ == 'L' ? next_path_ : next_link_) = std::move(name);
        skip_then_header(padding_);
        return ok();
    }
    // PAX records: "LEN key=value\n", LEN counting the whole record.
    std::string_view rest = meta_;
    while (!rest.empty()) {
        const auto space = rest.find(' ');
        if (space == 0 || space == std::string_view::npos || space > 19) {
            return fail(make_error("malformed PAX record"));
        }
        auto length = decimal(rest.substr(0, space), "record length");
        if (!length || *length <= space + 2 || *length > rest.size() || rest[*length - 1] != '\n') {
            return fail(make_error("malformed PAX record"));
        }
        std::string_view record = rest.substr(space + 1, *length - space - 2);
        rest.remove_prefix(*length);
        const auto eq = record.find('=');
        if (eq == std::string_view::npos || eq == 0) {
            return fail(make_error("malformed PAX record"));
        }
        if (meta_type_ == 'g') {
            continue;  // global defaults: checked, not applied
        }
        const std::string_view key = record.substr(0, eq);
        const std::string_view value = record.substr(eq + 1);
        Result<std::uint64_t> number = std::uint64_t{0};
        if (key == "path") {
            next_path_ = std::string(value);
        } else if (key == "linkpath") {
            next_link_ = std::string(value);
        } else if (key == "size" && (number = decimal(value, key))) {
            next_size_ = *number;
        } else if (key == "uid" && (number = decimal(value, key))) {
            next_uid_ = *number;
        } else if (key == "gid" && (number = decimal(value, key))) {
            next_gid_ = *number;
        } else if (key == "mtime") {
            auto t = pax_time(value);
            if (!t) {
                return fail(t.error());
            }
            next_mtime_ = *t;
        }
        if (!number) {
            return fail(number.error());
        }
    }
    skip_then_header(padding_);
    return ok();
}

}  // namespace sbx::agent::tar
