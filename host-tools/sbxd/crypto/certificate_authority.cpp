#include "host-tools/sbxd/crypto/certificate_authority.hpp"

#include <openssl/ec.h>
#include <openssl/objects.h>
#include <openssl/pem.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstring>
#include <ctime>
#include <initializer_list>
#include <utility>

#include <fmt/format.h>

#include "base/atomic_file.hpp"
#include "base/unique_fd.hpp"
#include "host-tools/sbxd/crypto/dns_name.hpp"

namespace sbx::sbxd {

namespace {

using Clock = std::chrono::system_clock;

constexpr std::size_t kMaxPemBytes = 64 * 1024;
constexpr auto kBackdate = std::chrono::hours(1);
constexpr std::size_t kMaxDnsNames = 100;
constexpr std::size_t kMaxCommonName = 64;  // RFC 5280 Appendix A.1, ub-common-name
constexpr std::size_t kMaxHostnameInCaName = 40;

Error ca_error(std::string_view code, std::string message) {
    ERR_clear_error();
    return Error{std::move(message), 0, std::string(code)};
}

Error ca_expired_error(const std::string& certificate_path) {
    return ca_error("ca_expired", fmt::format("{} has expired; move the CA's directory away to make a new CA",
                                              certificate_path));
}

// OpenSSL's PEM readers ask for a passphrase on the terminal without a
// callback; an encrypted key is refused instead.
int no_passphrase(char* /*buf*/, int /*size*/, int /*rwflag*/, void* /*u*/) { return 0; }

Result<EvpPkeyPtr> generate_p256_key() {
    EvpPkeyPtr key(EVP_EC_gen("P-256"));
    if (!key) {
        return openssl_error("internal", "cannot generate a P-256 key");
    }
    return key;
}

bool is_p256(const EVP_PKEY* key) {
    if (EVP_PKEY_is_a(key, "EC") != 1) {
        return false;
    }
    char group[64];
    std::size_t length = 0;
    if (EVP_PKEY_get_group_name(key, group, sizeof group, &length) != 1) {
        return false;
    }
    int nid = OBJ_sn2nid(group);
    if (nid == NID_undef) {
        nid = EC_curve_nist2nid(group);
    }
    return nid == NID_X9_62_prime256v1;
}

Result<std::string> memory_bio_text(BIO* bio) {
    char* data = nullptr;
    const long size = BIO_get_mem_data(bio, &data);
    if (size <= 0 || data == nullptr) {
        return openssl_error("internal", "PEM encoding produced nothing");
    }
    return std::string(data, static_cast<std::size_t>(size));
}

Result<std::string> key_to_pem(EVP_PKEY* key) {
    BioPtr bio(BIO_new(BIO_s_mem()));
    if (!bio || PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
        return openssl_error("internal", "cannot encode a key as PEM");
    }
    return memory_bio_text(bio.get());
}

Result<std::string> certificate_to_pem(X509* certificate) {
    BioPtr bio(BIO_new(BIO_s_mem()));
    if (!bio || PEM_write_bio_X509(bio.get(), certificate) != 1) {
        return openssl_error("internal", "cannot encode a certificate as PEM");
    }
    return memory_bio_text(bio.get());
}

Result<EvpPkeyPtr> parse_key(const std::string& pem, const std::string& path) {
    BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
    EvpPkeyPtr key(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, &no_passphrase, nullptr) : nullptr);
    if (!key) {
        return openssl_error("ca_corrupt", fmt::format("{} is not an unencrypted PEM private key", path));
    }
    if (!is_p256(key.get())) {
        return ca_error("ca_corrupt", fmt::format("{} is not an ECDSA P-256 key", path));
    }
    return key;
}

Result<X509Ptr> parse_certificate(const std::string& pem, const std::string& path) {
    BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
    X509Ptr certificate(bio ? PEM_read_bio_X509(bio.get(), nullptr, &no_passphrase, nullptr) : nullptr);
    if (!certificate) {
        return openssl_error("ca_corrupt", fmt::format("{} is not a PEM certificate", path));
    }
    return certificate;
}

Result<std::string> read_pem_file(const std::string& path) {
    auto text = read_file(path, kMaxPemBytes);
    if (!text) {
        return text.error().with_code("ca_io");
    }
    return std::move(*text);
}

// A positive serial of up to 128 random bits (RFC 5280 §4.1.2.2: at most
// 20 octets, positive; CA/B Forum BR §7.1: at least 64 random bits).
Result<void> set_random_serial(X509* certificate) {
    BignumPtr serial(BN_new());
    if (!serial) {
        return openssl_error("internal", "cannot allocate a serial number");
    }
    do {
        if (BN_rand(serial.get(), 128, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1) {
            return openssl_error("internal", "the OpenSSL random generator failed");
        }
    } while (BN_is_zero(serial.get()) == 1);
    if (BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(certificate)) == nullptr) {
        return openssl_error("internal", "cannot set a serial number");
    }
    return ok();
}

Result<X509NamePtr> name_with_common_name(std::string_view common_name) {
    X509NamePtr name(X509_NAME_new());
    if (!name) {
        return openssl_error("internal", "cannot allocate a name");
    }
    if (!common_name.empty() &&
        X509_NAME_add_entry_by_NID(name.get(), NID_commonName, MBSTRING_UTF8,
                                   reinterpret_cast<const unsigned char*>(common_name.data()),
                                   static_cast<int>(common_name.size()), -1, 0) != 1) {
        return openssl_error("internal", "cannot set a common name");
    }
    return name;
}

// A v3 certificate (RFC 5280 §4.1) with a random serial, not yet signed.
Result<X509Ptr> new_certificate(const X509_NAME* subject, const X509_NAME* issuer, EVP_PKEY* public_key,
                                Clock::time_point not_before, Clock::time_point not_after) {
    X509Ptr certificate(X509_new());
    if (!certificate) {
        return openssl_error("internal", "cannot allocate a certificate");
    }
    if (auto serial = set_random_serial(certificate.get()); !serial) {
        return serial.error();
    }
    // ASN1_TIME_set writes UTCTime through 2049 and GeneralizedTime from
    // 2050, as RFC 5280 §4.1.2.5 asks.
    if (X509_set_version(certificate.get(), X509_VERSION_3) != 1 ||
        X509_set_subject_name(certificate.get(), subject) != 1 ||
        X509_set_issuer_name(certificate.get(), issuer) != 1 ||
        ASN1_TIME_set(X509_getm_notBefore(certificate.get()), Clock::to_time_t(not_before)) == nullptr ||
        ASN1_TIME_set(X509_getm_notAfter(certificate.get()), Clock::to_time_t(not_after)) == nullptr ||
        X509_set_pubkey(certificate.get(), public_key) != 1) {
        return openssl_error("internal", "cannot fill in a certificate");
    }
    return certificate;
}

// One extension in OpenSSL's configuration syntax (x509v3_config(5)); only
// fixed strings go through here, never names from a request.
Result<void> add_extension(X509* subject, X509* issuer, int nid, const char* value) {
    X509V3_CTX context;
    X509V3_set_ctx_nodb(&context);
    X509V3_set_ctx(&context, issuer, subject, nullptr, nullptr, 0);
    X509ExtensionPtr extension(X509V3_EXT_conf_nid(nullptr, &context, nid, value));
    if (!extension || X509_add_ext(subject, extension.get(), -1) != 1) {
        return openssl_error("internal", fmt::format("cannot add the {} extension", OBJ_nid2ln(nid)));
    }
    return ok();
}

Result<void> add_extensions(X509* subject, X509* issuer,
                            std::initializer_list<std::pair<int, const char*>> extensions) {
    for (const auto& [nid, value] : extensions) {
        if (auto added = add_extension(subject, issuer, nid, value); !added) {
            return added;
        }
    }
    return ok();
}

// subjectAltName dNSName entries (RFC 5280 §4.2.1.6), built as ASN.1 so a
// name is never parsed as configuration; critical when the subject is empty.
Result<void> add_dns_names(X509* certificate, const std::vector<std::string>& names, bool critical) {
    GeneralNamesPtr general_names(GENERAL_NAMES_new());
    if (!general_names) {
        return openssl_error("internal", "cannot allocate subjectAltName");
    }
    for (const auto& name : names) {
        Asn1Ia5StringPtr text(ASN1_IA5STRING_new());
        GeneralNamePtr general_name(GENERAL_NAME_new());
        if (!text || !general_name ||
            ASN1_STRING_set(text.get(), name.data(), static_cast<int>(name.size())) != 1) {
            return openssl_error("internal", "cannot allocate a dNSName");
        }
        GENERAL_NAME_set0_value(general_name.get(), GEN_DNS, text.release());
        if (sk_GENERAL_NAME_push(general_names.get(), general_name.get()) <= 0) {
            return openssl_error("internal", "cannot add a dNSName");
        }
        general_name.release();  // owned by general_names now
    }
    if (X509_add1_ext_i2d(certificate, NID_subject_alt_name, general_names.get(), critical ? 1 : 0,
                          X509V3_ADD_DEFAULT) != 1) {
        return openssl_error("internal", "cannot add subjectAltName");
    }
    return ok();
}

Result<void> sign(X509* certificate, EVP_PKEY* issuer_key) {
    if (X509_sign(certificate, issuer_key, EVP_sha256()) <= 0) {  // ecdsa-with-SHA256, RFC 5758 §3.2
        return openssl_error("internal", "cannot sign a certificate");
    }
    return ok();
}

Result<Clock::time_point> not_after_of(const X509* certificate) {
    std::tm tm{};
    if (ASN1_TIME_to_tm(X509_get0_notAfter(certificate), &tm) != 1) {
        return openssl_error("ca_corrupt", "the certificate's notAfter does not parse");
    }
    return Clock::from_time_t(::timegm(&tm));
}

std::string ca_common_name() {
    char host[HOST_NAME_MAX + 1] = {};
    std::string name;
    if (::gethostname(host, sizeof host - 1) == 0) {
        for (const char* c = host; *c != '\0' && name.size() < kMaxHostnameInCaName; ++c) {
            if (std::isalnum(static_cast<unsigned char>(*c)) != 0 || *c == '-' || *c == '.' || *c == '_') {
                name.push_back(*c);
            }
        }
    }
    return "Sandboxer local CA " + (name.empty() ? std::string("host") : name);
}

// The self-signed CA certificate (RFC 5280 §4.2.1.9 basicConstraints
// critical with pathLenConstraint 0: it signs leaves only; §4.2.1.3
// keyUsage keyCertSign and cRLSign; §4.2.1.2 subjectKeyIdentifier).
Result<X509Ptr> make_ca_certificate(EVP_PKEY* key) {
    auto name = name_with_common_name(ca_common_name());
    if (!name) {
        return name.error();
    }
    const auto now = Clock::now();
    auto certificate = new_certificate(name->get(), name->get(), key, now - kBackdate,
                                       now + CertificateAuthority::kCaValidity);
    if (!certificate) {
        return certificate.error();
    }
    X509* c = certificate->get();
    if (auto added = add_extensions(c, c,
                                    {{NID_basic_constraints, "critical,CA:TRUE,pathlen:0"},
                                     {NID_key_usage, "critical,keyCertSign,cRLSign"},
                                     {NID_subject_key_identifier, "hash"}});
        !added) {
        return added.error();
    }
    if (auto signed_ = sign(c, key); !signed_) {
        return signed_.error();
    }
    return std::move(*certificate);
}

// What a loaded CA certificate must be: the key's, a CA, self-signed and
// unexpired.
Result<void> check_ca_certificate(X509* certificate, EVP_PKEY* key, const std::string& path) {
    if (EVP_PKEY_eq(X509_get0_pubkey(certificate), key) != 1) {
        return ca_error("ca_mismatch", fmt::format("{} is not the certificate of the key beside it", path));
    }
    if (X509_check_ca(certificate) != 1) {
        return ca_error("ca_corrupt", fmt::format("{} is not a CA certificate (basicConstraints CA:TRUE)", path));
    }
    if (X509_verify(certificate, key) != 1) {
        return ca_error("ca_corrupt", fmt::format("{}'s self-signature does not verify", path));
    }
    if (X509_cmp_current_time(X509_get0_notAfter(certificate)) <= 0) {
        return ca_expired_error(path);
    }
    return ok();
}

enum class FileState { missing, present };

Result<FileState> file_state(const std::string& path) {
    struct stat st{};
    if (::lstat(path.c_str(), &st) == 0) {
        return FileState::present;
    }
    if (errno == ENOENT) {
        return FileState::missing;
    }
    return sys_error("cannot stat {}", path).with_code("ca_io");
}

Result<void> make_directory(const std::string& dir) {
    if (::mkdir(dir.c_str(), 0700) == 0) {
        return ok();
    }
    if (errno != EEXIST) {
        return sys_error("cannot make {}", dir).with_code("ca_io");
    }
    struct stat st{};
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
        return ca_error("ca_io", fmt::format("{} is not a directory", dir));
    }
    return ok();
}

