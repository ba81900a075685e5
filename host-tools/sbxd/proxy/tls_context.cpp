#include "host-tools/sbxd/proxy/tls_context.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509err.h>

#include <cstring>

#include <boost/asio/buffer.hpp>
#include <boost/asio/ssl/error.hpp>

namespace sbx::sbxd::proxy {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;

namespace {

// ALPN (RFC 7301 §3.2): "http/1.1" when the client offers it, else no
// protocol (the client then speaks HTTP/1.1 anyway; h2 is never chosen).
int select_http11(SSL* /*ssl*/, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
                  unsigned int inlen, void* /*arg*/) {
    static constexpr unsigned char kHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
    unsigned char* selected = nullptr;
    if (SSL_select_next_proto(&selected, outlen, kHttp11, sizeof kHttp11, in, inlen) !=
        OPENSSL_NPN_NEGOTIATED) {
        return SSL_TLSEXT_ERR_NOACK;
    }
    *out = selected;
    return SSL_TLSEXT_ERR_OK;
}

// asio's error from SSL_CTX_use_PrivateKey: the packed OpenSSL code.
bool is_key_mismatch(const boost::system::error_code& ec) {
    if (ec.category() != asio::error::get_ssl_category()) {
        return false;
    }
    const auto code = static_cast<unsigned long>(static_cast<unsigned int>(ec.value()));
    return ERR_GET_LIB(code) == ERR_LIB_X509 && ERR_GET_REASON(code) == X509_R_KEY_VALUES_MISMATCH;
}

}  // namespace

Result<ssl::context> make_tls_context(const std::string& cert_chain_pem, const std::string& private_key_pem) {
    if (cert_chain_pem.empty() || private_key_pem.empty()) {
        return make_coded_error("bad_certificate",
                                "the proxy needs a certificate chain and a private key: the {} is empty",
                                cert_chain_pem.empty() ? "certificate chain" : "private key");
    }
    ssl::context context(ssl::context::tls_server);
    boost::system::error_code ec;
    context.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                            ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::single_dh_use,
                        ec);
    SSL_CTX* native = context.native_handle();
    if (ec || SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION) != 1) {
        return make_coded_error("bad_certificate", "setting the TLS versions failed");
    }
    // No renegotiation (RFC 5746 made it safe, not cheap: a client could
    // keep the server busy with it); the server's cipher order wins.
    SSL_CTX_set_options(native, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
    context.use_certificate_chain(asio::buffer(cert_chain_pem), ec);
    if (ec) {
        return make_coded_error(
            "bad_certificate",
            "the certificate chain does not load (want PEM certificates, the leaf first): {}", ec.message());
    }
    context.use_private_key(asio::buffer(private_key_pem), ssl::context::pem, ec);
    if (ec) {
        // OpenSSL checks the key against the leaf as it loads it: a key
        // of another certificate fails here, not at the check below.
        if (is_key_mismatch(ec)) {
            return make_coded_error("bad_certificate", "the private key does not match the certificate");
        }
        return make_coded_error("bad_certificate",
                                "the private key does not load (want an unencrypted PEM private key): {}",
                                ec.message());
    }
    if (SSL_CTX_check_private_key(native) != 1) {
        ERR_clear_error();
        return make_coded_error("bad_certificate", "the private key does not match the certificate");
    }
    SSL_CTX_set_alpn_select_cb(native, select_http11, nullptr);
    return context;
}

}  // namespace sbx::sbxd::proxy
