#include "guest-agent/identity/rtnetlink.hpp"

#include <arpa/inet.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>
#include <cstring>

namespace sbx::agent::rtnl {
namespace {

// Larger than any datagram the kernel sends us: a dump's skb is at most
// 32 KiB (netlink_dump), an ACK a header, the error and the TLVs.
constexpr std::size_t kBufferBytes = std::size_t{64} * 1024;
// Bounds on what one request reads, so a confused exchange ends.
constexpr int kMaxDumpAttempts = 3;
constexpr std::size_t kMaxDatagrams = 4096;

constexpr std::size_t align(std::size_t n) {
    return (n + NLMSG_ALIGNTO - 1) & ~std::size_t{NLMSG_ALIGNTO - 1};
}
constexpr std::size_t kHeader = align(sizeof(nlmsghdr));

template <typename T>
T load(std::span<const std::uint8_t> bytes, std::size_t at = 0) {
    T value{};
    std::memcpy(&value, bytes.data() + at, sizeof value);
    return value;
}

// A request under construction: the header, a fixed struct, then rtattrs
// (RFC 3549 §2.2: type-length-value, each padded to 4 bytes).
class Builder {
public:
    Builder(std::uint16_t type, std::uint16_t flags) {
        nlmsghdr header{};
        header.nlmsg_type = type;
        header.nlmsg_flags = static_cast<std::uint16_t>(NLM_F_REQUEST | flags);
        append(&header, sizeof header);
    }
    template <typename T>
    Builder& fixed(const T& value) {
        append(&value, sizeof value);
        return *this;
    }
    Builder& attribute(std::uint16_t type, const void* data, std::size_t size) {
        rtattr a{};
        a.rta_len = static_cast<std::uint16_t>(RTA_LENGTH(size));
        a.rta_type = type;
        append(&a, sizeof a);
        append(data, size);
        return *this;
    }
    Builder& u32(std::uint16_t type, std::uint32_t value) { return attribute(type, &value, sizeof value); }
    Builder& address(std::uint16_t type, Ipv4Address a) {
        const std::uint32_t network_order = htonl(a.value);
        return attribute(type, &network_order, sizeof network_order);
    }
    std::vector<std::uint8_t> take() { return std::move(bytes_); }

private:
    void append(const void* data, std::size_t size) {
        const auto* p = static_cast<const std::uint8_t*>(data);
        bytes_.insert(bytes_.end(), p, p + size);
        bytes_.resize(align(bytes_.size()), 0);
    }
    std::vector<std::uint8_t> bytes_;
};

// The attributes after a message's fixed struct: each with its payload,
// until the end or the first malformed one.
template <typename Each>
bool for_each_attribute(std::span<const std::uint8_t> message, std::size_t fixed_size, Each&& each) {
    std::size_t at = kHeader + align(fixed_size);
    while (at + sizeof(rtattr) <= message.size()) {
        const auto a = load<rtattr>(message, at);
        if (a.rta_len < sizeof(rtattr) || a.rta_len > message.size() - at) {
            return false;
        }
        each(a.rta_type & NLA_TYPE_MASK, message.subspan(at + RTA_LENGTH(0), a.rta_len - RTA_LENGTH(0)));
        at += align(a.rta_len);
    }
    return true;
}

std::optional<Ipv4Address> attribute_address(std::span<const std::uint8_t> payload) {
    if (payload.size() != sizeof(std::uint32_t)) {
        return std::nullopt;
    }
    return Ipv4Address{ntohl(load<std::uint32_t>(payload))};
}

std::optional<std::uint32_t> attribute_u32(std::span<const std::uint8_t> payload) {
    if (payload.size() != sizeof(std::uint32_t)) {
        return std::nullopt;
    }
    return load<std::uint32_t>(payload);
}

// The whole messages of one datagram, or nothing if one of them is cut.
std::optional<std::vector<std::span<const std::uint8_t>>> split_messages(
    std::span<const std::uint8_t> datagram) {
    std::vector<std::span<const std::uint8_t>> messages;
    std::size_t at = 0;
    while (at + sizeof(nlmsghdr) <= datagram.size()) {
        const auto header = load<nlmsghdr>(datagram, at);
        if (header.nlmsg_len < sizeof(nlmsghdr) || header.nlmsg_len > datagram.size() - at) {
            return std::nullopt;
        }
        messages.push_back(datagram.subspan(at, header.nlmsg_len));
        at += align(header.nlmsg_len);
    }
    return messages;
}

Error netlink_error(std::string_view what, const Ack& ack) {
    const int err = -ack.error;
    if (ack.message.empty()) {
        return errno_error(what, err);
    }
    return errno_error(fmt::format("{}: {}", what, ack.message), err);
}

}  // namespace

std::optional<AddressEntry> parse_address_message(std::span<const std::uint8_t> message) {
    if (message.size() < kHeader + sizeof(ifaddrmsg) || load<nlmsghdr>(message).nlmsg_type != RTM_NEWADDR) {
        return std::nullopt;
    }
    const auto ifa = load<ifaddrmsg>(message, kHeader);
    if (ifa.ifa_family != AF_INET || ifa.ifa_prefixlen > 32) {
        return std::nullopt;
    }
    std::optional<Ipv4Address> local, address;
    bool well_formed = for_each_attribute(message, sizeof ifa, [&](unsigned type, auto payload) {
        if (type == IFA_LOCAL) {
            local = attribute_address(payload);
        } else if (type == IFA_ADDRESS) {
            address = attribute_address(payload);
        }
    });
    if (!well_formed || (!local && !address)) {
        return std::nullopt;
    }
    AddressEntry entry;
    entry.ifindex = static_cast<int>(ifa.ifa_index);
    entry.local = {local.value_or(address.value_or(Ipv4Address{})), ifa.ifa_prefixlen};
    entry.address = address.value_or(entry.local.address);
    return entry;
}

std::optional<RouteEntry> parse_route_message(std::span<const std::uint8_t> message) {
    if (message.size() < kHeader + sizeof(rtmsg) || load<nlmsghdr>(message).nlmsg_type != RTM_NEWROUTE) {
        return std::nullopt;
    }
    const auto rt = load<rtmsg>(message, kHeader);
    if (rt.rtm_family != AF_INET || rt.rtm_dst_len > 32) {
        return std::nullopt;
    }
    RouteEntry route;
    route.table = rt.rtm_table;
    route.destination_length = rt.rtm_dst_len;
    route.tos = rt.rtm_tos;
    route.type = rt.rtm_type;
    route.protocol = rt.rtm_protocol;
    bool bad_value = false;
    bool well_formed = for_each_attribute(message, sizeof rt, [&](unsigned type, auto payload) {
        switch (type) {
            case RTA_TABLE:
                if (auto v = attribute_u32(payload))
                    route.table = *v;
                else
                    bad_value = true;
                break;
            case RTA_DST:
                if (auto v = attribute_address(payload))
                    route.destination = *v;
                else
                    bad_value = true;
                break;
            case RTA_GATEWAY:
                route.gateway = attribute_address(payload);
                bad_value = bad_value || !route.gateway;
                break;
            case RTA_OIF:
                if (auto v = attribute_u32(payload))
                    route.oif = static_cast<int>(*v);
                else
                    bad_value = true;
                break;
            case RTA_PRIORITY:
                if (auto v = attribute_u32(payload))
                    route.metric = *v;
                else
                    bad_value = true;
                break;
            case RTA_MULTIPATH:
                route.multipath = true;
                break;
            default:
                break;
        }
    });
    if (!well_formed || bad_value) {
        return std::nullopt;
    }
    return route;
}

std::optional<Ack> parse_ack(std::span<const std::uint8_t> message) {
    if (message.size() < kHeader + sizeof(nlmsgerr)) {
        return std::nullopt;
    }
    const auto header = load<nlmsghdr>(message);
    if (header.nlmsg_type != NLMSG_ERROR) {
        return std::nullopt;
    }
    const auto err = load<nlmsgerr>(message, kHeader);
    Ack ack{err.error, header.nlmsg_seq, {}};
    if ((header.nlmsg_flags & NLM_F_ACK_TLVS) == 0) {
        return ack;
    }
    // The TLVs follow the error and the request, which is echoed whole
    // unless NLM_F_CAPPED (netlink_ack, net/netlink/af_netlink.c).
    std::size_t echoed = 0;
    if ((header.nlmsg_flags & NLM_F_CAPPED) == 0 && err.msg.nlmsg_len > sizeof(nlmsghdr)) {
        echoed = align(err.msg.nlmsg_len - sizeof(nlmsghdr));
    }
    const std::size_t fixed = sizeof(nlmsgerr) + echoed;
    if (kHeader + fixed > message.size()) {
        return std::nullopt;
    }
    for_each_attribute(message, fixed, [&](unsigned type, auto payload) {
        if (type == NLMSGERR_ATTR_MSG) {
            const auto* text = reinterpret_cast<const char*>(payload.data());
            ack.message.assign(text, ::strnlen(text, payload.size()));
        }
    });
    return ack;
}

Result<Socket> Socket::open(int timeout_ms) {
    UniqueFd fd(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
    if (!fd) {
        return sys_error("opening a NETLINK_ROUTE socket");
    }
    // Extended ACKs (the kernel's reason as text), without the echoed
    // request; strict checking makes the kernel filter dumps by interface
    // and table (replies are filtered here too, for kernels without it).
    const int one = 1;
    for (int option : {NETLINK_EXT_ACK, NETLINK_CAP_ACK, NETLINK_GET_STRICT_CHK}) {
        (void)::setsockopt(fd.get(), SOL_NETLINK, option, &one, sizeof one);
    }
    timeval timeout{timeout_ms / 1000, static_cast<suseconds_t>(timeout_ms % 1000) * 1000};
    if (::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout) < 0) {
        return sys_error("setting SO_RCVTIMEO on the NETLINK_ROUTE socket");
    }
    sockaddr_nl local{};
    local.nl_family = AF_NETLINK;  // nl_pid 0: the kernel picks our port id
    if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&local), sizeof local) < 0) {
        return sys_error("binding the NETLINK_ROUTE socket");
    }
    socklen_t length = sizeof local;
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &length) < 0) {
        return sys_error("reading the NETLINK_ROUTE socket's port id");
    }
    return Socket(std::move(fd), local.nl_pid);
}

