#include "host-tools/sbxd/crypto/base64.hpp"

#include <openssl/evp.h>

#include <algorithm>

namespace sbx::sbxd {

std::string base64_encode(std::string_view bytes) {
    std::string out(4 * ((bytes.size() + 2) / 3), '\0');
    // EVP_EncodeBlock takes an int length: encode in pieces of a multiple
    // of 3 bytes, so the pieces join without padding between them.
    constexpr std::size_t kPiece = 3 << 20;
    std::size_t at = 0;
    for (std::size_t in = 0; in < bytes.size(); in += kPiece) {
        std::size_t n = std::min(kPiece, bytes.size() - in);
        at += static_cast<std::size_t>(EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data() + at),
                                                       reinterpret_cast<const unsigned char*>(bytes.data() + in),
                                                       static_cast<int>(n)));
    }
    out.resize(at);
    return out;
}

Result<std::string> base64_decode(std::string_view text) {
    auto bad = [] { return make_coded_error("invalid_argument", "not base64 (RFC 4648, padded)"); };
    if (text.size() % 4 != 0) {
        return bad();
    }
    std::string out(text.size() / 4 * 3, '\0');
    constexpr std::size_t kPiece = 4 << 20;
    std::size_t at = 0;
    for (std::size_t in = 0; in < text.size(); in += kPiece) {
        std::size_t n = std::min(kPiece, text.size() - in);
        int got = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data() + at),
                                  reinterpret_cast<const unsigned char*>(text.data() + in), static_cast<int>(n));
        if (got < 0) {
            return bad();
        }
        at += static_cast<std::size_t>(got);
    }
    // EVP_DecodeBlock counts the padding's zero bytes as output.
    std::size_t pad = 0;
    if (!text.empty() && text.back() == '=') {
        pad = text.size() >= 2 && text[text.size() - 2] == '=' ? 2 : 1;
    }
    out.resize(at - pad);
    return out;
}

}  // namespace sbx::sbxd
