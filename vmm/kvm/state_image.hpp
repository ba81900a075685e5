// Saved KVM structures as byte images (kvm_state.hpp keeps them so), for
// the KVM layer's .cpp files: to an image, back from one with its size
// checked, and the first failure among several such decodings.
#pragma once

#include <cstring>
#include <vector>

#include "base/result.hpp"

namespace sbx::kvm {

template <typename T>
std::vector<std::uint8_t> image_of(const T& value) {
    std::vector<std::uint8_t> out(sizeof(T));
    std::memcpy(out.data(), &value, sizeof(T));
    return out;
}

template <typename T>
Result<T> from_image(const std::vector<std::uint8_t>& image, const char* what) {
    if (image.size() != sizeof(T)) {
        return make_error("{}: saved image is {} bytes, struct is {}", what, image.size(), sizeof(T));
    }
    T value{};
    std::memcpy(&value, image.data(), sizeof(T));
    return value;
}

// The error of the first result that failed, or nullptr.
template <typename... Results>
const Error* first_error(const Results&... results) {
    const Error* found = nullptr;
    ((found = found != nullptr ? found : (results ? nullptr : &results.error())), ...);
    return found;
}

}  // namespace sbx::kvm
