#include "devices/virtio/vsock/vsock_packet.hpp"

#include <fmt/core.h>

namespace sbx::virtio::vsock {
namespace {

// Field offsets of the packed struct virtio_vsock_hdr.
constexpr std::size_t kSrcCid = 0;
constexpr std::size_t kDstCid = 8;
constexpr std::size_t kSrcPort = 16;
constexpr std::size_t kDstPort = 20;
constexpr std::size_t kLen = 24;
constexpr std::size_t kType = 28;
constexpr std::size_t kOp = 30;
constexpr std::size_t kFlags = 32;
constexpr std::size_t kBufAlloc = 36;
constexpr std::size_t kFwdCnt = 40;
static_assert(kFwdCnt + 4 == kHeaderSize);

template <typename T>
T load_le(const WireHeader& wire, std::size_t offset) {
    T value = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) {
        value |= static_cast<T>(static_cast<T>(wire[offset + i]) << (8 * i));
    }
    return value;
}

template <typename T>
void store_le(WireHeader& wire, std::size_t offset, T value) {
    for (std::size_t i = 0; i < sizeof(T); ++i) {
        wire[offset + i] = static_cast<std::uint8_t>(value >> (8 * i));
    }
}

}  // namespace

PacketHeader decode_header(const WireHeader& wire) {
    PacketHeader h;
    h.src_cid = load_le<std::uint64_t>(wire, kSrcCid);
    h.dst_cid = load_le<std::uint64_t>(wire, kDstCid);
    h.src_port = load_le<std::uint32_t>(wire, kSrcPort);
    h.dst_port = load_le<std::uint32_t>(wire, kDstPort);
    h.len = load_le<std::uint32_t>(wire, kLen);
    h.type = load_le<std::uint16_t>(wire, kType);
    h.op = load_le<std::uint16_t>(wire, kOp);
    h.flags = load_le<std::uint32_t>(wire, kFlags);
    h.buf_alloc = load_le<std::uint32_t>(wire, kBufAlloc);
    h.fwd_cnt = load_le<std::uint32_t>(wire, kFwdCnt);
    return h;
}

WireHeader encode_header(const PacketHeader& h) {
    WireHeader wire{};
    store_le(wire, kSrcCid, h.src_cid);
    store_le(wire, kDstCid, h.dst_cid);
    store_le(wire, kSrcPort, h.src_port);
    store_le(wire, kDstPort, h.dst_port);
    store_le(wire, kLen, h.len);
    store_le(wire, kType, h.type);
    store_le(wire, kOp, h.op);
    store_le(wire, kFlags, h.flags);
    store_le(wire, kBufAlloc, h.buf_alloc);
    store_le(wire, kFwdCnt, h.fwd_cnt);
    return wire;
}

std::string op_name(std::uint16_t op) {
    switch (static_cast<Op>(op)) {
    case Op::Request: return "REQUEST";
    case Op::Response: return "RESPONSE";
    case Op::Rst: return "RST";
    case Op::Shutdown: return "SHUTDOWN";
    case Op::Rw: return "RW";
    case Op::CreditUpdate: return "CREDIT_UPDATE";
    case Op::CreditRequest: return "CREDIT_REQUEST";
    case Op::Invalid: break;
    }
    return fmt::format("op {}", op);
}

}  // namespace sbx::virtio::vsock
