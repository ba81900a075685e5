// The CA against the real openssl and curl command lines: what it writes,
// what `openssl verify` and `openssl x509 -text` say of its certificates,
// a TLS handshake with `openssl s_server` and curl, and refusals of bad
// files and bad requests. Exits 77 without openssl or curl.
#include "host-tools/sbxd/crypto/certificate_authority.hpp"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <openssl/pem.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "base/child_spawn.hpp"
#include "base/unique_fd.hpp"
#include "host-tools/sbxd/crypto/dns_name.hpp"
#include "host-tools/sbxd/testing/temp_dir.hpp"

using namespace sbx;
using namespace sbx::sbxd;
using sbx::sbxd::testing::TempDir;
using namespace std::chrono_literals;

namespace {

struct CommandOutput {
    int status;
    std::string text;  // stdout and stderr
};

CommandOutput run(const std::string& command) {
    CommandOutput out{-1, {}};
    FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
    REQUIRE(pipe != nullptr);
    char buffer[4096];
    for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) {
        out.text.append(buffer, n);
    }
    const int status = ::pclose(pipe);
    out.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return out;
}

std::string tool_path(const char* name) {
    auto found = run(std::string("command -v ") + name);
    while (!found.text.empty() && found.text.back() == '\n') {
        found.text.pop_back();
    }
    if (found.status != 0 || found.text.empty()) {
        std::printf("SKIP: no %s on PATH\n", name);
        std::exit(77);
    }
    return found.text;
}

void write_text(const std::string& path, const std::string& text) {
    std::ofstream out(path, std::ios::trunc);
    out << text;
    REQUIRE(out.flush());
}

std::string first_pem_block(const std::string& pem) {
    const std::string end = "-----END CERTIFICATE-----\n";
    const auto at = pem.find(end);
    REQUIRE(at != std::string::npos);
    return pem.substr(0, at + end.size());
}

CertificateAuthority open_ca(const std::string& dir) {
    auto ca = CertificateAuthority::open_or_create(dir);
    REQUIRE_MESSAGE(ca.has_value(), (ca ? "" : ca.error().to_string()));
    return std::move(*ca);
}

ServerCertificate issue(const CertificateAuthority& ca, const std::vector<std::string>& names,
                        std::chrono::seconds validity = 24h) {
    auto issued = ca.issue_server(names, validity);
    REQUIRE_MESSAGE(issued.has_value(), (issued ? "" : issued.error().to_string()));
    return std::move(*issued);
}

std::string error_code_of_open(const std::string& dir) {
    auto ca = CertificateAuthority::open_or_create(dir);
    REQUIRE_FALSE(ca.has_value());
    INFO(ca.error().to_string());
    return ca.error().code;
}

mode_t mode_of(const std::string& path) {
    struct stat st{};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    return st.st_mode & 07777;
}

