// Little-endian field access in byte buffers (boot structures are x86, so
// little-endian; the host is too). Callers check bounds first: these only
// assert them.
#pragma once

#include <bit>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>

namespace sbx::boot {

static_assert(std::endian::native == std::endian::little, "boot structures are little-endian");

template <typename T>
[[nodiscard]] T load_le(std::span<const std::uint8_t> bytes, std::size_t offset) {
    static_assert(std::is_trivially_copyable_v<T>);
    assert(offset <= bytes.size() && sizeof(T) <= bytes.size() - offset);
    T value;
    std::memcpy(&value, bytes.data() + offset, sizeof(T));
    return value;
}

template <typename T>
void store_le(std::span<std::uint8_t> bytes, std::size_t offset, T value) {
    static_assert(std::is_trivially_copyable_v<T>);
    assert(offset <= bytes.size() && sizeof(T) <= bytes.size() - offset);
    std::memcpy(bytes.data() + offset, &value, sizeof(T));
}

// True when [offset, offset + length) lies inside a buffer of `size` bytes,
// computed without overflow.
[[nodiscard]] constexpr bool range_within(std::uint64_t offset, std::uint64_t length,
                                          std::uint64_t size) {
    return offset <= size && length <= size - offset;
}

}  // namespace sbx::boot
