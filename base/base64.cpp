#include "base/base64.hpp"

#include <boost/beast/core/detail/base64.hpp>

namespace sbx {

std::string base64_encode(std::string_view bytes) {
    namespace b64 = boost::beast::detail::base64;
    std::string out(b64::encoded_size(bytes.size()), '\0');
    out.resize(b64::encode(out.data(), bytes.data(), bytes.size()));
    return out;
}

Result<std::string> base64_decode(std::string_view text) {
    namespace b64 = boost::beast::detail::base64;
    if (text.size() % 4 != 0) {
        return make_coded_error("invalid_base64", "base64 of {} characters, not a multiple of 4", text.size());
    }
    std::string out(b64::decoded_size(text.size()), '\0');
    auto [written, read] = b64::decode(out.data(), text.data(), text.size());
    std::string_view rest = text.substr(read);
    if (rest.size() > 2 || rest.find_first_not_of('=') != std::string_view::npos) {
        return make_coded_error("invalid_base64", "not base64 at character {}", read);
    }
    out.resize(written);
    return out;
}

}  // namespace sbx