Result<EvpPkeyPtr> load_key(const std::string& path) {
    struct stat st{};
    if (::stat(path.c_str(), &st) != 0) {
        return sys_error("cannot stat {}", path).with_code("ca_io");
    }
    if ((st.st_mode & 077) != 0) {
        return ca_error("ca_key_exposed", fmt::format("{} is readable by others (mode {:o}); chmod 600 it", path,
                                                      st.st_mode & 07777));
    }
    auto pem = read_pem_file(path);
    if (!pem) {
        return pem.error();
    }
    return parse_key(*pem, path);
}

Result<EvpPkeyPtr> create_key(const std::string& path) {
    auto key = generate_p256_key();
    if (!key) {
        return key.error();
    }
    auto pem = key_to_pem(key->get());
    if (!pem) {
        return pem.error();
    }
    if (auto written = write_file_atomically(path, *pem, 0600); !written) {
        return written.error().with_code("ca_io");
    }
    return std::move(*key);
}

}  // namespace

Result<CertificateAuthority> CertificateAuthority::open_or_create(std::string dir) {
    if (auto made = make_directory(dir); !made) {
        return made.error();
    }
    CertificateAuthority ca;
    ca.key_path_ = dir + "/ca.key";
    ca.certificate_path_ = dir + "/ca.pem";
    auto key_state = file_state(ca.key_path_);
    if (!key_state) {
        return key_state.error();
    }
    auto certificate_state = file_state(ca.certificate_path_);
    if (!certificate_state) {
        return certificate_state.error();
    }
    if (*key_state == FileState::missing && *certificate_state == FileState::present) {
        return ca_error("ca_incomplete",
                        fmt::format("{} has no key {}; restore it, or move both away to make a new CA",
                                    ca.certificate_path_, ca.key_path_));
    }

    auto key = *key_state == FileState::present ? load_key(ca.key_path_) : create_key(ca.key_path_);
    if (!key) {
        return key.error();
    }
    ca.key_ = std::move(*key);

    if (*certificate_state == FileState::present) {
        auto pem = read_pem_file(ca.certificate_path_);
        if (!pem) {
            return pem.error();
        }
        auto certificate = parse_certificate(*pem, ca.certificate_path_);
        if (!certificate) {
            return certificate.error();
        }
        if (auto checked = check_ca_certificate(certificate->get(), ca.key_.get(), ca.certificate_path_); !checked) {
            return checked.error();
        }
        ca.certificate_ = std::move(*certificate);
    } else {
        auto certificate = make_ca_certificate(ca.key_.get());
        if (!certificate) {
            return certificate.error();
        }
        ca.certificate_ = std::move(*certificate);
    }
    // Compute OpenSSL's cached extension values now, so that issue_server
    // only reads the certificate when several threads call it.
    (void)X509_check_purpose(ca.certificate_.get(), -1, 0);

    auto pem = certificate_to_pem(ca.certificate_.get());
    if (!pem) {
        return pem.error();
    }
    ca.ca_pem_ = std::move(*pem);
    if (*certificate_state == FileState::missing) {
        if (auto written = write_file_atomically(ca.certificate_path_, ca.ca_pem_, 0644); !written) {
            return written.error().with_code("ca_io");
        }
    }
    auto expiry = not_after_of(ca.certificate_.get());
    if (!expiry) {
        return expiry.error();
    }
    ca.ca_expiry_ = *expiry;
    return ca;
}