// An openssl s_server on 127.0.0.1 serving one certificate (-www: a status
// page for any GET), stopped with its group when the test ends.
class TlsServer {
public:
    TlsServer(const std::string& openssl, const std::string& chain, const std::string& key, const std::string& log) {
        port_ = free_port();
        auto pid = spawn_session_leader(openssl,
                                        {"s_server", "-accept", "127.0.0.1:" + std::to_string(port_), "-cert", chain,
                                         "-key", key, "-www", "-quiet"},
                                        log);
        REQUIRE_MESSAGE(pid.has_value(), (pid ? "" : pid.error().to_string()));
        pid_ = *pid;
        wait_until_listening();
    }
    TlsServer(const TlsServer&) = delete;
    TlsServer& operator=(const TlsServer&) = delete;
    ~TlsServer() {
        ::kill(-pid_, SIGTERM);
        int status = 0;
        ::waitpid(pid_, &status, 0);
    }
    [[nodiscard]] int port() const { return port_; }

private:
    static int free_port() {
        UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
        REQUIRE(s);
        sockaddr_in address{};
        address.sin_family = AF_INET;
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        REQUIRE(::bind(s.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
        socklen_t size = sizeof address;
        REQUIRE(::getsockname(s.get(), reinterpret_cast<sockaddr*>(&address), &size) == 0);
        return ntohs(address.sin_port);
    }
    void wait_until_listening() const {
        const auto deadline = std::chrono::steady_clock::now() + 10s;
        while (std::chrono::steady_clock::now() < deadline) {
            UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
            sockaddr_in address{};
            address.sin_family = AF_INET;
            address.sin_port = htons(static_cast<std::uint16_t>(port_));
            address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            if (::connect(s.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
                return;
            }
            std::this_thread::sleep_for(20ms);
        }
        FAIL("openssl s_server did not start listening");
    }

    int port_ = 0;
    pid_t pid_ = -1;
};

// A CA certificate for the key at KEY_PATH that expired in 2021 (openssl
// req in OpenSSL 3.0 cannot date one in the past).
std::string expired_ca_certificate(const std::string& key_path) {
    const std::string key_pem = *read_file(key_path, 1 << 16);
    BioPtr bio(BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())));
    EvpPkeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
    REQUIRE(key);
    X509Ptr certificate(X509_new());
    REQUIRE(certificate);
    X509* c = certificate.get();
    X509_NAME* name = X509_get_subject_name(c);
    const std::string cn = "expired CA";
    REQUIRE(X509_NAME_add_entry_by_NID(name, NID_commonName, MBSTRING_UTF8,
                                       reinterpret_cast<const unsigned char*>(cn.data()),
                                       static_cast<int>(cn.size()), -1, 0) == 1);
    REQUIRE(X509_set_issuer_name(c, name) == 1);
    REQUIRE(X509_set_version(c, X509_VERSION_3) == 1);
    REQUIRE(ASN1_INTEGER_set(X509_get_serialNumber(c), 1) == 1);
    REQUIRE(ASN1_TIME_set_string(X509_getm_notBefore(c), "20200101000000Z") == 1);
    REQUIRE(ASN1_TIME_set_string(X509_getm_notAfter(c), "20210101000000Z") == 1);
    REQUIRE(X509_set_pubkey(c, key.get()) == 1);
    X509V3_CTX context;
    X509V3_set_ctx_nodb(&context);
    X509V3_set_ctx(&context, c, c, nullptr, nullptr, 0);
    X509ExtensionPtr constraints(X509V3_EXT_conf_nid(nullptr, &context, NID_basic_constraints, "critical,CA:TRUE"));
    REQUIRE(constraints);
    REQUIRE(X509_add_ext(c, constraints.get(), -1) == 1);
    REQUIRE(X509_sign(c, key.get(), EVP_sha256()) > 0);
    BioPtr out(BIO_new(BIO_s_mem()));
    REQUIRE(PEM_write_bio_X509(out.get(), c) == 1);
    char* data = nullptr;
    const long size = BIO_get_mem_data(out.get(), &data);
    return std::string(data, static_cast<std::size_t>(size));
}

}  // namespace

TEST_CASE("the first start makes the CA's files, a later one loads the same CA") {
    TempDir dir("sbxd-ca");
    const std::string ca_dir = dir.file("ca");
    std::string first_pem;
    {
        CertificateAuthority ca = open_ca(ca_dir);
        first_pem = ca.ca_pem();
        CHECK(ca.key_path() == ca_dir + "/ca.key");
        CHECK(ca.certificate_path() == ca_dir + "/ca.pem");
        CHECK(mode_of(ca_dir) == 0700);
        CHECK(mode_of(ca.key_path()) == 0600);
        CHECK(mode_of(ca.certificate_path()) == 0644);
        CHECK_FALSE(std::filesystem::exists(ca.key_path() + ".tmp"));
        auto file = read_file(ca.certificate_path(), 1 << 16);
        REQUIRE(file.has_value());
        CHECK(*file == first_pem);
        const auto years = std::chrono::duration_cast<std::chrono::hours>(ca.ca_expiry() -
                                                                          std::chrono::system_clock::now());
        CHECK(years.count() > 24 * 3649);
        CHECK(years.count() <= 24 * 3650);
    }
    CertificateAuthority again = open_ca(ca_dir);
    CHECK(again.ca_pem() == first_pem);
}

TEST_CASE("the CA certificate is a self-signed CA for leaves only") {
    const std::string openssl = tool_path("openssl");
    TempDir dir("sbxd-ca");
    CertificateAuthority ca = open_ca(dir.file("ca"));
    auto text = run(openssl + " x509 -noout -text -in " + ca.certificate_path());
    REQUIRE(text.status == 0);
    INFO(text.text);
    CHECK(text.text.find("Subject: CN = Sandboxer local CA ") != std::string::npos);
    CHECK(text.text.find("Public-Key: (256 bit)") != std::string::npos);
    CHECK(text.text.find("NIST CURVE: P-256") != std::string::npos);
    CHECK(text.text.find("Signature Algorithm: ecdsa-with-SHA256") != std::string::npos);
    CHECK(text.text.find("X509v3 Basic Constraints: critical\n                CA:TRUE, pathlen:0") !=
          std::string::npos);
    CHECK(text.text.find("X509v3 Key Usage: critical\n                Certificate Sign, CRL Sign") !=
          std::string::npos);
    CHECK(text.text.find("X509v3 Subject Key Identifier") != std::string::npos);
    CHECK(run(openssl + " verify -x509_strict -CAfile " + ca.certificate_path() + " " + ca.certificate_path())
              .status == 0);
}

