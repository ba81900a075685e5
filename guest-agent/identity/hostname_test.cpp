// The identity op's "hostname" against a fake kernel: the RFC 1123 check
// (a clear bad_request, nothing applied), /etc/hosts' 127.0.1.1 line, the
// order of the three changes (hosts, hostname, the kernel's name), what a
// failing step leaves (the files put back, the generation not stored),
// the client's checks, and the real kernel's file half on a scratch
// directory (sethostname itself is never called on the host).
#include <doctest/doctest.h>

#include <fstream>

#include "guest-agent/agent/agent_test_util.hpp"
#include "guest-agent/identity/hostname_fields.hpp"
#include "guest-agent/identity/identity_client.hpp"

using namespace sbx;
using namespace sbx::agent;
using namespace sbx::agent::testing;

namespace {

const std::string kDebianHosts =
    "127.0.0.1\tlocalhost\n127.0.1.1\tsandbox\n::1\t\tlocalhost ip6-localhost ip6-loopback\n";

}  // namespace

TEST_CASE("host names follow RFC 1123 section 2.1 and the kernel's 64 bytes") {
    for (const char* good :
         {"sbx-0123456789abcdef", "a", "0", "web1", "A-b-C", "host.example.org", "9lives", "a.b.c.d"}) {
        CAPTURE(good);
        CHECK(check_hostname(good).value() == good);
    }
    CHECK(check_hostname(std::string(63, 'a')).has_value());
    CHECK(check_hostname(std::string(62, 'a') + ".b").has_value());  // 64 bytes
    struct Bad {
        std::string name;
        std::string_view says;
    };
    for (const Bad& bad : std::initializer_list<Bad>{
             {"", "empty"},
             {std::string(64, 'a'), "more than 63"},
             {std::string(40, 'a') + "." + std::string(30, 'b'), "more than the kernel's 64"},
             {"-lead", "hyphen"},
             {"trail-", "hyphen"},
             {"a.-b", "hyphen"},
             {"sbx_0123", "bad character at 3"},
             {"a b", "bad character at 1"},
             {"émile", "bad character at 0"},
             {"a..b", "empty label at 2"},
             {".a", "empty label at 0"},
             {"a.", "empty label at 2"},
             {std::string("a\0b", 3), "bad character at 1"},
         }) {
        CAPTURE(bad.name);
        auto r = check_hostname(bad.name);
        REQUIRE_FALSE(r);
        CHECK_MESSAGE(r.error().message.find(bad.says) != std::string::npos, r.error().message);
        CHECK(r.error().message.find("\"hostname\"") != std::string::npos);
    }
}

TEST_CASE("the 65-byte name of two labels is refused") {
    CHECK_FALSE(check_hostname(std::string(63, 'a') + ".b"));
}

TEST_CASE("/etc/hosts gets the name on its 127.0.1.1 line, other lines as they were") {
    CHECK(hosts_with_hostname(kDebianHosts, "sbx-1") ==
          "127.0.0.1\tlocalhost\n127.0.1.1\tsbx-1\n::1\t\tlocalhost ip6-localhost ip6-loopback\n");
    // Other names on the old line go; a second 127.0.1.1 line goes; comments stay.
    CHECK(hosts_with_hostname("# mine\n127.0.0.1 localhost\n  127.0.1.1 old old.local # x\n10.0.0.1 db\n"
                              "127.0.1.1 again\n",
                              "new") == "# mine\n127.0.0.1 localhost\n127.0.1.1\tnew\n10.0.0.1 db\n");
    // Without one: after the first 127.0.0.1 line, else first.
    CHECK(hosts_with_hostname("127.0.0.1 localhost\n::1 localhost\n", "n") ==
          "127.0.0.1 localhost\n127.0.1.1\tn\n::1 localhost\n");
    CHECK(hosts_with_hostname("::1 localhost", "n") == "127.0.1.1\tn\n::1 localhost\n");
    CHECK(hosts_with_hostname("", "n") == "127.0.1.1\tn\n");
    // A 127.0.1.10 line is another address.
    CHECK(hosts_with_hostname("127.0.1.10 other\n", "n") == "127.0.1.1\tn\n127.0.1.10 other\n");
    // Applying it twice changes nothing more.
    const std::string once = hosts_with_hostname(kDebianHosts, "x");
    CHECK(hosts_with_hostname(once, "x") == once);
}

