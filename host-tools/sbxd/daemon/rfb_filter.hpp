// The view-only rule of a desktop link (docs/sbxd.md, "The desktop"): the
// client-to-server half of an RFB stream (RFC 6143) with every input
// message taken out — KeyEvent, PointerEvent, ClientCutText (§7.5.4-6)
// and the extensions that act on the desktop (QEMU's extended KeyEvent,
// SetDesktopSize, xvp) — while what a viewer needs to see passes:
// SetPixelFormat, SetEncodings, FramebufferUpdateRequest (§7.5.1-3),
// EnableContinuousUpdates and ClientFence. The stream is parsed message by
// message whatever the pieces it arrives in (a WebSocket frame may hold
// half a message or several), so no input hides behind a split.
//
// The handshake (§7.1-7.3) as the client sends it: its ProtocolVersion
// (3.7 or 3.8: a 3.3 client sends no security type, which the filter
// would have to learn from the server's half), the security type it picks
// (None, or VNC Authentication and its 16-byte response) and ClientInit.
// Anything else — another version or security type (whose bytes cannot be
// told apart from messages), an unknown message type, a fence longer than
// 64 bytes — is an error: the connection ends rather than guessing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/result.hpp"

namespace sbx::sbxd {

// Error code of a stream the filter refuses.
inline constexpr std::string_view kRfbRefused = "rfb_refused";

class RfbViewOnlyFilter {
public:
    // Appends to `out` the bytes of `in` that go on to the server; after
    // an error every later call fails too.
    [[nodiscard]] Result<void> feed(std::string_view in, std::string& out);

    // Messages taken out so far.
    [[nodiscard]] std::uint64_t dropped() const { return dropped_; }

private:
    enum class Phase { Version, SecurityType, VncAuthResponse, ClientInit, Messages };

    // The header bytes the current unit needs before its length is known,
    // given those collected so far; its total length once known.
    struct Size {
        std::size_t header = 0;
        std::size_t total = 0;  // 0: not known yet
    };
    [[nodiscard]] Result<Size> size_of_current() const;
    // A unit whose header is complete: checks it, moves to the next phase.
    [[nodiscard]] Result<bool> admit_current();

    Phase phase_ = Phase::Version;
    std::string header_;     // the current unit's first bytes
    std::uint64_t body_ = 0;  // its bytes still to come after the header
    bool passing_ = true;     // whether the current unit goes on
    bool failed_ = false;
    std::uint64_t dropped_ = 0;
};

}  // namespace sbx::sbxd
