// dnsmasq's command line: listening only on sandbox interfaces, nothing
// of the host's configuration, rebinding protection, the upstreams. The
// running forwarder is tested in tests/egress_test.sh.
#include "host-tools/sbxd/net/dns_forwarder.hpp"

#include <doctest/doctest.h>

#include <algorithm>

using namespace sbx;
using namespace sbx::sbxd::net;

namespace {

bool has(const std::vector<std::string>& args, std::string_view arg) {
    return std::find(args.begin(), args.end(), arg) != args.end();
}

}  // namespace

TEST_CASE("dnsmasq listens on sandbox interfaces only, with nothing of the host's configuration") {
    DnsConfig config;
    config.state_dir = "/var/lib/sandboxer/net";
    auto args = dnsmasq_arguments(config);
    for (const char* required :
         {"--keep-in-foreground", "--conf-file=/dev/null", "--no-hosts", "--bind-dynamic", "--interface=sbx*",
          "--except-interface=lo", "--stop-dns-rebind", "--pid-file=/var/lib/sandboxer/net/dnsmasq.pid",
          "--log-facility=-"}) {
        CAPTURE(required);
        CHECK(has(args, required));
    }
    CHECK_FALSE(has(args, "--rebind-localhost-ok"));
    for (const auto& a : args) {
        CHECK(a.rfind("--dhcp", 0) != 0);  // no DHCP: guests are configured through the agent
    }
    CHECK(has(args, "--resolv-file=/etc/resolv.conf"));
    CHECK_FALSE(has(args, "--no-resolv"));
    CHECK(config.log_file() == "/var/lib/sandboxer/net/dnsmasq.log");
}

TEST_CASE("named upstreams replace the host's resolv.conf") {
    DnsConfig config;
    config.state_dir = "/s";
    config.upstreams = {*parse_ipv4("203.0.113.254"), *parse_ipv4("198.51.100.53")};
    config.log_queries = true;
    config.rebind_ok_domains = {"public.test"};
    auto args = dnsmasq_arguments(config);
    CHECK(has(args, "--rebind-domain-ok=/public.test/"));
    CHECK(has(args, "--no-resolv"));
    CHECK(has(args, "--server=203.0.113.254"));
    CHECK(has(args, "--server=198.51.100.53"));
    CHECK(has(args, "--log-queries"));
    CHECK(std::none_of(args.begin(), args.end(),
                       [](const std::string& a) { return a.rfind("--resolv-file", 0) == 0; }));
}
