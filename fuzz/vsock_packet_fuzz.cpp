// libFuzzer target: a hostile guest's virtio-vsock packets (virtio 1.2
// §5.10.6: any op, type, cids, ports, len, flags, buf_alloc and fwd_cnt,
// in chains it builds or in raw descriptors) and host peers that write,
// read, close and CONNECT, against the real device and its connection
// table with real Unix sockets for the host side (vsock_host.hpp), with
// snapshot round trips. Every packet the device gives the guest is well
// formed and within the credit the guest granted (§5.10.6.3), its fwd_cnt
// never counts bytes the guest did not send, what the device holds for
// the host stays within its buf_alloc, and a stream the guest reset or
// shut down for sending (§5.10.6.5), or that a device reset dropped,
// ends at the host with EOF.
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "base/unix_socket.hpp"
#include "devices/virtio/vsock/vsock.hpp"
#include "fuzz/virtio_bed.hpp"

namespace {

using namespace sbx;
using namespace sbx::virtio;
using namespace sbx::virtio::vsock;
using sbx::fuzz::check;

constexpr std::uint64_t kCid = 3;
constexpr std::uint64_t kMemory = 256 * 1024;
constexpr std::uint64_t kRingBase[3] = {0x1000, 0x5000, 0x9000};  // rx, tx, event
constexpr std::uint64_t kHonest = 0x10000;  // buffers of the chains the model builds
constexpr std::uint64_t kRaw = 0x30000;     // and of raw descriptors
constexpr std::uint32_t kListened[2] = {1000, 1001};  // host ports with a listener
constexpr std::uint32_t kHostPorts[6] = {1000, 1001, 7, 1U << 30, (1U << 30) + 1, 0xffffffff};
constexpr std::uint32_t kGuestPorts[4] = {1024, 1025, 1026, 0};

// The Unix sockets' directory, for the run.
const std::string& socket_dir() {
    static const fuzz::RunDir dir("vsock");
    return dir.path();
}

// Reads what is there; whether the stream then ends (EOF or an error).
bool ends(int fd) {
    std::array<std::uint8_t, 4096> buf{};
    ssize_t n = 0;
    while ((n = ::recv(fd, buf.data(), buf.size(), MSG_DONTWAIT)) > 0) {
    }
    return n == 0 || (errno != EAGAIN && errno != EINTR);
}

// A stream as the guest keeps it, by host port << 32 | guest port.
struct Stream {
    std::uint32_t buf_alloc = 0, fwd_cnt = 0;  // what the guest last told the device
    std::uint32_t tx_cnt = 0;                  // RW bytes the device sent the guest
    std::uint32_t guest_sent = 0;              // RW bytes the guest sent
    UniqueFd host;                             // the host's socket, for the guest's connects
    bool shut_send = false;
};

std::unique_ptr<VirtioDevice> open_vsock() {
    VsockConfig config;
    config.guest_cid = kCid;
    config.uds_path = socket_dir() + "/v";
    return std::move(Vsock::open(config).value());
}

struct Fixture {
    fuzz::Bed bed{kMemory, open_vsock()};
    std::array<UniqueFd, 2> listeners{listen_unix(socket_dir() + "/v_1000", Blocking::No).value(),
                                      listen_unix(socket_dir() + "/v_1001", Blocking::No).value()};
    std::vector<UniqueFd> clients;  // host processes that sent CONNECT
    std::array<fuzz::DriverQueue, 3> queues;
    std::map<std::uint64_t, Stream> streams;
    bool tracked = true;  // no raw transmit chain since the driver set up
    fuzz::BufferArea buffers{kHonest, kRaw};

    ~Fixture() {
        for (std::uint32_t port : kListened) {
            (void)::unlink((socket_dir() + "/v_" + std::to_string(port)).c_str());
        }
    }
    [[nodiscard]] const Vsock& vsock() const { return static_cast<const Vsock&>(bed.transport->device()); }

