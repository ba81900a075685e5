// For the vsock tests: a temporary directory for the Unix sockets, host
// socket helpers, and a guest driver that plays Linux's side of the
// device — RX buffers in fixed slots that are recycled (so transfers of
// any size fit in guest memory), TX packets one chain at a time, and a
// per-stream model of the guest's credit accounting (§5.10.6.3).
#pragma once

#include <doctest/doctest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/unique_fd.hpp"
#include "devices/virtio/virtio_test_util.hpp"
#include "devices/virtio/vsock/vsock.hpp"

namespace sbx::virtio::vsock::testing {

using sbx::virtio::testing::MockDriver;
using sbx::virtio::testing::TestBed;

struct TempDir {
    std::string path;
    TempDir() {
        std::string templ = (std::filesystem::temp_directory_path() / "sbx-vsock-XXXXXX").string();
        REQUIRE(::mkdtemp(templ.data()) != nullptr);
        path = templ;
    }
    ~TempDir() { std::filesystem::remove_all(path); }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
};

inline std::unique_ptr<Vsock> open_vsock(const std::string& uds, std::size_t max_connections = 1024) {
    VsockConfig config;
    config.uds_path = uds;
    config.max_connections = max_connections;
    auto v = Vsock::open(config);
    REQUIRE_MESSAGE(v.has_value(), (v.has_value() ? "" : v.error().to_string()));
    return std::move(*v);
}

// ---- Host side ----

inline UniqueFd unix_client(const std::string& path) {
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    REQUIRE(fd);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.data(), path.size());
    REQUIRE(::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0);
    return fd;
}

inline UniqueFd unix_listener(const std::string& path) {
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    REQUIRE(fd);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.data(), path.size());
    REQUIRE(::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0);
    REQUIRE(::listen(fd.get(), 64) == 0);
    return fd;
}

inline void send_text(int fd, std::string_view text) {
    REQUIRE(::send(fd, text.data(), text.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(text.size()));
}

// Writes what the socket takes now; returns how much.
inline std::size_t send_some(int fd, std::span<const std::uint8_t> bytes) {
    ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    return n < 0 ? 0 : static_cast<std::size_t>(n);
}

// Reads what is readable now. `eof` is set on end of stream or an error.
inline std::vector<std::uint8_t> recv_some(int fd, bool* eof = nullptr, std::size_t max = 1 << 20) {
    std::vector<std::uint8_t> out(max);
    ssize_t n = ::recv(fd, out.data(), out.size(), MSG_DONTWAIT);
    if (eof != nullptr) {
        *eof = n == 0 || (n < 0 && errno != EAGAIN);
    }
    out.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
    return out;
}

inline std::string as_text(const std::vector<std::uint8_t>& v) { return {v.begin(), v.end()}; }

inline std::vector<std::uint8_t> pattern(std::size_t size, std::uint32_t seed) {
    std::vector<std::uint8_t> v(size);
    std::uint32_t x = seed * 2654435761U + 1;
    for (auto& b : v) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        b = static_cast<std::uint8_t>(x);
    }
    return v;
}

// ---- Guest side ----

struct Packet {
    PacketHeader header;
    std::vector<std::uint8_t> payload;
    [[nodiscard]] Op op() const { return header.operation(); }
};

// One guest stream socket as Linux's virtio transport keeps it.
struct GuestStream {
    std::uint32_t guest_port = 0;
    std::uint32_t host_port = 0;
    std::uint32_t buf_alloc = 256 * 1024;  // what we advertise
    std::uint32_t fwd_cnt = 0;             // bytes our application consumed
    std::uint32_t tx_cnt = 0;              // bytes we sent
    std::uint32_t peer_buf_alloc = 0;
    std::uint32_t peer_fwd_cnt = 0;
    std::vector<std::uint8_t> received;
    std::vector<Op> ops;  // every packet seen, in order
    std::uint32_t shutdown_flags = 0;
    bool reset = false;
    bool reading = true;  // false: the application stopped reading

    [[nodiscard]] std::uint32_t credit() const {
        const std::uint32_t in_flight = tx_cnt - peer_fwd_cnt;
        return in_flight >= peer_buf_alloc ? 0 : peer_buf_alloc - in_flight;
    }
    [[nodiscard]] bool saw(Op op) const { return std::find(ops.begin(), ops.end(), op) != ops.end(); }
};

