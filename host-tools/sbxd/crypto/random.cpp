#include "host-tools/sbxd/crypto/random.hpp"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <vector>

namespace sbx::sbxd {

namespace {

std::string to_hex(const unsigned char* data, std::size_t size) {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string out;
    out.reserve(size * 2);
    for (std::size_t i = 0; i < size; ++i) {
        out.push_back(kDigits[data[i] >> 4]);
        out.push_back(kDigits[data[i] & 0xf]);
    }
    return out;
}

}  // namespace

Result<std::string> random_hex(std::size_t count) {
    std::vector<unsigned char> bytes(count);
    if (RAND_bytes(bytes.data(), static_cast<int>(bytes.size())) != 1) {
        return make_coded_error("internal", "the OpenSSL random generator failed");
    }
    return to_hex(bytes.data(), bytes.size());
}

std::string sha256_hex(std::string_view text) {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int size = 0;
    // EVP_Digest fails only when it cannot allocate; the empty digest then
    // matches no stored key.
    if (EVP_Digest(text.data(), text.size(), digest, &size, EVP_sha256(), nullptr) != 1) {
        return {};
    }
    return to_hex(digest, size);
}

}  // namespace sbx::sbxd
