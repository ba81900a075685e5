#include "host-tools/sbxd/proxy/auth.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <array>
#include <vector>

#include <boost/beast/core/string.hpp>

#include <fmt/core.h>

#include "base/hex.hpp"

namespace sbx::sbxd::proxy {

namespace bhttp = boost::beast::http;

namespace {

// application/x-www-form-urlencoded decoding (WHATWG URL §5.1): '+' is a
// space, %XX a byte; a '%' not followed by two hex digits stays as it is.
std::string form_decode(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (std::size_t i = 0; i < text.size(); ++i) {
        char c = text[i];
        if (c == '+') {
            out.push_back(' ');
        } else if (c == '%' && i + 2 < text.size() && hex_digit_value(text[i + 1]) >= 0 &&
                   hex_digit_value(text[i + 2]) >= 0) {
            out.push_back(static_cast<char>(hex_digit_value(text[i + 1]) * 16 + hex_digit_value(text[i + 2])));
            i += 2;
        } else {
            out.push_back(c);
        }
    }
    return out;
}

std::string_view trim(std::string_view text) {
    while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) {
        text.remove_prefix(1);
    }
    while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) {
        text.remove_suffix(1);
    }
    return text;
}

// The cookie-pairs of one Cookie header (RFC 6265 §5.4: "; "-separated
// name=value).
struct CookiePair {
    std::string_view name;
    std::string_view value;
    std::string_view whole;
};
std::vector<CookiePair> cookie_pairs(std::string_view header) {
    std::vector<CookiePair> pairs;
    while (!header.empty()) {
        auto semicolon = header.find(';');
        std::string_view pair = trim(header.substr(0, semicolon));
        header = semicolon == std::string_view::npos ? std::string_view{} : header.substr(semicolon + 1);
        if (pair.empty()) {
            continue;
        }
        auto equals = pair.find('=');
        std::string_view name = trim(pair.substr(0, equals));
        std::string_view value =
            equals == std::string_view::npos ? std::string_view{} : trim(pair.substr(equals + 1));
        if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
            value = value.substr(1, value.size() - 2);  // RFC 6265 §4.1.1: DQUOTE *cookie-octet DQUOTE
        }
        pairs.push_back({name, value, pair});
    }
    return pairs;
}

// The credentials of an Authorization value "Bearer <token>" (the scheme
// is case-insensitive, RFC 9110 §11.1).
std::optional<std::string_view> bearer_of(std::string_view value) {
    value = trim(value);
    constexpr std::string_view kScheme = "bearer";
    if (value.size() <= kScheme.size() || !boost::beast::iequals(value.substr(0, kScheme.size()), kScheme) ||
        (value[kScheme.size()] != ' ' && value[kScheme.size()] != '\t')) {
        return std::nullopt;
    }
    return trim(value.substr(kScheme.size()));
}

}  // namespace

std::optional<QueryToken> take_query_token(std::string_view target) {
    auto question = target.find('?');
    if (question == std::string_view::npos) {
        return std::nullopt;
    }
    std::string_view path = target.substr(0, question);
    std::string_view query = target.substr(question + 1);
    std::string_view fragment;
    if (auto hash = query.find('#'); hash != std::string_view::npos) {
        fragment = query.substr(hash);  // not sent by browsers, kept when a client does
        query = query.substr(0, hash);
    }
    std::optional<std::string> token;
    std::string kept;
    while (true) {
        auto amp = query.find('&');
        std::string_view param = query.substr(0, amp);
        auto equals = param.find('=');
        if (param.substr(0, equals) == kTokenParameter) {
            if (!token) {
                token = form_decode(equals == std::string_view::npos ? std::string_view{}
                                                                     : param.substr(equals + 1));
            }
        } else if (!param.empty()) {
            kept += kept.empty() ? "" : "&";
            kept += param;
        }
        if (amp == std::string_view::npos) {
            break;
        }
        query = query.substr(amp + 1);
    }
    if (!token) {
        return std::nullopt;
    }
    std::string without(path.empty() ? "/" : path);
    if (!kept.empty()) {
        without += "?" + kept;
    }
    without += fragment;
    return QueryToken{std::move(*token), std::move(without)};
}

bool same_secret(std::string_view a, std::string_view b) {
    std::array<unsigned char, EVP_MAX_MD_SIZE> da{}, db{};
    unsigned la = 0, lb = 0;
    if (EVP_Digest(a.data(), a.size(), da.data(), &la, EVP_sha256(), nullptr) != 1 ||
        EVP_Digest(b.data(), b.size(), db.data(), &lb, EVP_sha256(), nullptr) != 1 || la != lb) {
        return false;
    }
    return CRYPTO_memcmp(da.data(), db.data(), la) == 0;
}

std::string auth_cookie(std::string_view token) {
    return fmt::format("{}={}; Path=/; HttpOnly; Secure; SameSite=Lax", kAuthCookie, token);
}

bool carries_token(const bhttp::fields& headers, std::string_view token) {
    if (token.empty()) {
        return false;
    }
    bool found = false;  // every candidate is compared, so the time says nothing of which one matched
    for (const auto& field : headers) {
        if (field.name() == bhttp::field::cookie) {
            for (const auto& pair : cookie_pairs(field.value())) {
                if (pair.name == kAuthCookie) {
                    found = same_secret(pair.value, token) || found;
                }
            }
        } else if (field.name() == bhttp::field::authorization) {
            if (auto bearer = bearer_of(field.value())) {
                found = same_secret(*bearer, token) || found;
            }
        } else if (boost::beast::iequals(field.name_string(), kAuthHeader)) {
            found = same_secret(trim(field.value()), token) || found;
        }
    }
    return found;
}

void strip_credentials(bhttp::fields& headers, std::string_view token) {
    std::vector<std::string> cookies;
    for (auto [it, end] = headers.equal_range(bhttp::field::cookie); it != end; ++it) {
        const auto& field = *it;
        std::string kept;
        for (const auto& pair : cookie_pairs(field.value())) {
            if (pair.name != kAuthCookie) {
                kept += kept.empty() ? "" : "; ";
                kept += pair.whole;
            }
        }
        if (!kept.empty()) {
            cookies.push_back(std::move(kept));
        }
    }
    headers.erase(bhttp::field::cookie);
    for (auto& cookie : cookies) {
        headers.insert(bhttp::field::cookie, cookie);
    }
    headers.erase(kAuthHeader);
    std::vector<std::string> authorizations;
    for (auto [it, end] = headers.equal_range(bhttp::field::authorization); it != end; ++it) {
        const auto& field = *it;
        auto bearer = bearer_of(field.value());
        if (!bearer || token.empty() || !same_secret(*bearer, token)) {
            authorizations.emplace_back(field.value());
        }
    }
    headers.erase(bhttp::field::authorization);
    for (auto& value : authorizations) {
        headers.insert(bhttp::field::authorization, value);
    }
}

}  // namespace sbx::sbxd::proxy