TEST_CASE("a server certificate verifies against the CA and names its DNS names for serverAuth") {
    const std::string openssl = tool_path("openssl");
    TempDir dir("sbxd-ca");
    CertificateAuthority ca = open_ca(dir.file("ca"));
    const auto before = std::chrono::system_clock::now();
    ServerCertificate issued = issue(ca, {"*.sbx.localhost", "SBX.localhost"}, 7 * 24h);
    CHECK(issued.chain_pem.substr(first_pem_block(issued.chain_pem).size()) == ca.ca_pem());
    CHECK(issued.expiry >= before + 7 * 24h - 1s);
    CHECK(issued.expiry <= std::chrono::system_clock::now() + 7 * 24h);
    CHECK(issued.key_pem.find("-----BEGIN PRIVATE KEY-----") == 0);

    const std::string chain = dir.file("chain.pem");
    const std::string leaf = dir.file("leaf.pem");
    write_text(chain, issued.chain_pem);
    write_text(leaf, first_pem_block(issued.chain_pem));
    const std::string ca_file = ca.certificate_path();

    auto verified = run(openssl + " verify -CAfile " + ca_file + " -untrusted " + chain + " " + leaf);
    CHECK_MESSAGE(verified.status == 0, verified.text);
    auto strict = run(openssl + " verify -x509_strict -purpose sslserver -CAfile " + ca_file + " " + leaf);
    CHECK_MESSAGE(strict.status == 0, strict.text);

    auto text = run(openssl + " x509 -noout -text -in " + leaf);
    REQUIRE(text.status == 0);
    INFO(text.text);
    CHECK(text.text.find("Subject: CN = *.sbx.localhost") != std::string::npos);
    CHECK(text.text.find("X509v3 Subject Alternative Name: \n                DNS:*.sbx.localhost, DNS:sbx.localhost") !=
          std::string::npos);
    CHECK(text.text.find("X509v3 Extended Key Usage: \n                TLS Web Server Authentication") !=
          std::string::npos);
    CHECK(text.text.find("X509v3 Basic Constraints: critical\n                CA:FALSE") != std::string::npos);
    CHECK(text.text.find("X509v3 Authority Key Identifier") != std::string::npos);
    CHECK(run(openssl + " x509 -noout -checkend " + std::to_string(6 * 24 * 3600) + " -in " + leaf).status == 0);
    CHECK(run(openssl + " x509 -noout -checkend " + std::to_string(8 * 24 * 3600) + " -in " + leaf).status != 0);

    // The serial is random: a second leaf has another.
    write_text(dir.file("leaf2.pem"), first_pem_block(issue(ca, {"sbx.localhost"}).chain_pem));
    auto serial1 = run(openssl + " x509 -noout -serial -in " + leaf);
    auto serial2 = run(openssl + " x509 -noout -serial -in " + dir.file("leaf2.pem"));
    CHECK(serial1.text != serial2.text);

    // Another host's CA does not vouch for it.
    CertificateAuthority other = open_ca(dir.file("other-ca"));
    CHECK(run(openssl + " verify -CAfile " + other.certificate_path() + " " + leaf).status != 0);
}

TEST_CASE("a name too long for a common name goes in a critical subjectAltName only") {
    const std::string openssl = tool_path("openssl");
    TempDir dir("sbxd-ca");
    CertificateAuthority ca = open_ca(dir.file("ca"));
    const std::string long_name = std::string(60, 'a') + ".sbx.localhost";
    write_text(dir.file("leaf.pem"), first_pem_block(issue(ca, {long_name}).chain_pem));
    auto text = run(openssl + " x509 -noout -text -in " + dir.file("leaf.pem"));
    INFO(text.text);
    CHECK(text.text.find("Subject: \n") != std::string::npos);
    CHECK(text.text.find("X509v3 Subject Alternative Name: critical\n                DNS:" + long_name) !=
          std::string::npos);
    CHECK(run(openssl + " verify -purpose sslserver -CAfile " + ca.certificate_path() + " " + dir.file("leaf.pem"))
              .status == 0);
}

