#include "guest-agent/identity/ipv4_fields.hpp"

#include <algorithm>

namespace sbx::agent {
namespace {

// What an error quotes of a bad value (the value is the host's, but bounded anyway).
constexpr std::size_t kMaxQuoted = 64;

std::string bounded(std::string_view text) {
    return text.size() <= kMaxQuoted ? std::string(text) : std::string(text.substr(0, kMaxQuoted)) + "...";
}

// A decimal number without sign, blanks or leading zeros, at most `max`.
std::optional<unsigned> parse_decimal(std::string_view text, unsigned max) {
    if (text.empty() || text.size() > 3 || (text.size() > 1 && text[0] == '0')) {
        return std::nullopt;
    }
    unsigned value = 0;
    for (char c : text) {
        if (c < '0' || c > '9') {
            return std::nullopt;
        }
        value = value * 10 + static_cast<unsigned>(c - '0');
    }
    return value <= max ? std::optional(value) : std::nullopt;
}

// 0/8 "this network", 224/4 multicast, 240/4 reserved (with 255.255.255.255): RFC 6890 §2.2.2.
bool never_a_host(Ipv4Address a) {
    const std::uint32_t first = a.value >> 24;
    return first == 0 || first >= 224;
}
bool loopback(Ipv4Address a) {
    return a.value >> 24 == 127;
}

Result<void> check_host(Ipv4Address a, std::string_view field) {
    if (never_a_host(a) || loopback(a)) {
        return make_error("\"{}\" {} is not a unicast address (0/8, 127/8, 224/4 and 240/4 are refused)",
                          field, format_ipv4(a));
    }
    return ok();
}

// In a network of more than two addresses, its first (network) and last (broadcast) one.
Result<void> check_not_network_or_broadcast(const Ipv4Prefix& net, Ipv4Address a, std::string_view field) {
    if (net.length <= 30 && (a == net.network() || a == net.broadcast())) {
        return make_error("\"{}\" {} is the {} address of {}", field, format_ipv4(a),
                          a == net.network() ? "network" : "broadcast",
                          format_ipv4_prefix({net.network(), net.length}));
    }
    return ok();
}

Result<Ipv4Address> string_address(const Json& object, std::string_view key) {
    auto it = object.find(key);
    if (it == object.end() || !it->is_string()) {
        return make_error("\"{}\" must be a string like \"10.231.0.5\"", key);
    }
    return parse_ipv4(it->get_ref<const std::string&>());
}

}  // namespace

Result<Ipv4Address> parse_ipv4(std::string_view text) {
    auto bad = [&] {
        return make_error("\"{}\" is not an IPv4 address (four decimal octets like 10.231.0.6)",
                          bounded(text));
    };
    std::uint32_t value = 0;
    std::string_view rest = text;
    for (int i = 0; i < 4; ++i) {
        const std::size_t dot = rest.find('.');
        if ((i < 3) == (dot == std::string_view::npos)) {
            return bad();
        }
        auto octet = parse_decimal(rest.substr(0, dot), 255);
        if (!octet) {
            return bad();
        }
        value = value << 8 | *octet;
        rest = dot == std::string_view::npos ? std::string_view{} : rest.substr(dot + 1);
    }
    return Ipv4Address{value};
}

Result<Ipv4Prefix> parse_ipv4_prefix(std::string_view text) {
    const std::size_t slash = text.find('/');
    if (slash == std::string_view::npos) {
        return make_error("\"{}\" has no prefix length (like 10.231.0.6/30)", bounded(text));
    }
    auto address = parse_ipv4(text.substr(0, slash));
    if (!address) {
        return address.error();
    }
    auto length = parse_decimal(text.substr(slash + 1), 32);
    if (!length) {
        return make_error("\"{}\" has no prefix length from 0 to 32 after the \"/\"", bounded(text));
    }
    return Ipv4Prefix{*address, static_cast<int>(*length)};
}

std::string format_ipv4(Ipv4Address a) {
    return fmt::format("{}.{}.{}.{}", a.value >> 24, a.value >> 16 & 0xff, a.value >> 8 & 0xff,
                       a.value & 0xff);
}

std::string format_ipv4_prefix(const Ipv4Prefix& prefix) {
    return fmt::format("{}/{}", format_ipv4(prefix.address), prefix.length);
}

Result<void> check_ipv4_config(const Ipv4Config& config) {
    const Ipv4Prefix& net = config.address;
    for (auto r :
         {check_host(net.address, "address"), check_not_network_or_broadcast(net, net.address, "address"),
          check_host(config.gateway, "gateway")}) {
        if (!r) {
            return r;
        }
    }
    if (!net.contains(config.gateway)) {
        return make_error("\"gateway\" {} is outside {}, the network of \"address\" {}",
                          format_ipv4(config.gateway), format_ipv4_prefix({net.network(), net.length}),
                          format_ipv4_prefix(net));
    }
    if (config.gateway == net.address) {
        return make_error("\"gateway\" {} is the address itself", format_ipv4(config.gateway));
    }
    if (auto r = check_not_network_or_broadcast(net, config.gateway, "gateway"); !r) {
        return r;
    }
    if (config.dns) {
        const auto& dns = *config.dns;
        if (dns.size() > kMaxDnsServers) {
            return make_error("\"dns\" lists {} servers; at most {}", dns.size(), kMaxDnsServers);
        }
        for (std::size_t i = 0; i < dns.size(); ++i) {
            if (never_a_host(dns[i])) {
                return make_error("\"dns\" {} is not a unicast address (0/8, 224/4 and 240/4 are refused)",
                                  format_ipv4(dns[i]));
            }
            if (std::find(dns.begin(), dns.begin() + static_cast<std::ptrdiff_t>(i), dns[i]) !=
                dns.begin() + static_cast<std::ptrdiff_t>(i)) {
                return make_error("\"dns\" lists {} twice", format_ipv4(dns[i]));
            }
        }
    }
    return ok();
}

Result<Ipv4Config> parse_ipv4_config(const Json& object) {
    if (!object.is_object()) {
        return make_error(
            "must be an object like {{\"address\": \"10.231.0.6/30\", \"gateway\": \"10.231.0.5\", "
            "\"dns\": [\"10.231.0.5\"]}}, or null");
    }
    for (const auto& [key, value] : object.items()) {
        if (key != "address" && key != "gateway" && key != "dns") {
            return make_error("unknown field \"{}\" (known: address, gateway, dns)", bounded(key));
        }
    }
    Ipv4Config config;
    auto address = object.find("address");
    if (address == object.end() || !address->is_string()) {
        return make_error("\"address\" must be a string like \"10.231.0.6/30\"");
    }
    auto prefix = parse_ipv4_prefix(address->get_ref<const std::string&>());
    if (!prefix) {
        return prefix.error().context("\"address\"");
    }
    config.address = *prefix;
    auto gateway = string_address(object, "gateway");
    if (!gateway) {
        return gateway.error().context("\"gateway\"");
    }
    config.gateway = *gateway;
    if (auto dns = object.find("dns"); dns != object.end() && !dns->is_null()) {
        if (!dns->is_array()) {
            return make_error("\"dns\" must be an array of addresses like [\"10.231.0.5\"]");
        }
        if (dns->size() > kMaxDnsServers) {
            return make_error("\"dns\" lists {} servers; at most {}", dns->size(), kMaxDnsServers);
        }
        config.dns.emplace();
        for (const auto& server : *dns) {
            if (!server.is_string()) {
                return make_error("\"dns\" must be an array of strings like [\"10.231.0.5\"]");
            }
            auto parsed = parse_ipv4(server.get_ref<const std::string&>());
            if (!parsed) {
                return parsed.error().context("\"dns\"");
            }
            config.dns->push_back(*parsed);
        }
    }
    if (auto r = check_ipv4_config(config); !r) {
        return r.error();
    }
    return config;
}

Json ipv4_config_json(const Ipv4Config& config) {
    Json j{{"address", format_ipv4_prefix(config.address)}, {"gateway", format_ipv4(config.gateway)}};
    if (config.dns) {
        Json dns = Json::array();
        for (auto server : *config.dns) {
            dns.push_back(format_ipv4(server));
        }
        j["dns"] = std::move(dns);
    }
    return j;
}

Result<Ipv4Config> parse_ipv4_settings(std::string_view address, std::string_view gateway,
                                       const std::optional<std::vector<std::string>>& dns) {
    Json object{{"address", address}, {"gateway", gateway}};
    if (dns) {
        object["dns"] = *dns;
    }
    return parse_ipv4_config(object);
}

Json ipv4_state_json(const Ipv4State& state) {
    Json addresses = Json::array();
    for (const auto& address : state.addresses) {
        addresses.push_back(format_ipv4_prefix(address));
    }
    Json dns = Json::array();
    for (auto server : state.dns) {
        dns.push_back(format_ipv4(server));
    }
    return Json{{"link_up", state.link_up},
                {"addresses", std::move(addresses)},
                {"gateway", state.gateway ? Json(format_ipv4(*state.gateway)) : Json(nullptr)},
                {"dns", std::move(dns)}};
}

Result<Ipv4State> parse_ipv4_state(const Json& object) {
    // More than an interface or a resolver file plausibly has; a guest cannot make the host keep more.
    constexpr std::size_t kMaxListed = 256;
    if (!object.is_object()) {
        return make_error("\"ipv4\" is not an object");
    }
    Ipv4State state;
    auto up = object.find("link_up");
    if (up == object.end() || !up->is_boolean()) {
        return make_error("\"ipv4\".\"link_up\" is not a bool");
    }
    state.link_up = up->get<bool>();
    for (const char* key : {"addresses", "dns"}) {
        auto list = object.find(key);
        if (list == object.end() || !list->is_array() || list->size() > kMaxListed) {
            return make_error("\"ipv4\".\"{}\" is not an array of at most {} strings", key, kMaxListed);
        }
        for (const auto& item : *list) {
            if (!item.is_string()) {
                return make_error("\"ipv4\".\"{}\" is not an array of strings", key);
            }
            const auto& text = item.get_ref<const std::string&>();
            if (std::string_view(key) == "addresses") {
                auto prefix = parse_ipv4_prefix(text);
                if (!prefix) {
                    return prefix.error().context("\"ipv4\".\"addresses\"");
                }
                state.addresses.push_back(*prefix);
            } else {
                auto server = parse_ipv4(text);
                if (!server) {
                    return server.error().context("\"ipv4\".\"dns\"");
                }
                state.dns.push_back(*server);
            }
        }
    }
    auto gateway = object.find("gateway");
    if (gateway == object.end() || (!gateway->is_null() && !gateway->is_string())) {
        return make_error("\"ipv4\".\"gateway\" is not a string or null");
    }
    if (gateway->is_string()) {
        auto address = parse_ipv4(gateway->get_ref<const std::string&>());
        if (!address) {
            return address.error().context("\"ipv4\".\"gateway\"");
        }
        state.gateway = *address;
    }
    return state;
}

Result<void> check_ipv4_state(const Ipv4Config& config, const Ipv4State& state) {
    auto list = [](const auto& items, auto format) {
        std::string text = "[";
        for (const auto& item : items) {
            text += (text.size() > 1 ? ", " : "") + format(item);
        }
        return text + "]";
    };
    if (!state.link_up) {
        return make_error("the link is down");
    }
    if (state.addresses != std::vector{config.address}) {
        return make_error("the interface has the addresses {}, not [{}]",
                          list(state.addresses, format_ipv4_prefix), format_ipv4_prefix(config.address));
    }
    if (state.gateway != config.gateway) {
        return make_error("the default gateway is {}, not {}",
                          state.gateway ? format_ipv4(*state.gateway) : std::string("none"),
                          format_ipv4(config.gateway));
    }
    if (config.dns && state.dns != *config.dns) {
        return make_error("the DNS servers are {}, not {}", list(state.dns, format_ipv4),
                          list(*config.dns, format_ipv4));
    }
    return ok();
}

std::string resolv_conf_text(std::span<const Ipv4Address> servers) {
    std::string text =
        "# Written by sbx-agent (the identity op's \"ipv4\"): the sandbox's DNS as the host gave it.\n";
    for (auto server : servers) {
        text += "nameserver " + format_ipv4(server) + "\n";
    }
    // trust-ad: pass on the AD bit of the host's forwarder (glibc ≥ 2.31 clears it otherwise).
    text += "options edns0 trust-ad\n";
    return text;
}

std::vector<Ipv4Address> resolv_conf_nameservers(std::string_view text) {
    std::vector<Ipv4Address> servers;
    while (!text.empty()) {
        const std::size_t end = text.find('\n');
        std::string_view line = text.substr(0, end);
        text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
        constexpr std::string_view kKey = "nameserver";
        if (!line.starts_with(kKey) || line.size() == kKey.size() ||
            (line[kKey.size()] != ' ' && line[kKey.size()] != '\t')) {
            continue;
        }
        line.remove_prefix(kKey.size());
        const std::size_t start = line.find_first_not_of(" \t");
        if (start == std::string_view::npos) {
            continue;
        }
        line.remove_prefix(start);
        line = line.substr(0, line.find_first_of(" \t\r#;"));
        if (auto address = parse_ipv4(line)) {
            servers.push_back(*address);
        }
    }
    return servers;
}

}  // namespace sbx::agent
