// Sequential access to a parsed chain: ChainReader over its device-readable
// buffers, ChainWriter over its device-writable ones. Reads copy out of
// guest memory once (the driver may change the buffer meanwhile), so a
// value checked is the value used. The iovec forms hand guest buffers to
// readv/writev/io_uring without copying.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "base/result.hpp"
#include "devices/virtio/queue/descriptor_chain.hpp"

namespace sbx::virtio {

namespace detail {
// A cursor over a list of segments.
class SegmentCursor {
public:
    explicit SegmentCursor(std::span<const Segment> segments, std::uint64_t total)
        : segments_(segments), remaining_(total) {}
    [[nodiscard]] std::uint64_t remaining() const { return remaining_; }
    // Calls fn(span) for up to `len` bytes from the cursor, advancing it;
    // returns the bytes visited.
    template <typename Fn>
    std::size_t visit(std::size_t len, Fn&& fn);
    // Appends iovecs for up to `len` bytes from the cursor, advancing it.
    std::size_t take_iovecs(std::size_t len, std::vector<iovec>& out);

private:
    std::span<const Segment> segments_;
    std::size_t index_ = 0;
    std::size_t offset_ = 0;  // within segments_[index_]
    std::uint64_t remaining_;
};

template <typename Fn>
std::size_t SegmentCursor::visit(std::size_t len, Fn&& fn) {
    std::size_t done = 0;
    while (done < len && index_ < segments_.size()) {
        auto bytes = segments_[index_].bytes.subspan(offset_);
        std::size_t n = std::min(bytes.size(), len - done);
        fn(bytes.first(n));
        done += n;
        offset_ += n;
        if (offset_ == segments_[index_].bytes.size()) {
            ++index_;
            offset_ = 0;
        }
    }
    remaining_ -= done;
    return done;
}
}  // namespace detail

class ChainReader {
public:
    explicit ChainReader(const DescriptorChain& chain) : cursor_(chain.readable(), chain.readable_bytes()) {}

    [[nodiscard]] std::uint64_t remaining() const { return cursor_.remaining(); }
    // Copies up to out.size() bytes; returns how many.
    std::size_t read(std::span<std::uint8_t> out);
    [[nodiscard]] Result<void> read_exact(std::span<std::uint8_t> out);
    template <typename T>
    [[nodiscard]] Result<T> read_obj() {
        static_assert(std::is_trivially_copyable_v<T>);
        T value{};
        if (auto r = read_exact(std::span(reinterpret_cast<std::uint8_t*>(&value), sizeof(T))); !r) {
            return r.error();
        }
        return value;
    }
    std::size_t skip(std::size_t len);
    std::size_t take_iovecs(std::size_t len, std::vector<iovec>& out) { return cursor_.take_iovecs(len, out); }

private:
    detail::SegmentCursor cursor_;
};

class ChainWriter {
public:
    explicit ChainWriter(const DescriptorChain& chain) : cursor_(chain.writable(), chain.writable_bytes()) {}

    [[nodiscard]] std::uint64_t available() const { return cursor_.remaining(); }
    [[nodiscard]] std::uint32_t written() const { return written_; }
    // Copies up to in.size() bytes; returns how many.
    std::size_t write(std::span<const std::uint8_t> in);
    [[nodiscard]] Result<void> write_exact(std::span<const std::uint8_t> in);
    template <typename T>
    [[nodiscard]] Result<void> write_obj(const T& value) {
        static_assert(std::is_trivially_copyable_v<T>);
        return write_exact(std::span(reinterpret_cast<const std::uint8_t*>(&value), sizeof(T)));
    }
    // Iovecs for up to `len` writable bytes; the caller reports with
    // commit() how many of them it actually filled.
    std::size_t take_iovecs(std::size_t len, std::vector<iovec>& out) { return cursor_.take_iovecs(len, out); }
    void commit(std::size_t filled) { written_ += static_cast<std::uint32_t>(filled); }
    // Advances without writing (e.g. past a header filled in later).
    std::size_t skip(std::size_t len);

private:
    detail::SegmentCursor cursor_;
    std::uint32_t written_ = 0;  // a chain holds < 4 GiB (checked at parse)
};

}  // namespace sbx::virtio