    std::uint64_t allocate(std::uint32_t len) {
        bool wrapped = false;
        const std::uint64_t at = buffers.take(len, wrapped);
        for (auto q : {kRxQueue, kEventQueue}) {
            queues[q].clean = queues[q].clean && !wrapped;  // held buffers may be reused
        }
        return at;
    }
    // The device dropped every connection: each host socket ends, and
    // connects nobody accepted are gone.
    void all_gone() {
        for (auto& [key, s] : streams) {
            check(!s.host || ends(s.host.get()));
        }
        streams.clear();
        tracked = true;
        for (const UniqueFd& l : listeners) {
            while (UniqueFd(::accept4(l.get(), nullptr, nullptr, SOCK_CLOEXEC))) {
            }
        }
    }

    // The guest's packet in a chain it built (header and payload in one
    // buffer or two), then what the device must have done with it.
    void send(const PacketHeader& h, std::span<const std::uint8_t> payload, bool split) {
        const WireHeader wire = encode_header(h);
        fuzz::Chain chain;
        const std::uint64_t at = allocate(static_cast<std::uint32_t>(kHeaderSize + payload.size()));
        (void)bed.memory.write(GuestAddress(at), wire);
        (void)bed.memory.write(GuestAddress(at + kHeaderSize), payload);
        if (split) {
            chain.buffers = {{at, kHeaderSize}, {at + kHeaderSize, static_cast<std::uint32_t>(payload.size())}};
        } else {
            chain.buffers = {{at, static_cast<std::uint32_t>(kHeaderSize + payload.size())}};
        }
        queues[kTxQueue].publish_chain(std::move(chain), false);
        // A chain longer than the ring overwrote itself: the device read
        // another packet than this one, so expectations end here.
        tracked = tracked && queues[kTxQueue].clean;
        bed.transport->notify(kTxQueue);
        // What the device takes as a stream packet (vsock.cpp handle_tx_chain).
        if (!tracked || h.len > payload.size() || h.src_cid != kCid || h.dst_cid != kHostCid ||
            h.type != kTypeStream || h.len > kMaxPacketPayload) {
            return;
        }
        const std::uint64_t key = std::uint64_t{h.dst_port} << 32 | h.src_port;
        // A guest may talk on ports before it saw the device's REQUEST for them.
        auto [it, fresh] = streams.try_emplace(key);
        if (h.operation() == Op::Request) {
            // A new stream; one that was there is reset.
            check(fresh || !it->second.host || ends(it->second.host.get()));
            Stream& s = it->second = Stream{};
            s.buf_alloc = h.buf_alloc;
            s.fwd_cnt = h.fwd_cnt;
            for (std::size_t i = 0; i < 2; ++i) {
                if (h.dst_port == kListened[i]) {
                    s.host = UniqueFd(::accept4(listeners[i].get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
                }
            }
            return;
        }
        Stream& s = it->second;
        s.buf_alloc = h.buf_alloc;
        s.fwd_cnt = h.fwd_cnt;
        if (h.operation() == Op::Rw) {
            s.guest_sent += h.len;
        } else if (h.operation() == Op::Shutdown && (h.flags & kShutdownSend) != 0) {
            s.shut_send = true;
        } else if (h.operation() == Op::Rst) {
            check(!s.host || ends(s.host.get()));  // forgotten at once (§5.10.6.6)
            streams.erase(it);
        }
    }

    // A packet the device put into a receive chain the guest built.
    void received(std::span<const std::uint8_t> bytes) {
        check(bytes.size() >= kHeaderSize);
        WireHeader wire{};
        std::memcpy(wire.data(), bytes.data(), kHeaderSize);
        const PacketHeader h = decode_header(wire);
        check(bytes.size() == kHeaderSize + h.len && h.len <= kMaxPacketPayload);
        check(h.src_cid == kHostCid && h.dst_cid == kCid && h.type == kTypeStream);
        check(h.op >= static_cast<std::uint16_t>(Op::Request) && h.op <= static_cast<std::uint16_t>(Op::CreditRequest));
        check(h.len == 0 || h.operation() == Op::Rw);
        check(h.operation() == Op::Rst || h.buf_alloc == kConnectionBufAlloc);
        const std::uint64_t key = std::uint64_t{h.src_port} << 32 | h.dst_port;
        if (!tracked) {
            return;
        }
        // A host client's CONNECT, unless the guest already answered it.
        auto it = h.operation() == Op::Request ? streams.try_emplace(key).first : streams.find(key);
        if (it == streams.end() || h.operation() == Op::Rst) {
            return;  // an RST may have been queued before a new stream took the ports
        }
        Stream& s = it->second;
        check(h.fwd_cnt <= s.guest_sent);  // the host took no more than the guest sent
        if (h.operation() == Op::Rw) {
            const std::uint32_t in_flight = s.tx_cnt - s.fwd_cnt;
            check(in_flight < s.buf_alloc && h.len <= s.buf_alloc - in_flight);
            s.tx_cnt += h.len;
        }
    }

    void drain_used() {
        for (std::size_t q = 0; q < queues.size(); ++q) {
            while (queues[q].ring) {
                const auto used = queues[q].ring->take_used();
                if (!used) {
                    break;
                }
                const fuzz::Chain* chain = queues[q].take(*used);
                if (q == kTxQueue) {
                    check(used->len == 0);  // the device writes nothing into a transmit chain
                } else if (chain != nullptr) {
                    const auto bytes = fuzz::contents(bed.memory, *chain, used->len);
                    check(bytes.size() == used->len);
                    if (q == kRxQueue) {
                        received(bytes);
                    } else {
                        check(used->len == 4);  // struct virtio_vsock_event (§5.10.6.7)
                    }
                }
            }
        }
        const VsockStats stats = vsock().stats();
        check(stats.buffered_to_host <= stats.connections * std::size_t{kConnectionBufAlloc});
        if (bed.needs_reset()) {
            all_gone();
        }
    }

    // Quiesce, save and restore on a new device: no stream survives.
    void round_trip() {
        check(bed.transport->quiesce().has_value());
        const auto bytes = bed.transport->save_state();
        bed.transport.reset();
        bed.transport = std::make_unique<MmioTransport>(open_vsock(), bed.memory, bed.irq, *bed.loop);
        check(bed.transport->restore_state(bytes).has_value());
        all_gone();
    }
};

PacketHeader header_of(fuzz::Input& in, const Fixture& f, std::uint8_t flags) {
    PacketHeader h;
    h.src_cid = (flags & 1) != 0 ? in.take<std::uint64_t>() : kCid;
    h.dst_cid = (flags & 2) != 0 ? in.take<std::uint64_t>() : kHostCid;
    const auto ports = in.take<std::uint8_t>();
    h.src_port = kGuestPorts[ports % 4] != 0 ? kGuestPorts[ports % 4] : in.take<std::uint32_t>();
    h.dst_port = kHostPorts[(ports >> 2) % 6] != 0xffffffff ? kHostPorts[(ports >> 2) % 6] : in.take<std::uint32_t>();
    h.op = (flags & 4) != 0 ? in.take<std::uint16_t>() : in.take<std::uint8_t>() % 8;
    h.type = (flags & 8) != 0 ? in.take<std::uint16_t>() : kTypeStream;
    h.flags = in.take<std::uint8_t>() % 4;
    h.buf_alloc = (flags & 32) != 0 ? in.take<std::uint32_t>() : kConnectionBufAlloc;
    // A guest's fwd_cnt is what it consumed: all it was sent, or the input's.
    auto it = f.streams.find(std::uint64_t{h.dst_port} << 32 | h.src_port);
    h.fwd_cnt = (flags & 64) != 0 ? in.take<std::uint32_t>() : it != f.streams.end() ? it->second.tx_cnt : 0;
    return h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    Fixture f;
    fuzz::Input in(data, size);
    for (int step = 0; step < 128 && !in.empty(); ++step) {
        const auto op = in.take<std::uint8_t>();
        const std::size_t q = (op >> 6) % 3;
        switch (op % 8) {
        case 0: {  // §3.1.1, then §5.10.2's three queues
            const auto features = in.take<std::uint8_t>();
            f.bed.negotiate(kFeatureVersion1 | kFeatureEventIdx * (features & 1) | kFeatureStream * (features >> 1 & 1));
            f.all_gone();  // the reset dropped them all
            fuzz::start_queues(f.bed, f.queues, kRingBase, in);
            break;
        }
        case 1: {  // receive or event buffers as the driver posts them
            if (!f.queues[q].ring || q == kTxQueue) {
                break;
            }
            for (int n = 1 + in.take<std::uint8_t>() % 8; n > 0; --n) {
                const auto b = in.take<std::uint8_t>();
                const std::uint32_t len = (b & 0x80) != 0 ? b & 0x3f : kHeaderSize + (b & 0x7f) * 64U;
                f.queues[q].publish_chain(fuzz::Chain{{{f.allocate(len), len}}}, true);
            }
            f.bed.transport->notify(q);
            break;
        }
        case 2: {  // a guest packet
            if (!f.queues[kTxQueue].ring) {
                break;
            }
            const auto flags = in.take<std::uint8_t>();
            const PacketHeader h = header_of(in, f, flags);
            std::vector<std::uint8_t> payload(in.take<std::uint8_t>() * ((flags & 16) != 0 ? 64U : 1U));
            const auto given = in.bytes(payload.size());
            std::copy(given.begin(), given.end(), payload.begin());
            PacketHeader announced = h;
            announced.len = (op & 0x80) != 0 ? in.take<std::uint32_t>() : static_cast<std::uint32_t>(payload.size());
            f.send(announced, payload, (op & 0x40) != 0);
            break;
        }
        case 3:  // raw descriptors, made available and notified
            if (f.queues[q].ring) {
                f.queues[q].publish_raw(in, kRaw);
                f.tracked = f.tracked && q != kTxQueue;
                f.bed.transport->notify(q);
            }
            break;
        case 4:
        case 5: {  // a host peer writes to its stream, reads all, or closes
            auto it = f.streams.begin();
            std::advance(it, f.streams.empty() ? 0 : in.take<std::uint8_t>() % f.streams.size());
            const auto bytes = in.bytes(op % 8 == 4 ? in.take<std::uint8_t>() : 0);
            if (it == f.streams.end() || !it->second.host) {
                break;
            }
            if (op % 8 == 4) {
                (void)::send(it->second.host.get(), bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
            } else if ((op & 0x80) != 0) {
                it->second.host.reset();
            } else {
                (void)ends(it->second.host.get());
            }
            break;
        }
        case 6: {  // a host process CONNECTs to a guest port (vsock_host.hpp)
            if (f.clients.size() >= 8) {
                break;
            }
            auto client = connect_unix(socket_dir() + "/v", Blocking::No);
            const std::string line = "CONNECT " + std::to_string(kGuestPorts[op % 3]) + "\n";
            if (client && ::send(client->get(), line.data(), line.size(), MSG_NOSIGNAL) > 0) {
                f.clients.push_back(std::move(*client));
            }
            break;
        }
        case 7:
            if ((op & 0xc0) == 0xc0) {
                f.round_trip();
            } else {
                f.bed.pump();
            }
            break;
        }
        f.drain_used();
    }
    // The host side reads what is there and the device flushes what it
    // holds: a stream the guest shut down for sending then ends.
    for (int round = 0; round < 8; ++round) {
        for (auto& [key, s] : f.streams) {
            if (s.host) {
                (void)ends(s.host.get());
            }
        }
        f.bed.pump();
        f.drain_used();
    }
    for (auto& [key, s] : f.streams) {
        check(!s.shut_send || !s.host || ends(s.host.get()));
    }
    return 0;
}
