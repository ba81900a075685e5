// The virtio-vsock wire format (virtio 1.2 §5.10.6): struct
// virtio_vsock_hdr, its op/type/flag values, and a little-endian codec.
// The header is decoded from a copy (ChainReader), so a value checked is
// the value used.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

namespace sbx::virtio::vsock {

// Well-known CIDs (§5.10.4): 2 is the host; guests get 3 and up.
inline constexpr std::uint64_t kHostCid = 2;
inline constexpr std::uint64_t kFirstGuestCid = 3;

// Queue indices (§5.10.2).
inline constexpr std::size_t kRxQueue = 0;
inline constexpr std::size_t kTxQueue = 1;
inline constexpr std::size_t kEventQueue = 2;

// Feature bit (§5.10.3). Without it negotiated the device still acts as
// if it were (1.2: stream is implied).
inline constexpr std::uint64_t kFeatureStream = 1ULL << 0;

// The largest payload one packet carries, as Linux's
// VIRTIO_VSOCK_MAX_PKT_BUF_SIZE (vhost drops anything larger).
inline constexpr std::uint32_t kMaxPacketPayload = 64 * 1024;

// VIRTIO_VSOCK_TYPE_* (§5.10.6).
inline constexpr std::uint16_t kTypeStream = 1;

// VIRTIO_VSOCK_OP_* (§5.10.6).
enum class Op : std::uint16_t {
    Invalid = 0,
    Request = 1,
    Response = 2,
    Rst = 3,
    Shutdown = 4,
    Rw = 5,
    CreditUpdate = 6,
    CreditRequest = 7,
};

// VIRTIO_VSOCK_SHUTDOWN_* flags of an OP_SHUTDOWN (§5.10.6.5).
inline constexpr std::uint32_t kShutdownRcv = 1;
inline constexpr std::uint32_t kShutdownSend = 2;

// struct virtio_vsock_hdr, in host byte order once decoded.
struct PacketHeader {
    std::uint64_t src_cid = 0;
    std::uint64_t dst_cid = 0;
    std::uint32_t src_port = 0;
    std::uint32_t dst_port = 0;
    std::uint32_t len = 0;
    std::uint16_t type = 0;
    std::uint16_t op = 0;
    std::uint32_t flags = 0;
    std::uint32_t buf_alloc = 0;
    std::uint32_t fwd_cnt = 0;

    [[nodiscard]] Op operation() const { return static_cast<Op>(op); }
    bool operator==(const PacketHeader&) const = default;
};

// sizeof(struct virtio_vsock_hdr): it is packed, 44 bytes on the wire.
inline constexpr std::size_t kHeaderSize = 44;
using WireHeader = std::array<std::uint8_t, kHeaderSize>;

[[nodiscard]] PacketHeader decode_header(const WireHeader& wire);
[[nodiscard]] WireHeader encode_header(const PacketHeader& header);

// "RW" for Op::Rw, "op 9" for an unknown value; for log lines.
[[nodiscard]] std::string op_name(std::uint16_t op);

}  // namespace sbx::virtio::vsock