TEST_CASE("curl completes a TLS handshake for a name in the certificate and refuses one outside it") {
    const std::string openssl = tool_path("openssl");
    const std::string curl = tool_path("curl");
    TempDir dir("sbxd-ca");
    CertificateAuthority ca = open_ca(dir.file("ca"));
    ServerCertificate issued = issue(ca, {"*.sbx.localhost", "sbx.localhost"});
    write_text(dir.file("chain.pem"), issued.chain_pem);
    write_text(dir.file("key.pem"), issued.key_pem);
    TlsServer server(openssl, dir.file("chain.pem"), dir.file("key.pem"), dir.file("s_server.log"));
    const std::string port = std::to_string(server.port());

    auto fetch = [&](const std::string& host, const std::string& ca_file) {
        return run(curl + " -sS -o /dev/null -w '%{http_code}' --max-time 10 --cacert " + ca_file +
                   " --resolve " + host + ":" + port + ":127.0.0.1 https://" + host + ":" + port + "/");
    };
    auto wildcard = fetch("a-80.sbx.localhost", ca.certificate_path());
    CHECK_MESSAGE(wildcard.status == 0, wildcard.text);
    CHECK(wildcard.text == "200");
    auto bare = fetch("sbx.localhost", ca.certificate_path());
    CHECK_MESSAGE(bare.status == 0, bare.text);

    // CURLE_PEER_FAILED_VERIFICATION (60): the name is not in the
    // certificate (a wildcard covers one label, RFC 6125 §6.4.3), or the
    // CA is not the one trusted.
    auto outside = fetch("a-80.other.localhost", ca.certificate_path());
    CHECK_MESSAGE(outside.status == 60, outside.text);
    auto two_labels = fetch("b.a-80.sbx.localhost", ca.certificate_path());
    CHECK_MESSAGE(two_labels.status == 60, two_labels.text);
    CertificateAuthority other = open_ca(dir.file("other-ca"));
    auto untrusted = fetch("a-80.sbx.localhost", other.certificate_path());
    CHECK_MESSAGE(untrusted.status == 60, untrusted.text);
}

TEST_CASE("bad or mismatched CA files are errors and are left as they are") {
    TempDir dir("sbxd-ca");
    const std::string ca_dir = dir.file("ca");
    const std::string key = ca_dir + "/ca.key";
    const std::string certificate = ca_dir + "/ca.pem";
    std::string good_key;
    {
        CertificateAuthority ca = open_ca(ca_dir);
        good_key = *read_file(key, 1 << 16);
    }

    SUBCASE("a corrupt key") {
        write_text(key, "-----BEGIN PRIVATE KEY-----\nnot base64 at all\n-----END PRIVATE KEY-----\n");
        CHECK(error_code_of_open(ca_dir) == "ca_corrupt");
        CHECK(read_file(key, 1 << 16).value().find("not base64") != std::string::npos);
    }
    SUBCASE("another CA's key") {
        CertificateAuthority other = open_ca(dir.file("other-ca"));
        write_text(key, *read_file(other.key_path(), 1 << 16));
        CHECK(error_code_of_open(ca_dir) == "ca_mismatch");
    }
    SUBCASE("a key others can read") {
        REQUIRE(::chmod(key.c_str(), 0644) == 0);
        CHECK(error_code_of_open(ca_dir) == "ca_key_exposed");
    }
    SUBCASE("a corrupt certificate") {
        write_text(certificate, "garbage\n");
        CHECK(error_code_of_open(ca_dir) == "ca_corrupt");
        CHECK(*read_file(certificate, 1 << 16) == "garbage\n");
    }
    SUBCASE("a certificate without its key") {
        REQUIRE(::unlink(key.c_str()) == 0);
        CHECK(error_code_of_open(ca_dir) == "ca_incomplete");
        CHECK_FALSE(std::filesystem::exists(key));
    }
    SUBCASE("a key whose certificate is not a CA's") {
        const std::string openssl = tool_path("openssl");
        auto made = run(openssl + " req -x509 -new -key " + key + " -subj /CN=not-a-ca -days 30 -addext " +
                        "basicConstraints=critical,CA:FALSE -out " + certificate);
        REQUIRE_MESSAGE(made.status == 0, made.text);
        CHECK(error_code_of_open(ca_dir) == "ca_corrupt");
    }
    SUBCASE("an expired certificate") {
        write_text(certificate, expired_ca_certificate(key));
        CHECK(error_code_of_open(ca_dir) == "ca_expired");
    }
    SUBCASE("an encrypted key is refused, never asked a passphrase for") {
        const std::string openssl = tool_path("openssl");
        auto made = run(openssl + " genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -aes256 " +
                        "-pass pass:secret -out " + key + " </dev/null");
        REQUIRE_MESSAGE(made.status == 0, made.text);
        REQUIRE(::chmod(key.c_str(), 0600) == 0);
        CHECK(error_code_of_open(ca_dir) == "ca_corrupt");
    }
    SUBCASE("an RSA key") {
        const std::string openssl = tool_path("openssl");
        auto made = run(openssl + " genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out " + key);
        REQUIRE_MESSAGE(made.status == 0, made.text);
        REQUIRE(::chmod(key.c_str(), 0600) == 0);
        CHECK(error_code_of_open(ca_dir) == "ca_corrupt");
    }
    SUBCASE("a key without a certificate gets a new certificate for the same key") {
        const std::string openssl = tool_path("openssl");
        CertificateAuthority before = open_ca(ca_dir);
        write_text(dir.file("leaf.pem"), first_pem_block(issue(before, {"sbx.localhost"}).chain_pem));
        REQUIRE(::unlink(certificate.c_str()) == 0);
        CertificateAuthority after = open_ca(ca_dir);
        CHECK(after.ca_pem() != before.ca_pem());
        CHECK(*read_file(key, 1 << 16) == good_key);
        // Same name and key: a leaf of the old certificate verifies under the new.
        CHECK(run(openssl + " verify -CAfile " + certificate + " " + dir.file("leaf.pem")).status == 0);
    }
}

