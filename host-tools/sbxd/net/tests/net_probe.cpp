// sbxd-net-probe: HostNetwork driven one command per line on stdin, for
// egress_test.sh (and for trying the network by hand, as root). Each
// command gets one line back: "ok ..." or "error CODE MESSAGE".
//
//   attach SLOT [EGRESS]              a tap, as sbxd makes one
//   attach-existing SLOT [EGRESS]     the interface sbx<SLOT> made by the caller (a veth)
//   detach SLOT
//   egress SLOT EGRESS                EGRESS: internet, deny-all or allow:NET[,NET...]
//   adopt SLOT[:deny-all][:existing]... as after a restart of sbxd (existing:
//                                     the caller's interface, as attach-existing)
//   release                           leave everything in place and exit
//   quit (or end of input)            tear everything down and exit
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>

#include <CLI/CLI.hpp>

#include "host-tools/sbxd/net/host_network.hpp"

using namespace sbx;
using namespace sbx::sbxd::net;

namespace {

void reply_error(const Error& e) {
    std::cout << "error " << (e.code.empty() ? "-" : e.code) << " " << e.to_string() << std::endl;
}

void reply(const SandboxNet& n) {
    std::cout << "ok tap=" << n.tap << " mac=" << format_mac(n.mac) << " guest=" << n.guest_cidr
              << " gateway=" << n.gateway << " dns=" << n.dns
              << " egress=" << format_egress(n.egress) << std::endl;
}

bool parse_slot(const std::string& text, std::uint32_t& slot) {
    try {
        std::size_t used = 0;
        const unsigned long v = std::stoul(text, &used);
        if (used != text.size() || v > 0xffffffffUL) {
            return false;
        }
        slot = static_cast<std::uint32_t>(v);
        return true;
    } catch (const std::exception&) {
        return false;
    }
}

Result<Egress> egress_word(const std::string& word) {
    return word.empty() ? Result<Egress>(Egress{}) : parse_egress(word);
}

// Returns false when the probe should exit.
bool handle(HostNetwork& net, const std::string& line) {
    std::istringstream in(line);
    std::string command;
    in >> command;
    std::string arg;
    std::string extra;
    in >> arg >> extra;
    std::uint32_t slot = 0;
    if (command == "quit") {
        std::cout << "ok bye" << std::endl;
        return false;
    }
    if (command == "release") {
        net.release();
        std::cout << "ok released" << std::endl;
        return false;
    }
    if (command == "adopt") {
        std::istringstream slots(line.substr(line.find("adopt") + 5));
        std::vector<Adoption> list;
        std::string item;
        while (slots >> item) {
            const auto colon = item.find(':');
            Adoption a;
            auto mac = random_local_mac();
            if (!parse_slot(item.substr(0, colon), a.slot) || !mac) {
                std::cout << "error bad_request bad slot " << item << std::endl;
                return true;
            }
            a.mac = *mac;
            // SLOT[:deny-all][:existing] (existing: the caller's interface, as attach-existing)
            const std::string flags = colon == std::string::npos ? "" : item.substr(colon);
            a.egress = flags.find(":deny-all") != std::string::npos ? Egress::deny_all() : Egress{};
            a.caller_interface = flags.find(":existing") != std::string::npos;
            list.push_back(a);
        }
        auto report = net.adopt(list);
        for (const auto& [s, e] : report.failed) {
            std::cerr << "adopt " << s << ": " << e.to_string() << std::endl;
        }
        std::cout << "ok adopted=" << report.adopted.size() << " failed=" << report.failed.size()
                  << std::endl;
        return true;
    }
    if (!parse_slot(arg, slot)) {
        std::cout << "error bad_request expected: attach|attach-existing|detach|egress SLOT ..." << std::endl;
        return true;
    }
    auto egress = egress_word(extra);
    if (!egress) {
        reply_error(egress.error());
        return true;
    }
    if (command == "attach" || command == "attach-existing") {
        AttachOptions options;
        options.egress = *egress;
        auto r = command == "attach" ? net.attach(slot, options) : net.attach_existing(slot, options);
        r ? reply(*r) : reply_error(r.error());
    } else if (command == "detach") {
        auto r = net.detach(slot);
        r ? void(std::cout << "ok detached" << std::endl) : reply_error(r.error());
    } else if (command == "egress") {
        auto r = net.set_egress(slot, *egress);
        r ? void(std::cout << "ok egress=" << extra << std::endl) : reply_error(r.error());
    } else {
        std::cout << "error bad_request unknown command " << command << std::endl;
    }
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"Drives sbxd's host network (HostNetwork) from commands on stdin"};
    HostNetworkConfig config;
    app.add_option("--state-dir", config.state_dir, "where dnsmasq's pid file and log go")->required();
    app.add_option("--pool", config.pool, "the address pool")->capture_default_str();
    app.add_option("--uplink", config.uplink, "the uplink interface (default: the IPv4 default route's)");
    app.add_option("--dns-upstream", config.dns_upstreams,
                   "an upstream DNS server (default: /etc/resolv.conf)");
    app.add_option("--dnsmasq", config.dnsmasq, "the dnsmasq binary")->capture_default_str();
    app.add_option("--dns-rebind-ok", config.dns_rebind_ok,
                   "tests only: a domain whose answers skip dnsmasq's rebinding check");
    app.add_flag("--log-dns-queries", config.log_dns_queries, "dnsmasq logs every query");
    CLI11_PARSE(app, argc, argv);

    auto net = HostNetwork::open(config);
    if (!net) {
        reply_error(net.error());
        return 1;
    }
    std::cout << "ready uplink=" << (*net)->uplink() << " pool=" << (*net)->pool().cidr.to_string()
              << std::endl;
    std::string line;
    while (std::getline(std::cin, line)) {
        if (line.empty()) {
            continue;
        }
        if (!handle(**net, line)) {
            break;
        }
    }
    return 0;
}