Result<ServerCertificate> CertificateAuthority::issue_server(const std::vector<std::string>& dns_names,
                                                             std::chrono::seconds validity) const {
    if (validity.count() <= 0 || validity > kMaxServerValidity) {
        return make_coded_error("invalid_argument", "a server certificate's validity is 1 to {} seconds, not {}",
                                kMaxServerValidity.count(), validity.count());
    }
    if (dns_names.empty() || dns_names.size() > kMaxDnsNames) {
        return make_coded_error("invalid_argument", "a server certificate has 1 to {} DNS names, not {}",
                                kMaxDnsNames, dns_names.size());
    }
    std::vector<std::string> names;
    for (const auto& name : dns_names) {
        auto normalized = normalize_certificate_dns_name(name);
        if (!normalized) {
            return normalized.error();
        }
        if (std::find(names.begin(), names.end(), *normalized) == names.end()) {
            names.push_back(std::move(*normalized));
        }
    }

    auto key = generate_p256_key();
    if (!key) {
        return key.error();
    }
    // CA/B Forum BR §7.1.4.3: the common name, if any, is one of the SANs.
    const bool has_common_name = names.front().size() <= kMaxCommonName;
    auto subject = name_with_common_name(has_common_name ? names.front() : std::string());
    if (!subject) {
        return subject.error();
    }
    const auto now = Clock::now();
    if (ca_expiry_ <= now) {
        return ca_expired_error(certificate_path_);
    }
    // A leaf outliving its CA would fail verification in its last days.
    const auto not_after = std::min(now + validity, ca_expiry_);
    auto certificate = new_certificate(subject->get(), X509_get_subject_name(certificate_.get()), key->get(),
                                       now - kBackdate, not_after);
    if (!certificate) {
        return certificate.error();
    }
    X509* c = certificate->get();
    if (auto added = add_extensions(c, certificate_.get(),
                                    {{NID_basic_constraints, "critical,CA:FALSE"},
                                     {NID_key_usage, "critical,digitalSignature"},
                                     {NID_ext_key_usage, "serverAuth"},
                                     {NID_subject_key_identifier, "hash"},
                                     {NID_authority_key_identifier, "keyid:always"}});
        !added) {
        return added.error();
    }
    if (auto added = add_dns_names(c, names, !has_common_name); !added) {
        return added.error();
    }
    if (auto signed_ = sign(c, key_.get()); !signed_) {
        return signed_.error();
    }
    auto leaf_pem = certificate_to_pem(c);
    if (!leaf_pem) {
        return leaf_pem.error();
    }
    auto key_pem = key_to_pem(key->get());
    if (!key_pem) {
        return key_pem.error();
    }
    // notAfter holds whole seconds.
    return ServerCertificate{*leaf_pem + ca_pem_, std::move(*key_pem), Clock::from_time_t(Clock::to_time_t(not_after))};
}

}  // namespace sbx::sbxd
