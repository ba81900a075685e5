// The proxy's TLS server context (OpenSSL 3 through asio::ssl): TLS 1.2
// and 1.3 only (RFC 8996 deprecates 1.0 and 1.1), ALPN "http/1.1" (RFC
// 7301), the certificate chain and key from PEM text.
#pragma once

#include <string>

#include <boost/asio/ssl/context.hpp>

#include "base/result.hpp"

namespace sbx::sbxd::proxy {

// Code "bad_certificate" when the chain or key do not load or do not match.
[[nodiscard]] Result<boost::asio::ssl::context> make_tls_context(const std::string& cert_chain_pem,
                                                                 const std::string& private_key_pem);

}  // namespace sbx::sbxd::proxy
