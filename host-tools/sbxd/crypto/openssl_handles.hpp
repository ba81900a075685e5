// RAII owners for OpenSSL objects (each freed with its own *_free) and the
// OpenSSL error queue as an sbx::Error.
#pragma once

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "base/result.hpp"

namespace sbx::sbxd {

template <auto Free>
struct OpenSslFree {
    template <typename T>
    void operator()(T* p) const {
        Free(p);
    }
};

using EvpPkeyPtr = std::unique_ptr<EVP_PKEY, OpenSslFree<&EVP_PKEY_free>>;
using X509Ptr = std::unique_ptr<X509, OpenSslFree<&X509_free>>;
using X509NamePtr = std::unique_ptr<X509_NAME, OpenSslFree<&X509_NAME_free>>;
using X509ExtensionPtr = std::unique_ptr<X509_EXTENSION, OpenSslFree<&X509_EXTENSION_free>>;
using GeneralNamesPtr = std::unique_ptr<GENERAL_NAMES, OpenSslFree<&GENERAL_NAMES_free>>;
using GeneralNamePtr = std::unique_ptr<GENERAL_NAME, OpenSslFree<&GENERAL_NAME_free>>;
using Asn1Ia5StringPtr = std::unique_ptr<ASN1_IA5STRING, OpenSslFree<&ASN1_IA5STRING_free>>;
using BignumPtr = std::unique_ptr<BIGNUM, OpenSslFree<&BN_free>>;
using BioPtr = std::unique_ptr<BIO, OpenSslFree<&BIO_free_all>>;

// An error with CODE whose message is WHAT and the reasons OpenSSL queued
// (the queue is emptied).
[[nodiscard]] inline Error openssl_error(std::string_view code, std::string_view what) {
    std::string message(what);
    char reason[256];
    for (unsigned long e = ERR_get_error(); e != 0; e = ERR_get_error()) {
        ERR_error_string_n(e, reason, sizeof reason);
        message += message.size() == what.size() ? ": " : "; ";
        message += reason;
    }
    return Error{std::move(message), 0, std::string(code)};
}

}  // namespace sbx::sbxd
