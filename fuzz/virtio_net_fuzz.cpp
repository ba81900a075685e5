// libFuzzer target: a hostile driver's transmit and receive chains
// (virtio 1.2 §5.1.6: short headers, zero lengths, buffers of the wrong
// direction, loops and bad indices) and host frames of any length, against
// the real virtio-net over a SOCK_SEQPACKET pair (Net::from_fd: one frame,
// header first, per message, as a tap), with snapshot round trips. The used
// rings must add up: every used head was made available and not yet
// returned (§2.7.8), transmit chains come back with length 0 (§5.1.6.2),
// receive lengths sum to the device's counters, a frame lands whole, in
// order and intact, with num_buffers chains (§5.1.6.4), and a device that
// needs a reset returns nothing more (§2.1.2).
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <vector>

#include "devices/virtio/net/net.hpp"
#include "fuzz/virtio_bed.hpp"

namespace {

using namespace sbx;
using namespace sbx::virtio;
using sbx::fuzz::check;

constexpr std::uint64_t kMemory = 256 * 1024;
constexpr std::uint64_t kRingBase[2] = {0x1000, 0x5000};  // receive, transmit
// Buffers of the chains the model builds, then those of raw descriptors:
// apart, so a raw chain cannot land on a checked frame or on the rings.
constexpr std::uint64_t kHonest = 0x10000;
constexpr std::uint64_t kRaw = 0x30000;

std::uint8_t pattern(std::uint32_t seq, std::size_t i) { return static_cast<std::uint8_t>(seq * 31 + i); }

// virtio-net on one end of a new socket pair; `peer` gets the other.
std::unique_ptr<VirtioDevice> make_net(UniqueFd& peer) {
    int fds[2];
    check(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) == 0);
    peer = UniqueFd(fds[1]);
    return std::move(Net::from_fd(UniqueFd(fds[0]), NetConfig{"fuzz0", MacAddress{0x52, 0x54, 0, 1, 2, 3}}).value());
}

struct Fixture {
    UniqueFd peer;  // the host side: what the tap would be
    fuzz::Bed bed{kMemory, make_net(peer)};
    std::array<fuzz::DriverQueue, 2> sides;
    fuzz::BufferArea buffers{kHonest, kRaw};
    std::uint32_t seq = 0, last_delivered = 0;
    std::vector<std::uint32_t> sent;  // frame lengths by sequence number
    std::uint64_t rx_used = 0, peer_bytes = 0;
    bool frozen = false;  // NEEDS_RESET seen: nothing more may be used

    [[nodiscard]] const Net& net() const { return static_cast<const Net&>(bed.transport->device()); }

    // A chain as Linux builds it: `lens` buffers, device-writable on the
    // receive side, readable (filled with `fill`) on the transmit side.
    void honest_chain(std::size_t q, std::span<const std::uint32_t> lens, std::uint8_t fill) {
        fuzz::Chain chain;
        for (std::uint32_t len : lens) {
            bool wrapped = false;
            chain.buffers.emplace_back(buffers.take(len, wrapped), len);
            sides[0].clean = sides[0].clean && !wrapped;
            (void)bed.memory.fill(GuestAddress(chain.buffers.back().first), len, fill);
        }
        sides[q].publish_chain(std::move(chain), q == 0);
    }