TEST_CASE("several threads issue at once") {
    TempDir dir("sbxd-ca");
    const CertificateAuthority ca = open_ca(dir.file("ca"));
    constexpr int kThreads = 8;
    constexpr int kEach = 5;
    std::vector<std::vector<std::string>> chains(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&ca, &chains, t] {
            for (int i = 0; i < kEach; ++i) {
                auto issued = ca.issue_server({"t" + std::to_string(t) + ".sbx.localhost"}, 1h);
                chains[t].push_back(issued ? issued->chain_pem : issued.error().to_string());
            }
        });
    }
    for (auto& thread : threads) {
        thread.join();
    }
    std::set<std::string> distinct;
    for (const auto& each : chains) {
        for (const auto& chain : each) {
            CHECK(chain.find("-----BEGIN CERTIFICATE-----") == 0);
            distinct.insert(chain);
        }
    }
    CHECK(distinct.size() == kThreads * kEach);
}

TEST_CASE("issue_server refuses bad names and validities") {
    TempDir dir("sbxd-ca");
    CertificateAuthority ca = open_ca(dir.file("ca"));
    auto code = [&](const std::vector<std::string>& names, std::chrono::seconds validity) {
        auto issued = ca.issue_server(names, validity);
        REQUIRE_FALSE(issued.has_value());
        INFO(issued.error().to_string());
        return issued.error().code;
    };
    CHECK(code({"sbx.localhost"}, 0s) == "invalid_argument");
    CHECK(code({"sbx.localhost"}, CertificateAuthority::kMaxServerValidity + 1s) == "invalid_argument");
    CHECK(code({}, 24h) == "invalid_argument");
    CHECK(code({"sbx.localhost", "bad_name.localhost"}, 24h) == "invalid_argument");
    CHECK(ca.issue_server({"sbx.localhost"}, CertificateAuthority::kMaxServerValidity).has_value());
}

TEST_CASE("certificate DNS names: host names and leading whole-label wildcards only") {
    for (const char* good : {"sbx.localhost", "*.sbx.localhost", "a-80.sbx.localhost", "9lives.example",
                             "localhost"}) {
        auto name = normalize_certificate_dns_name(good);
        CHECK_MESSAGE(name.has_value(), good);
    }
    CHECK(normalize_certificate_dns_name("A-80.SBX.Localhost").value() == "a-80.sbx.localhost");
    const std::string long_label(64, 'a');
    std::string too_long;
    while (too_long.size() < 254) {
        too_long += "abcdefghi.";
    }
    too_long += "com";
    for (const std::string& bad :
         {std::string(), std::string("*.localhost"), std::string("a.*.localhost"), std::string("*a.localhost"),
          std::string("*"), std::string("1.2.3.4"), std::string("-a.localhost"), std::string("a-.localhost"),
          std::string("a..localhost"), std::string("sbx.localhost."), std::string("under_score.localhost"),
          std::string("sp ace.localhost"), long_label + ".localhost", too_long, std::string("a\n.localhost"),
          std::string("a,b.localhost")}) {
        auto name = normalize_certificate_dns_name(bad);
        REQUIRE_FALSE_MESSAGE(name.has_value(), bad);
        CHECK(name.error().code == "invalid_argument");
        CHECK(name.error().message.find('\n') == std::string::npos);
    }
}
