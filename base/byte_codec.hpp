// Little-endian encoding of plain state for snapshots. ByteWriter appends;
// ByteReader reads with a sticky error: a read past the end returns zeros
// and marks the reader failed, and finish() turns that (or unread trailing
// bytes) into one Error. Saved state is untrusted input on restore, so
// every decoder ends with finish() and then validates the values it read.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "base/result.hpp"

namespace sbx {

class ByteWriter {
public:
    void u8(std::uint8_t v) { bytes_.push_back(v); }
    void u16(std::uint16_t v) { put_le(v); }
    void u32(std::uint32_t v) { put_le(v); }
    void u64(std::uint64_t v) { put_le(v); }
    void boolean(bool v) { u8(v ? 1 : 0); }
    void raw(std::span<const std::uint8_t> data) { bytes_.insert(bytes_.end(), data.begin(), data.end()); }
    // A u32 length, then the bytes.
    void blob(std::span<const std::uint8_t> data) {
        u32(static_cast<std::uint32_t>(data.size()));
        raw(data);
    }
    void string(std::string_view s) { blob({reinterpret_cast<const std::uint8_t*>(s.data()), s.size()}); }
    // A kernel ABI struct (kvm_regs, ...) as its exact bytes, length-prefixed.
    template <typename T>
    void pod(const T& value) {
        static_assert(std::is_trivially_copyable_v<T>);
        blob({reinterpret_cast<const std::uint8_t*>(&value), sizeof(T)});
    }

    [[nodiscard]] const std::vector<std::uint8_t>& bytes() const { return bytes_; }
    [[nodiscard]] std::vector<std::uint8_t> take() { return std::move(bytes_); }

private:
    template <typename T>
    void put_le(T v) {
        for (std::size_t i = 0; i < sizeof(T); ++i) {
            bytes_.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
        }
    }
    std::vector<std::uint8_t> bytes_;
};

class ByteReader {
public:
    explicit ByteReader(std::span<const std::uint8_t> data) : data_(data) {}

    std::uint8_t u8() { return get_le<std::uint8_t>(); }
    std::uint16_t u16() { return get_le<std::uint16_t>(); }
    std::uint32_t u32() { return get_le<std::uint32_t>(); }
    std::uint64_t u64() { return get_le<std::uint64_t>(); }
    bool boolean() {
        auto v = u8();
        if (v > 1) {
            fail("a boolean byte is not 0 or 1");
        }
        return v == 1;
    }
    // `n` bytes as a view into the input (empty on failure).
    std::span<const std::uint8_t> raw(std::size_t n) {
        if (!take(n)) {
            return {};
        }
        return data_.subspan(pos_ - n, n);
    }
    // A length-prefixed blob of at most `max` bytes.
    std::span<const std::uint8_t> blob(std::size_t max) {
        auto n = u32();
        if (n > max) {
            fail("a blob is longer than allowed");
            return {};
        }
        return raw(n);
    }
    std::string string(std::size_t max) {
        auto b = blob(max);
        return {reinterpret_cast<const char*>(b.data()), b.size()};
    }
    // The counterpart of ByteWriter::pod: the length must be exactly sizeof(T).
    template <typename T>
    T pod() {
        static_assert(std::is_trivially_copyable_v<T>);
        T value{};
        auto b = blob(sizeof(T));
        if (!failed_ && b.size() != sizeof(T)) {
            fail("a kernel structure has the wrong size");
        }
        if (!failed_) {
            std::memcpy(&value, b.data(), sizeof(T));
        }
        return value;
    }
    // A count of items that follow, each at least `min_item_bytes` long:
    // refused when the remaining input cannot hold them (no huge allocations
    // from a hostile count).
    std::uint32_t count(std::size_t min_item_bytes, std::uint32_t max) {
        auto n = u32();
        if (n > max || (min_item_bytes > 0 && n > remaining() / min_item_bytes)) {
            fail("an item count is larger than the data allows");
            return 0;
        }
        return n;
    }

    void fail(const char* why) {
        if (!failed_) {
            failed_ = true;
            why_ = why;
        }
    }
    [[nodiscard]] bool failed() const { return failed_; }
    [[nodiscard]] std::size_t remaining() const { return data_.size() - pos_; }
    [[nodiscard]] bool at_end() const { return pos_ == data_.size(); }

    // Ok when every read succeeded and the input was consumed exactly.
    [[nodiscard]] Result<void> finish(std::string_view what) const {
        if (failed_) {
            return make_error("{}: {} (at byte {} of {})", what, why_, pos_, data_.size());
        }
        if (!at_end()) {
            return make_error("{}: {} unexpected trailing bytes", what, remaining());
        }
        return ok();
    }

private:
    bool take(std::size_t n) {
        if (failed_) {
            return false;
        }
        if (n > remaining()) {
            fail("truncated");
            return false;
        }
        pos_ += n;
        return true;
    }
    template <typename T>
    T get_le() {
        if (!take(sizeof(T))) {
            return 0;
        }
        T v = 0;
        for (std::size_t i = 0; i < sizeof(T); ++i) {
            v = static_cast<T>(v | static_cast<T>(static_cast<T>(data_[pos_ - sizeof(T) + i]) << (8 * i)));
        }
        return v;
    }

    std::span<const std::uint8_t> data_;
    std::size_t pos_ = 0;
    bool failed_ = false;
    const char* why_ = "";
};

}  // namespace sbx
