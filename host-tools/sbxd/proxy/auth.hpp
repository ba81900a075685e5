// Who may reach a private hosted port: the holder of its token, given
// once as `?_token=` (answered with a redirect that sets the cookie) and
// then as the `__sbx_auth` cookie (RFC 6265), `Authorization: Bearer`
// (RFC 6750 §2.1) or `X-Sbx-Auth`. Tokens compare in constant time, and
// every place a token travels in is removed before a request goes on to
// the app.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <boost/beast/http/fields.hpp>

namespace sbx::sbxd::proxy {

inline constexpr std::string_view kAuthCookie = "__sbx_auth";
inline constexpr std::string_view kAuthHeader = "X-Sbx-Auth";
inline constexpr std::string_view kTokenParameter = "_token";

struct QueryToken {
    std::string token;           // the first `_token`'s value, percent-decoded
    std::string target_without;  // the request target with every `_token` parameter removed
};

// The `_token` of an origin-form request target (RFC 9112 §3.2.1), if
// its query has one.
[[nodiscard]] std::optional<QueryToken> take_query_token(std::string_view target);

// a == b without a timing that depends on where they differ (both are
// hashed with SHA-256, the digests compared with CRYPTO_memcmp).
[[nodiscard]] bool same_secret(std::string_view a, std::string_view b);

// The Set-Cookie value that stores token: host-only (no Domain), so a
// token for one sandbox's port is never sent to another's.
[[nodiscard]] std::string auth_cookie(std::string_view token);

// Whether the request's cookie, bearer or X-Sbx-Auth carries token.
[[nodiscard]] bool carries_token(const boost::beast::http::fields& headers, std::string_view token);

// Removes the `__sbx_auth` cookie (the Cookie header when nothing else is
// left), every X-Sbx-Auth, and an Authorization whose bearer is token.
void strip_credentials(boost::beast::http::fields& headers, std::string_view token);

}  // namespace sbx::sbxd::proxy