Result<void> Socket::send(std::vector<std::uint8_t>& message, std::string_view what) {
    auto header = load<nlmsghdr>(message);
    header.nlmsg_len = static_cast<std::uint32_t>(message.size());
    header.nlmsg_seq = ++sequence_;
    header.nlmsg_pid = port_id_;
    std::memcpy(message.data(), &header, sizeof header);
    sockaddr_nl kernel{};
    kernel.nl_family = AF_NETLINK;
    ssize_t sent = -1;
    do {
        sent = ::sendto(fd_.get(), message.data(), message.size(), 0,
                        reinterpret_cast<const sockaddr*>(&kernel), sizeof kernel);
    } while (sent < 0 && errno == EINTR);
    if (sent < 0) {
        return sys_error("{}: sending the request", what);
    }
    if (static_cast<std::size_t>(sent) != message.size()) {
        return errno_error(fmt::format("{}: sending the request (short write)", what), EIO);
    }
    return ok();
}

Result<std::span<const std::uint8_t>> Socket::receive(std::string_view what) {
    buffer_.resize(kBufferBytes);
    for (std::size_t i = 0; i < kMaxDatagrams; ++i) {
        sockaddr_nl from{};
        iovec iov{buffer_.data(), buffer_.size()};
        msghdr msg{};
        msg.msg_name = &from;
        msg.msg_namelen = sizeof from;
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        const ssize_t n = ::recvmsg(fd_.get(), &msg, 0);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                return errno_error(fmt::format("{}: no reply from the kernel", what), ETIMEDOUT);
            }
            return sys_error("{}: reading the reply", what);
        }
        if ((msg.msg_flags & MSG_TRUNC) != 0) {
            return errno_error(fmt::format("{}: a reply larger than {} bytes", what, kBufferBytes), EMSGSIZE);
        }
        if (from.nl_pid != 0) {
            continue;  // not from the kernel
        }
        return std::span<const std::uint8_t>(buffer_.data(), static_cast<std::size_t>(n));
    }
    return errno_error(fmt::format("{}: no reply from the kernel in {} datagrams", what, kMaxDatagrams),
                       EPROTO);
}