class GuestDriver {
public:
    static constexpr std::uint64_t kCid = 3;
    static constexpr std::uint64_t kRxBase = 16ULL << 20;
    static constexpr std::uint64_t kTxBase = 48ULL << 20;

    // Takes over the rx and tx queues of a started bed; gives it
    // `rx_buffers` RX buffers of `rx_size` bytes (header included).
    explicit GuestDriver(TestBed& bed, std::uint32_t rx_size = 4096 + kHeaderSize, std::uint16_t rx_buffers = 64)
        : bed_(bed), rx_size_(rx_size), rx_slots_(rx_buffers) {
        REQUIRE(rx_buffers <= bed.drivers[kRxQueue]->size());
        REQUIRE(kRxBase + std::uint64_t{rx_size} * rx_buffers <= kTxBase);
        free_slots_.resize(rx_buffers);
        for (std::uint16_t i = 0; i < rx_buffers; ++i) {
            free_slots_[i] = static_cast<std::uint16_t>(rx_buffers - 1 - i);
        }
    }

    // Publishes up to n free RX buffers (all when n is 0) and notifies.
    void give_rx(std::size_t n = 0) {
        if (n == 0) {
            n = free_slots_.size();
        }
        for (; n > 0 && !free_slots_.empty(); --n) {
            std::uint16_t slot = free_slots_.back();
            free_slots_.pop_back();
            bed_.drivers[kRxQueue]->write_descriptor(slot, {slot_addr(slot), rx_size_, kDescFlagWrite, 0});
            bed_.drivers[kRxQueue]->publish(slot);
        }
        bed_.notify(kRxQueue);
    }
    [[nodiscard]] std::size_t rx_buffers_held_by_device() const { return rx_slots_ - free_slots_.size(); }

    // Whether receive() gives used RX buffers straight back.
    bool refill = true;

    // Takes every used RX buffer, dispatches it to its stream and returns
    // the packets; gives the buffers back (and notifies) when `refill`.
    std::vector<Packet> receive() {
        std::vector<Packet> packets;
        while (auto used = bed_.drivers[kRxQueue]->take_used()) {
            REQUIRE(used->head < rx_slots_);
            REQUIRE(used->len >= kHeaderSize);
            auto bytes = bed_.drivers[kRxQueue]->read(GuestAddress(slot_addr(used->head)), used->len);
            WireHeader wire{};
            std::memcpy(wire.data(), bytes.data(), kHeaderSize);
            Packet p{decode_header(wire), {bytes.begin() + kHeaderSize, bytes.end()}};
            REQUIRE(p.header.len == p.payload.size());
            free_slots_.push_back(used->head);
            dispatch(p);
            packets.push_back(std::move(p));
        }
        if (refill && !free_slots_.empty() && !packets.empty()) {
            give_rx();
        }
        return packets;
    }

    // Sends one packet as a TX chain (header and payload in separate
    // descriptors when `split`), and checks the device consumed it.
    void send(const PacketHeader& header, std::span<const std::uint8_t> payload = {}, bool split = true) {
        WireHeader wire = encode_header(header);
        std::vector<std::vector<std::uint8_t>> buffers;
        if (split || payload.empty()) {
            buffers.emplace_back(wire.begin(), wire.end());
            if (!payload.empty()) {
                buffers.emplace_back(payload.begin(), payload.end());
            }
        } else {
            std::vector<std::uint8_t> one(wire.begin(), wire.end());
            one.insert(one.end(), payload.begin(), payload.end());
            buffers.push_back(std::move(one));
        }
        send_raw(buffers);
    }
    // Sends device-readable buffers as they are (hostile tests).
    void send_raw(const std::vector<std::vector<std::uint8_t>>& buffers) {
        MockDriver& tx = *bed_.drivers[kTxQueue];
        std::uint64_t addr = kTxBase;
        for (std::size_t i = 0; i < buffers.size(); ++i) {
            REQUIRE(bed_.memory.write(GuestAddress(addr), buffers[i]));
            const bool last = i + 1 == buffers.size();
            tx.write_descriptor(static_cast<std::uint16_t>(i),
                                {addr, static_cast<std::uint32_t>(buffers[i].size()),
                                 static_cast<std::uint16_t>(last ? 0 : kDescFlagNext), static_cast<std::uint16_t>(i + 1)});
            addr += (buffers[i].size() + 15) / 16 * 16;
        }
        tx.publish(0);
        bed_.notify(kTxQueue);
        if (!bed_.needs_reset()) {
            auto used = tx.take_used();
            REQUIRE(used.has_value());
            CHECK(used->head == 0);
        }
    }