TEST_CASE("identity sets the host name: /etc/hosts, /etc/hostname, then the kernel's") {
    AgentHarness h;
    auto client = h.connect();
    auto reply = client.call("identity", Json{{"hostname", "sbx-0123456789abcdef"}, {"generation", 4}});
    REQUIRE_MESSAGE(reply.has_value(), (reply ? "" : reply.error().to_string()));
    CHECK((*reply)["hostname"] == "sbx-0123456789abcdef");
    CHECK((*reply)["generation"] == 4);
    FakeIdentityKernel& k = *h.identity_kernel;
    CHECK(k.calls == std::vector<std::string>{"write_etc hosts", "write_etc hostname",
                                              "set_hostname sbx-0123456789abcdef"});
    CHECK(k.kernel_hostname == "sbx-0123456789abcdef");
    CHECK(k.etc_hostname == "sbx-0123456789abcdef\n");
    CHECK(k.etc_hosts ==
          "127.0.0.1\tlocalhost\n127.0.1.1\tsbx-0123456789abcdef\n"
          "::1\t\tlocalhost ip6-localhost ip6-loopback\n");

    SUBCASE("the same name again changes nothing") {
        k.calls.clear();
        REQUIRE(client.call("identity", Json{{"hostname", "sbx-0123456789abcdef"}}).has_value());
        CHECK(k.calls.empty());
    }
    SUBCASE("a call without it reports the name and leaves it") {
        k.calls.clear();
        auto query = client.call("identity");
        REQUIRE(query.has_value());
        CHECK((*query)["hostname"] == "sbx-0123456789abcdef");
        CHECK(k.calls.empty());
    }
}

TEST_CASE("missing /etc/hosts and /etc/hostname are written") {
    AgentHarness h;
    h.identity_kernel->etc_hosts.reset();
    h.identity_kernel->etc_hostname.reset();
    auto client = h.connect();
    REQUIRE(client.call("identity", Json{{"hostname", "box"}}).has_value());
    CHECK(h.identity_kernel->etc_hosts == "127.0.1.1\tbox\n");
    CHECK(h.identity_kernel->etc_hostname == "box\n");
}

TEST_CASE("an invalid host name is bad_request and nothing is applied") {
    AgentHarness h;
    auto client = h.connect();
    auto refused = client.call(
        "identity",
        Json{{"hostname", "sbx_0123"}, {"generation", 7}, {"token", "00112233445566778899aabbccddeeff"}});
    REQUIRE_FALSE(refused);
    CHECK(error_code(refused.error()) == "bad_request");
    CHECK(refused.error().message.find("RFC 1123") != std::string::npos);
    auto not_string = client.call("identity", Json{{"hostname", 5}});
    REQUIRE_FALSE(not_string);
    CHECK(error_code(not_string.error()) == "bad_request");
    CHECK(h.identity_kernel->calls.empty());
    CHECK(h.identity_kernel->kernel_hostname == "sandbox");
    CHECK(client.call("identity").value()["generation"] == 0);
    CHECK(h.connect().health().has_value());  // the old token still works
}