Result<void> Socket::request(std::vector<std::uint8_t> message, std::string_view what) {
    if (auto sent = send(message, what); !sent) {
        return sent;
    }
    const std::uint32_t sequence = sequence_;
    for (std::size_t i = 0; i < kMaxDatagrams; ++i) {
        auto datagram = receive(what);
        if (!datagram) {
            return datagram.error();
        }
        auto messages = split_messages(*datagram);
        if (!messages) {
            return errno_error(fmt::format("{}: a malformed reply", what), EPROTO);
        }
        for (auto m : *messages) {
            const auto header = load<nlmsghdr>(m);
            if (header.nlmsg_seq != sequence || header.nlmsg_pid != port_id_ ||
                header.nlmsg_type != NLMSG_ERROR) {
                continue;  // a late reply to an earlier request
            }
            auto ack = parse_ack(m);
            if (!ack) {
                return errno_error(fmt::format("{}: a malformed ACK", what), EPROTO);
            }
            if (ack->error != 0) {
                return netlink_error(what, *ack);
            }
            return ok();
        }
    }
    return errno_error(fmt::format("{}: no ACK", what), EPROTO);
}

Result<std::vector<std::vector<std::uint8_t>>> Socket::dump(std::vector<std::uint8_t> message,
                                                            std::uint16_t type, std::string_view what) {
    for (int attempt = 0; attempt < kMaxDumpAttempts; ++attempt) {
        if (auto sent = send(message, what); !sent) {
            return sent.error();
        }
        const std::uint32_t sequence = sequence_;
        std::vector<std::vector<std::uint8_t>> out;
        bool done = false;
        bool interrupted = false;
        for (std::size_t i = 0; i < kMaxDatagrams && !done; ++i) {
            auto datagram = receive(what);
            if (!datagram) {
                return datagram.error();
            }
            auto messages = split_messages(*datagram);
            if (!messages) {
                return errno_error(fmt::format("{}: a malformed reply", what), EPROTO);
            }
            for (auto m : *messages) {
                const auto header = load<nlmsghdr>(m);
                if (header.nlmsg_seq != sequence || header.nlmsg_pid != port_id_) {
                    continue;
                }
                interrupted = interrupted || (header.nlmsg_flags & NLM_F_DUMP_INTR) != 0;
                if (header.nlmsg_type == NLMSG_ERROR) {
                    auto ack = parse_ack(m);
                    if (!ack) {
                        return errno_error(fmt::format("{}: a malformed error", what), EPROTO);
                    }
                    return netlink_error(what, *ack);
                }
                if (header.nlmsg_type == NLMSG_DONE) {
                    // Its payload, when there is one, is the dump's error (netlink_dump_done).
                    if (m.size() >= kHeader + sizeof(int) && load<int>(m, kHeader) < 0) {
                        return netlink_error(what, Ack{load<int>(m, kHeader), sequence, {}});
                    }
                    done = true;
                    break;
                }
                if (header.nlmsg_type == type) {
                    out.emplace_back(m.begin(), m.end());
                }
            }
        }
        if (!done) {
            return errno_error(fmt::format("{}: no NLMSG_DONE in {} datagrams", what, kMaxDatagrams), EPROTO);
        }
        if (!interrupted) {
            return out;
        }
    }
    return errno_error(
        fmt::format("{}: the kernel's table kept changing during {} dumps", what, kMaxDumpAttempts), EAGAIN);
}