    PacketHeader header(Op op, std::uint32_t guest_port, std::uint32_t host_port) const {
        PacketHeader h;
        h.src_cid = kCid;
        h.dst_cid = kHostCid;
        h.src_port = guest_port;
        h.dst_port = host_port;
        h.type = kTypeStream;
        h.op = static_cast<std::uint16_t>(op);
        if (auto it = streams_.find(key(guest_port, host_port)); it != streams_.end()) {
            h.buf_alloc = it->second.buf_alloc;
            h.fwd_cnt = it->second.fwd_cnt;
        } else {
            h.buf_alloc = 256 * 1024;
        }
        return h;
    }

    // A stream the guest opens or accepts; sends REQUEST/RESPONSE.
    GuestStream& connect(std::uint32_t guest_port, std::uint32_t host_port, std::uint32_t buf_alloc = 256 * 1024) {
        GuestStream& s = add_stream(guest_port, host_port, buf_alloc);
        send(header(Op::Request, guest_port, host_port));
        return s;
    }
    GuestStream& accept(const Packet& request, std::uint32_t buf_alloc = 256 * 1024) {
        REQUIRE(request.op() == Op::Request);
        GuestStream& s = add_stream(request.header.dst_port, request.header.src_port, buf_alloc);
        s.peer_buf_alloc = request.header.buf_alloc;
        s.peer_fwd_cnt = request.header.fwd_cnt;
        send(header(Op::Response, s.guest_port, s.host_port));
        return s;
    }
    GuestStream& add_stream(std::uint32_t guest_port, std::uint32_t host_port, std::uint32_t buf_alloc) {
        GuestStream& s = streams_[key(guest_port, host_port)];
        s = GuestStream{};
        s.guest_port = guest_port;
        s.host_port = host_port;
        s.buf_alloc = buf_alloc;
        return s;
    }
    // Packets for no stream the guest knows (a host's REQUEST, an RST for
    // an unknown connection), oldest first; the test takes them.
    std::vector<Packet>& unclaimed() { return unclaimed_; }
    std::optional<Packet> take_unclaimed(Op op) {
        for (auto it = unclaimed_.begin(); it != unclaimed_.end(); ++it) {
            if (it->op() == op) {
                Packet p = *it;
                unclaimed_.erase(it);
                return p;
            }
        }
        return std::nullopt;
    }
    GuestStream* stream(std::uint32_t guest_port, std::uint32_t host_port) {
        auto it = streams_.find(key(guest_port, host_port));
        return it == streams_.end() ? nullptr : &it->second;
    }

    // Sends as much of `data` as the stream's credit allows, in packets of
    // at most `max_packet`; returns how much went.
    std::size_t write(GuestStream& s, std::span<const std::uint8_t> data, std::size_t max_packet = 64 * 1024) {
        std::size_t sent = 0;
        while (sent < data.size() && s.credit() > 0) {
            std::size_t n = std::min({data.size() - sent, max_packet, std::size_t{s.credit()}});
            PacketHeader h = header(Op::Rw, s.guest_port, s.host_port);
            h.len = static_cast<std::uint32_t>(n);
            send(h, data.subspan(sent, n), (sent / max_packet) % 2 == 0);
            s.tx_cnt += static_cast<std::uint32_t>(n);
            sent += n;
        }
        return sent;
    }
    // The application read everything received: tell the host once our
    // free space ran low, as Linux does.
    void consume(GuestStream& s) {
        const auto unconsumed = static_cast<std::uint32_t>(s.received.size() - s.fwd_cnt);
        if (unconsumed == 0) {
            return;
        }
        s.fwd_cnt += unconsumed;
        send(header(Op::CreditUpdate, s.guest_port, s.host_port));
    }

    // Pumps the device's event loop and receives until `done` or timeout.
    bool run_until(const std::function<bool()>& done, int timeout_ms = 5000) {
        auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
        while (!done()) {
            if (std::chrono::steady_clock::now() > deadline) {
                return false;
            }
            bed_.pump(1);
            receive();
        }
        return true;
    }
    // A few rounds of pumping with nothing expected.
    void settle(int rounds = 5) {
        for (int i = 0; i < rounds; ++i) {
            bed_.pump(2);
            receive();
        }
    }

private:
    static std::uint64_t key(std::uint32_t guest_port, std::uint32_t host_port) {
        return (std::uint64_t{guest_port} << 32) | host_port;
    }
    std::uint64_t slot_addr(std::uint16_t slot) const { return kRxBase + std::uint64_t{rx_size_} * slot; }