TEST_CASE("a failing step puts the files back and stores nothing") {
    AgentHarness h;
    FakeIdentityKernel& k = *h.identity_kernel;
    const auto hosts_before = k.etc_hosts;
    const auto hostname_before = k.etc_hostname;
    auto client = h.connect();
    SUBCASE("sethostname without CAP_SYS_ADMIN") {
        k.fail_call = "set_hostname";
        auto reply = client.call("identity", Json{{"hostname", "newname"}, {"generation", 3}});
        REQUIRE_FALSE(reply);
        CHECK(error_code(reply.error()) == "permission_denied");
        CHECK(reply.error().message.find("sethostname") != std::string::npos);
        CHECK(k.calls == std::vector<std::string>{"write_etc hosts", "write_etc hostname",
                                                  "set_hostname newname", "write_etc hostname",
                                                  "write_etc hosts"});
    }
    SUBCASE("/etc/hostname cannot be written") {
        k.fail_call = "write_etc hostname";
        k.fail_errno = ENOSPC;
        auto reply = client.call("identity", Json{{"hostname", "newname"}, {"generation", 3}});
        REQUIRE_FALSE(reply);
        CHECK(error_code(reply.error()) == "no_space");
        CHECK(reply.error().message.find("/etc/hostname") != std::string::npos);
        CHECK(k.kernel_hostname == "sandbox");
    }
    CHECK(k.etc_hosts == hosts_before);
    CHECK(k.etc_hostname == hostname_before);
    k.fail_call.clear();
    CHECK(client.call("identity").value()["generation"] == 0);
    // Repeated whole, it goes through.
    REQUIRE(client.call("identity", Json{{"hostname", "newname"}, {"generation", 3}}).has_value());
    CHECK(k.kernel_hostname == "newname");
}

TEST_CASE("the client checks the host name first and wants the reply to name it") {
    AgentHarness h;
    auto client = h.connect();
    IdentityRequest bad;
    bad.hostname = "no_underscores";
    auto refused = identity(client, bad);
    REQUIRE_FALSE(refused);
    CHECK(refused.error().message.find("\"hostname\"") != std::string::npos);
    CHECK(h.identity_kernel->calls.empty());

    IdentityRequest request;
    request.hostname = "sbx-00ff";
    auto reply = identity(client, request);
    REQUIRE_MESSAGE(reply.has_value(), (reply ? "" : reply.error().to_string()));
    CHECK(reply->hostname == "sbx-00ff");
    CHECK(h.identity_kernel->kernel_hostname == "sbx-00ff");

    Json good{{"type", "result"}, {"generation", 1u}, {"cid", 3u}, {"hostname", "h"}};
    CHECK(parse_identity_reply(good).value().hostname == "h");
    good.erase("hostname");
    CHECK_FALSE(parse_identity_reply(good).value().hostname.has_value());  // an older agent
    good["hostname"] = std::string(65, 'a');
    CHECK_FALSE(parse_identity_reply(good));
    good["hostname"] = 7;
    CHECK_FALSE(parse_identity_reply(good));
}

TEST_CASE("the real kernel reads and replaces /etc/hosts and /etc/hostname atomically") {
    TempDir etc;
    auto kernel = make_system_identity_kernel("/nonexistent", etc.path / "resolv.conf", etc.path);
    CHECK_FALSE(kernel->read_etc(EtcFile::Hosts).value().has_value());
    std::ofstream(etc.path / "hosts") << kDebianHosts;
    CHECK(kernel->read_etc(EtcFile::Hosts).value() == kDebianHosts);
    REQUIRE(kernel->write_etc(EtcFile::Hostname, "box\n").has_value());
    REQUIRE(kernel->write_etc(EtcFile::Hosts, hosts_with_hostname(kDebianHosts, "box")).has_value());
    CHECK(kernel->read_etc(EtcFile::Hostname).value() == "box\n");
    CHECK(kernel->read_etc(EtcFile::Hosts).value()->find("127.0.1.1\tbox\n") != std::string::npos);
    int entries = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(etc.path)) {
        ++entries;
    }
    CHECK(entries == 2);  // no temporary file left
    CHECK_FALSE(kernel->hostname().value().empty());
}