Result<std::vector<AddressEntry>> Socket::ipv4_addresses(int ifindex) {
    ifaddrmsg ifa{};
    ifa.ifa_family = AF_INET;
    ifa.ifa_index = static_cast<std::uint32_t>(ifindex);
    auto messages = dump(Builder(RTM_GETADDR, NLM_F_DUMP).fixed(ifa).take(), RTM_NEWADDR,
                         fmt::format("listing the IPv4 addresses of interface {} (RTM_GETADDR)", ifindex));
    if (!messages) {
        return messages.error();
    }
    std::vector<AddressEntry> entries;
    for (const auto& m : *messages) {
        auto entry = parse_address_message(m);
        if (entry && entry->ifindex == ifindex) {
            entries.push_back(*entry);
        }
    }
    return entries;
}

Result<void> Socket::add_ipv4_address(int ifindex, const Ipv4Prefix& address) {
    ifaddrmsg ifa{};
    ifa.ifa_family = AF_INET;
    ifa.ifa_prefixlen = static_cast<std::uint8_t>(address.length);
    ifa.ifa_scope = RT_SCOPE_UNIVERSE;
    ifa.ifa_index = static_cast<std::uint32_t>(ifindex);
    Builder b(RTM_NEWADDR, NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE);
    b.fixed(ifa).address(IFA_LOCAL, address.address).address(IFA_ADDRESS, address.address);
    if (address.length <= 30) {
        b.address(IFA_BROADCAST, address.broadcast());
    }
    return request(b.take(), fmt::format("adding {} to interface {} (RTM_NEWADDR)",
                                         format_ipv4_prefix(address), ifindex));
}