    void dispatch(const Packet& p) {
        CHECK(p.header.src_cid == kHostCid);
        CHECK(p.header.dst_cid == kCid);
        CHECK(p.header.type == kTypeStream);
        auto it = streams_.find(key(p.header.dst_port, p.header.src_port));
        if (it == streams_.end()) {
            unclaimed_.push_back(p);
            return;
        }
        GuestStream& s = it->second;
        s.ops.push_back(p.op());
        s.peer_buf_alloc = p.header.buf_alloc;
        s.peer_fwd_cnt = p.header.fwd_cnt;
        switch (p.op()) {
        case Op::Rw:
            // The device never sends beyond the credit we gave it.
            CHECK(s.received.size() - s.fwd_cnt + p.payload.size() <= s.buf_alloc);
            s.received.insert(s.received.end(), p.payload.begin(), p.payload.end());
            if (s.reading) {
                consume(s);
            }
            break;
        case Op::Shutdown: s.shutdown_flags |= p.header.flags; break;
        case Op::Rst: s.reset = true; break;
        case Op::CreditRequest: send(header(Op::CreditUpdate, s.guest_port, s.host_port)); break;
        default: break;
        }
    }

    TestBed& bed_;
    std::uint32_t rx_size_;
    std::uint16_t rx_slots_;
    std::vector<std::uint16_t> free_slots_;
    std::map<std::uint64_t, GuestStream> streams_;
    std::vector<Packet> unclaimed_;
};

// A started device on a fresh socket path with a guest driver that has
// given it its RX buffers.
struct FixtureOptions {
    std::uint32_t rx_size = 4096 + kHeaderSize;
    std::uint16_t rx_buffers = 64;
    std::size_t max_connections = 1024;
    bool give_rx = true;
};

struct Fixture {
    TempDir dir;
    std::string uds = dir.path + "/v.sock";
    Vsock* device = nullptr;
    std::unique_ptr<TestBed> bed;
    std::unique_ptr<GuestDriver> guest;

    explicit Fixture(FixtureOptions options = {}) {
        auto v = open_vsock(uds, options.max_connections);
        device = v.get();
        bed = std::make_unique<TestBed>(std::move(v));
        bed->start();
        guest = std::make_unique<GuestDriver>(*bed, options.rx_size, options.rx_buffers);
        if (options.give_rx) {
            guest->give_rx();
        }
    }
};

// A host client connected through the CONNECT handshake to a guest stream.
struct HostConnection {
    UniqueFd fd;
    GuestStream* stream = nullptr;
    std::uint32_t local_port = 0;
};

// The host connects and asks for `guest_port`; the guest accepts. Checks
// the REQUEST the guest sees and the OK line the host reads.
inline HostConnection host_connect(Fixture& f, std::uint32_t guest_port, std::uint32_t guest_buf_alloc = 256 * 1024) {
    HostConnection c;
    c.fd = unix_client(f.uds);
    send_text(c.fd.get(), "CONNECT " + std::to_string(guest_port) + "\n");
    std::optional<Packet> request;
    REQUIRE(f.guest->run_until([&] {
        for (auto& p : f.guest->unclaimed()) {
            if (p.op() == Op::Request && p.header.dst_port == guest_port) {
                request = p;
            }
        }
        return request.has_value();
    }));
    auto& un = f.guest->unclaimed();
    un.erase(std::remove_if(un.begin(), un.end(), [&](const Packet& p) { return p.header == request->header; }),
             un.end());
    CHECK(request->header.src_port >= (1U << 30));
    CHECK(request->header.buf_alloc == kConnectionBufAlloc);
    CHECK(request->header.len == 0);
    c.local_port = request->header.src_port;
    c.stream = &f.guest->accept(*request, guest_buf_alloc);
    std::string line;
    REQUIRE(f.guest->run_until([&] {
        line += as_text(recv_some(c.fd.get()));
        return line.find('\n') != std::string::npos;
    }));
    CHECK(line == "OK " + std::to_string(c.local_port) + "\n");
    return c;
}

}  // namespace sbx::virtio::vsock::testing