    // Takes every used element and checks it; received frames are checked
    // against what the host sent while the receive side is clean.
    void drain_used() {
        std::vector<std::uint8_t> frame;
        std::size_t chains_left = 0;
        bool known = true;
        for (std::size_t q = 0; q < 2; ++q) {
            fuzz::DriverQueue& s = sides[q];
            while (s.ring) {
                const auto used = s.ring->take_used();
                if (!used) {
                    break;
                }
                check(!frozen);
                const fuzz::Chain* chain = s.take(*used);
                if (q == 1) {
                    check(used->len == 0);
                    continue;
                }
                check(used->len <= Net::kMaxFrameWithTso);
                rx_used += used->len;
                if (!known || chain == nullptr) {
                    known = false;  // the rest of this batch is not followed
                    continue;
                }
                const auto bytes = fuzz::contents(bed.memory, *chain, used->len);
                check(bytes.size() == used->len);  // no more than the chain holds
                if (chains_left == 0) {  // the first chain of a frame: its header says how many
                    check(bytes.size() >= kNetHeaderSize);
                    chains_left = bytes[10] | (bytes[11] << 8);
                    check(chains_left >= 1);
                    frame.clear();
                }
                frame.insert(frame.end(), bytes.begin(), bytes.end());
                if (--chains_left == 0) {
                    check_frame(frame);
                }
            }
        }
        const NetCounters& c = net().counters();
        if (sides[0].overcommitted) {
            rx_used = c.rx_bytes + kNetHeaderSize * c.rx_frames;  // what was missed is not known
        }
        check(rx_used == c.rx_bytes + kNetHeaderSize * c.rx_frames);
        check(c.rx_frames + c.rx_dropped_oversize + c.rx_dropped_malformed <= sent.size());
        frozen = frozen || bed.needs_reset();
    }
    void check_frame(const std::vector<std::uint8_t>& frame) {
        check(frame.size() >= kNetHeaderSize + 4);
        std::uint32_t n = 0;
        std::memcpy(&n, frame.data() + kNetHeaderSize, 4);
        check(n > last_delivered && n <= sent.size() && sent[n - 1] == frame.size());
        last_delivered = n;
        for (std::size_t i = kNetHeaderSize + 4; i < frame.size(); ++i) {
            check(frame[i] == pattern(n, i));
        }
    }
    void send_frame(std::uint32_t len) {
        if (len >= kNetHeaderSize && len < kNetHeaderSize + 4) {
            len = kNetHeaderSize + 4;  // room for the sequence number
        }
        std::vector<std::uint8_t> frame(len);
        const std::uint32_t n = seq + 1;
        for (std::size_t i = kNetHeaderSize; i < len; ++i) {
            frame[i] = pattern(n, i);
        }
        if (len >= kNetHeaderSize + 4) {
            std::memcpy(frame.data() + kNetHeaderSize, &n, 4);
        }
        if (::send(peer.get(), frame.data(), len, MSG_DONTWAIT | MSG_NOSIGNAL) == static_cast<ssize_t>(len)) {
            seq = n;
            sent.push_back(len);
        }
    }
    void drain_peer() {
        std::array<std::uint8_t, 64> buf{};
        ssize_t n = 0;
        // MSG_TRUNC: a datagram's whole length, whatever the buffer takes.
        while ((n = ::recv(peer.get(), buf.data(), buf.size(), MSG_DONTWAIT | MSG_TRUNC)) > 0) {
            peer_bytes += static_cast<std::uint64_t>(n);
        }
        const NetCounters& c = net().counters();
        check(peer_bytes == c.tx_bytes + kNetHeaderSize * c.tx_frames);
    }
    // Quiesce, save, and restore into a new device on a new backend: the
    // held receive chains go back to the ring, the configuration stays.
    void round_trip() {
        drain_peer();
        check(bed.transport->quiesce().has_value());
        const auto bytes = bed.transport->save_state();
        bed.transport = std::make_unique<MmioTransport>(make_net(peer), bed.memory, bed.irq, *bed.loop);
        rx_used = peer_bytes = 0;
        sent.assign(sent.size(), 0);  // what the old backend held is gone
        check(bed.transport->restore_state(bytes).has_value());
    }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    fuzz::Input in(data, size);
    Fixture f;
    for (int step = 0; step < 128 && !in.empty(); ++step) {
        const auto op = in.take<std::uint8_t>();
        const std::size_t q = (op >> 7) & 1;
        switch (op % 8) {
        case 0: {  // §3.1.1 with features and queue sizes of the input's
            const auto features = in.take<std::uint64_t>();
            // Indirect tables are the virtqueue target's; here a received
            // frame could become one and point the device at the rings.
            const bool accepted = f.bed.negotiate((features | kFeatureVersion1) & ~kFeatureIndirectDesc);
            fuzz::start_queues(f.bed, f.sides, kRingBase, in);
            f.frozen = !accepted || f.bed.needs_reset();
            break;
        }
        case 1: {  // a chain as a driver builds it
            if (!f.sides[q].ring) {
                break;
            }
            std::array<std::uint32_t, 3> lens{};
            const std::size_t n = 1 + in.take<std::uint8_t>() % lens.size();
            for (std::size_t i = 0; i < n; ++i) {
                lens[i] = in.take<std::uint16_t>() % 4096;
            }
            f.honest_chain(q, std::span(lens).first(n), in.take<std::uint8_t>());
            f.bed.transport->notify(q == 0 ? Net::kRxQueue : Net::kTxQueue);
            break;
        }
        case 2: {  // raw descriptors from a head, made available
            if (!f.sides[q].ring) {
                break;
            }
            f.sides[q].publish_raw(in, kRaw);
            break;
        }
        case 3: f.bed.transport->notify(q == 0 ? Net::kRxQueue : Net::kTxQueue); break;
        case 4: f.send_frame((op & 0x40) != 0 ? in.take<std::uint16_t>() : in.take<std::uint8_t>() * 8U); break;
        case 5: f.bed.pump(); break;
        case 6:
            if ((op & 0x40) != 0) {
                f.round_trip();
            } else {
                f.drain_peer();
            }
            break;
        case 7:  // the driver writes its buffers
            (void)f.bed.memory.write(GuestAddress(kHonest + in.take<std::uint16_t>() * 3ULL),
                                     in.bytes(in.take<std::uint8_t>() % 64));
            break;
        }
        f.drain_used();
    }
    f.bed.pump();
    f.drain_used();
    f.drain_peer();
    return 0;
}
