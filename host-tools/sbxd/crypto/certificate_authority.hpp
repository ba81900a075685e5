// sbxd's own certificate authority: one ECDSA P-256 key and self-signed CA
// certificate per host, kept in a directory of the state dir, that signs
// short-lived server certificates for the hosted-port proxy
// (docs/sbxd.md, "Certificates"). Profile: RFC 5280 §4.2.1 extensions;
// leaf lifetimes within the CA/Browser Forum's 397 days.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "host-tools/sbxd/crypto/openssl_handles.hpp"

namespace sbx::sbxd {

// A server certificate and its key, ready for a TLS server.
struct ServerCertificate {
    std::string chain_pem;  // the leaf, then the CA certificate
    std::string key_pem;    // the leaf's key, PKCS#8 PEM, unencrypted
    std::chrono::system_clock::time_point expiry;  // the leaf's notAfter
};

// Error codes: ca_corrupt (a file that does not parse or is not a P-256
// key / a CA certificate), ca_mismatch (the certificate is not the key's),
// ca_incomplete (a certificate without its key), ca_expired,
// ca_key_exposed (the key file is readable by group or others), ca_io
// (a file or directory that cannot be read or written), invalid_argument
// (issue_server's input), internal (OpenSSL failed to make something).
class CertificateAuthority {
public:
    static constexpr std::chrono::seconds kCaValidity{std::chrono::hours(24) * 3650};
    static constexpr std::chrono::seconds kMaxServerValidity{std::chrono::hours(24) * 397};

    // DIR/ca.key (mode 0600) and DIR/ca.pem (0644); DIR is made (0700)
    // when missing. The first start makes both; later starts load and check
    // them. A key without a certificate (a first start cut short between
    // the two writes) gets a new certificate; nothing else is replaced.
    static Result<CertificateAuthority> open_or_create(std::string dir);

    // A fresh P-256 leaf for DNS_NAMES (crypto/dns_name.hpp; lowercased,
    // duplicates dropped, at most 100), valid for VALIDITY (1 s .. kMaxServerValidity) from now,
    // its notBefore an hour back for clocks that lag. Safe to call from
    // several threads at once.
    [[nodiscard]] Result<ServerCertificate> issue_server(const std::vector<std::string>& dns_names,
                                                         std::chrono::seconds validity) const;

    // The CA certificate as PEM, what clients are told to trust.
    [[nodiscard]] const std::string& ca_pem() const { return ca_pem_; }
    [[nodiscard]] std::chrono::system_clock::time_point ca_expiry() const { return ca_expiry_; }
    [[nodiscard]] const std::string& key_path() const { return key_path_; }
    [[nodiscard]] const std::string& certificate_path() const { return certificate_path_; }

private:
    CertificateAuthority() = default;

    EvpPkeyPtr key_;
    X509Ptr certificate_;
    std::string ca_pem_;
    std::chrono::system_clock::time_point ca_expiry_;
    std::string key_path_;
    std::string certificate_path_;
};

}  // namespace sbx::sbxd
