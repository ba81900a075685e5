#include "host-tools/sbxd/daemon/rfb_filter.hpp"

#include <algorithm>

namespace sbx::sbxd {

namespace {

// Client-to-server message types: RFC 6143 §7.5, and the extensions of
// §7.7's registry that noVNC sends (their layouts from the community's
// RFB specification, rfbproto).
enum : std::uint8_t {
    kSetPixelFormat = 0,
    kSetEncodings = 2,
    kFramebufferUpdateRequest = 3,
    kKeyEvent = 4,
    kPointerEvent = 5,
    kClientCutText = 6,
    kEnableContinuousUpdates = 150,
    kClientFence = 248,
    kSetDesktopSize = 251,
    kXvp = 252,
    kQemuClientMessage = 255,
};
constexpr std::uint8_t kQemuExtendedKeyEvent = 0;
constexpr std::size_t kMaxFencePayload = 64;  // rfbproto, "ClientFence"

// Security types (§7.2.1, §8.1).
constexpr std::uint8_t kSecurityNone = 1;
constexpr std::uint8_t kSecurityVncAuthentication = 2;

std::uint32_t be16(std::string_view bytes, std::size_t at) {
    return (static_cast<std::uint32_t>(static_cast<std::uint8_t>(bytes[at])) << 8) |
           static_cast<std::uint8_t>(bytes[at + 1]);
}

std::uint32_t be32(std::string_view bytes, std::size_t at) {
    return (be16(bytes, at) << 16) | be16(bytes, at + 2);
}

Error refused(std::string message) { return Error{std::move(message), 0, std::string(kRfbRefused)}; }

}  // namespace

Result<RfbViewOnlyFilter::Size> RfbViewOnlyFilter::size_of_current() const {
    auto fixed = [](std::size_t n) { return Size{n, n}; };
    switch (phase_) {
        case Phase::Version:
            return fixed(12);  // "RFB xxx.yyy\n" (§7.1.1)
        case Phase::SecurityType:
        case Phase::ClientInit:
            return fixed(1);
        case Phase::VncAuthResponse:
            return fixed(16);  // the DES-encrypted challenge (§7.2.2)
        case Phase::Messages:
            break;
    }
    if (header_.empty()) {
        return Size{1, 0};
    }
    const auto type = static_cast<std::uint8_t>(header_[0]);
    const std::size_t have = header_.size();
    switch (type) {
        case kSetPixelFormat:
            return fixed(20);
        case kFramebufferUpdateRequest:
        case kEnableContinuousUpdates:
            return fixed(10);
        case kKeyEvent:
            return fixed(8);
        case kPointerEvent:
            return fixed(6);
        case kXvp:
            return fixed(4);
        case kSetEncodings:  // type, padding, U16 count, count × S32
            return have < 4 ? Size{4, 0} : Size{4, 4 + 4 * std::size_t{be16(header_, 2)}};
        case kClientCutText: {  // type, 3 padding, U32 length, text
            if (have < 8) {
                return Size{8, 0};
            }
            // A negative length (as S32) is the extended clipboard's: that many bytes follow.
            const std::uint64_t length = be32(header_, 4);
            return Size{8, 8 + (length & 0x80000000U ? (std::uint64_t{1} << 32) - length : length)};
        }
        case kClientFence: {  // type, 3 padding, U32 flags, U8 length, payload
            if (have < 9) {
                return Size{9, 0};
            }
            const std::size_t length = static_cast<std::uint8_t>(header_[8]);
            if (length > kMaxFencePayload) {
                return refused("a ClientFence payload is at most 64 bytes");
            }
            return Size{9, 9 + length};
        }
        case kSetDesktopSize:  // type, padding, U16 width, U16 height, U8 screens, padding, screens × 16
            return have < 8 ? Size{8, 0} : Size{8, 8 + 16 * std::size_t{static_cast<std::uint8_t>(header_[6])}};
        case kQemuClientMessage:
            if (have < 2) {
                return Size{2, 0};
            }
            if (static_cast<std::uint8_t>(header_[1]) != kQemuExtendedKeyEvent) {
                return refused(fmt::format("QEMU client message {} is not one a viewer sends",
                                           static_cast<unsigned>(static_cast<std::uint8_t>(header_[1]))));
            }
            return fixed(12);  // type, subtype, U16 down-flag, U32 keysym, U32 keycode
        default:
            return refused(fmt::format("client message type {} is unknown (RFC 6143 §7.5)", static_cast<unsigned>(type)));
    }
}

Result<bool> RfbViewOnlyFilter::admit_current() {
    switch (phase_) {
        case Phase::Version:
            if (header_ != "RFB 003.008\n" && header_ != "RFB 003.007\n") {
                return refused("a view-only desktop link speaks RFB 3.7 or 3.8 (RFC 6143 §7.1.1)");
            }
            phase_ = Phase::SecurityType;
            return true;
        case Phase::SecurityType: {
            const auto type = static_cast<std::uint8_t>(header_[0]);
            if (type != kSecurityNone && type != kSecurityVncAuthentication) {
                return refused(fmt::format("security type {}: a view-only link takes None or VNC Authentication",
                                           static_cast<unsigned>(type)));
            }
            phase_ = type == kSecurityNone ? Phase::ClientInit : Phase::VncAuthResponse;
            return true;
        }
        case Phase::VncAuthResponse:
            phase_ = Phase::ClientInit;
            return true;
        case Phase::ClientInit:
            phase_ = Phase::Messages;
            return true;
        case Phase::Messages:
            break;
    }
    switch (static_cast<std::uint8_t>(header_[0])) {
        case kSetPixelFormat:
        case kSetEncodings:
        case kFramebufferUpdateRequest:
        case kEnableContinuousUpdates:
        case kClientFence:
            return true;
        default:
            return false;  // input, or a change to the desktop
    }
}

Result<void> RfbViewOnlyFilter::feed(std::string_view in, std::string& out) {
    if (failed_) {
        return refused("the stream was refused already");
    }
    auto fail = [this](const Error& error) -> Result<void> {
        failed_ = true;
        return error;
    };
    while (true) {
        if (body_ > 0) {
            if (in.empty()) {
                return ok();
            }
            const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(body_, in.size()));
            if (passing_) {
                out.append(in.substr(0, n));
            }
            in.remove_prefix(n);
            body_ -= n;
            continue;
        }
        auto size = size_of_current();
        if (!size) {
            return fail(size.error());
        }
        if (header_.size() < size->header) {
            if (in.empty()) {
                return ok();
            }
            const std::size_t n = std::min(size->header - header_.size(), in.size());
            header_.append(in.substr(0, n));
            in.remove_prefix(n);
            continue;
        }
        if (size->total < header_.size()) {
            return fail(refused("an RFB message without a length"));  // unreachable: every header stage has one
        }
        auto pass = admit_current();
        if (!pass) {
            return fail(pass.error());
        }
        passing_ = *pass;
        if (passing_) {
            out += header_;
        } else {
            ++dropped_;
        }
        body_ = size->total - header_.size();
        header_.clear();
    }
}

}  // namespace sbx::sbxd
