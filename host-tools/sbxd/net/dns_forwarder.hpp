// The sandboxes' DNS forwarder: one dnsmasq(8) per host, a child of sbxd,
// listening on port 53 of every sandbox gateway address and nowhere else
// (--interface=sbx* with --bind-dynamic: taps that come later are picked
// up as their addresses appear). It forwards to the host's resolvers and
// drops private answers to public names (--stop-dns-rebind). Its pid file
// and log are in sbxd's state directory; the pid file is how a later sbxd
// finds and stops one an earlier sbxd left running.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "base/result.hpp"
#include "host-tools/sbxd/net/address_pool.hpp"

namespace sbx::sbxd::net {

struct DnsConfig {
    std::string program = "/usr/sbin/dnsmasq";
    std::string state_dir;               // holds dnsmasq.pid and dnsmasq.log
    std::vector<Ipv4Address> upstreams;  // empty: the nameservers of resolv_file
    std::string resolv_file = "/etc/resolv.conf";
    bool log_queries = false;
    // Tests only: names whose answers skip the rebinding check. dnsmasq
    // counts the documentation networks (RFC 5737) a test "internet" uses
    // as private, so a test name resolving to one needs this.
    std::vector<std::string> rebind_ok_domains;

    [[nodiscard]] std::string pid_file() const { return state_dir + "/dnsmasq.pid"; }
    [[nodiscard]] std::string log_file() const { return state_dir + "/dnsmasq.log"; }
};

// dnsmasq's arguments (without argv[0]), every one explained in
// dns_forwarder.cpp.
std::vector<std::string> dnsmasq_arguments(const DnsConfig& config);

class DnsForwarder {
public:
    // Stops a dnsmasq an earlier sbxd left (found by the pid file), starts
    // a new one and waits until it has written its pid file, which it does
    // after opening its sockets. Code "dns_forwarder" when it exits first
    // (the message has the end of its log).
    static Result<DnsForwarder> start(DnsConfig config);

    DnsForwarder(DnsForwarder&& other) noexcept;
    DnsForwarder& operator=(DnsForwarder&& other) noexcept;
    DnsForwarder(const DnsForwarder&) = delete;
    DnsForwarder& operator=(const DnsForwarder&) = delete;
    // Stops it (SIGTERM, SIGKILL after a grace period) and reaps it.
    ~DnsForwarder();

    [[nodiscard]] pid_t pid() const { return pid_; }
    // Whether it still runs (reaping it when it has exited).
    bool running();
    // Starts it again when it has exited.
    Result<void> restart_if_exited();
    void stop();
    // Leaves it running for the next sbxd (which stops it by its pid file).
    void release();

private:
    DnsForwarder(DnsConfig config, pid_t pid) : config_(std::move(config)), pid_(pid) {}
    DnsConfig config_;
    pid_t pid_ = -1;  // -1: none
};

}  // namespace sbx::sbxd::net