Result<void> Socket::delete_ipv4_address(const AddressEntry& entry) {
    ifaddrmsg ifa{};
    ifa.ifa_family = AF_INET;
    ifa.ifa_prefixlen = static_cast<std::uint8_t>(entry.local.length);
    ifa.ifa_index = static_cast<std::uint32_t>(entry.ifindex);
    Builder b(RTM_DELADDR, NLM_F_ACK);
    b.fixed(ifa).address(IFA_LOCAL, entry.local.address).address(IFA_ADDRESS, entry.address);
    return request(b.take(), fmt::format("deleting {} from interface {} (RTM_DELADDR)",
                                         format_ipv4_prefix(entry.local), entry.ifindex));
}

Result<std::vector<RouteEntry>> Socket::ipv4_routes(std::uint32_t table) {
    rtmsg rt{};
    rt.rtm_family = AF_INET;
    Builder b(RTM_GETROUTE, NLM_F_DUMP);
    b.fixed(rt).u32(RTA_TABLE, table);
    auto messages = dump(b.take(), RTM_NEWROUTE,
                         fmt::format("listing the IPv4 routes of table {} (RTM_GETROUTE)", table));
    if (!messages) {
        return messages.error();
    }
    std::vector<RouteEntry> routes;
    for (const auto& m : *messages) {
        auto route = parse_route_message(m);
        if (route && route->table == table) {
            routes.push_back(*route);
        }
    }
    return routes;
}

Result<void> Socket::replace_ipv4_default_route(int ifindex, Ipv4Address gateway) {
    rtmsg rt{};
    rt.rtm_family = AF_INET;
    rt.rtm_table = RT_TABLE_MAIN;
    rt.rtm_protocol = RTPROT_STATIC;
    rt.rtm_scope = RT_SCOPE_UNIVERSE;
    rt.rtm_type = RTN_UNICAST;
    Builder b(RTM_NEWROUTE, NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE);
    b.fixed(rt)
        .u32(RTA_TABLE, RT_TABLE_MAIN)
        .address(RTA_GATEWAY, gateway)
        .u32(RTA_OIF, static_cast<std::uint32_t>(ifindex));
    return request(b.take(), fmt::format("setting the default route via {} on interface {} (RTM_NEWROUTE)",
                                         format_ipv4(gateway), ifindex));
}

Result<void> Socket::delete_route(const RouteEntry& route) {
    // Zero protocol and type and RT_SCOPE_NOWHERE match any (fib_table_delete).
    rtmsg rt{};
    rt.rtm_family = AF_INET;
    rt.rtm_dst_len = static_cast<std::uint8_t>(route.destination_length);
    rt.rtm_tos = route.tos;
    rt.rtm_table = route.table < 256 ? static_cast<std::uint8_t>(route.table)
                                     : static_cast<std::uint8_t>(RT_TABLE_UNSPEC);
    rt.rtm_scope = RT_SCOPE_NOWHERE;
    Builder b(RTM_DELROUTE, NLM_F_ACK);
    b.fixed(rt).u32(RTA_TABLE, route.table);
    if (route.destination_length > 0) {
        b.address(RTA_DST, route.destination);
    }
    if (route.metric != 0) {
        b.u32(RTA_PRIORITY, route.metric);
    }
    if (route.gateway) {
        b.address(RTA_GATEWAY, *route.gateway);
    }
    if (route.oif != 0) {
        b.u32(RTA_OIF, static_cast<std::uint32_t>(route.oif));
    }
    return request(
        b.take(),
        fmt::format("deleting the route to {}/{}{} metric {} (RTM_DELROUTE)", format_ipv4(route.destination),
                    route.destination_length,
                    route.gateway ? " via " + format_ipv4(*route.gateway) : std::string(), route.metric));
}

}  // namespace sbx::agent::rtnl
