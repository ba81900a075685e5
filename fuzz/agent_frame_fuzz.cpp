// libFuzzer target: arbitrary bytes from a hostile peer into the agent
// protocol's frame decoder and message parser, in fuzzer-chosen splits.
// Nothing may crash; a decoded frame must respect the protocol's bounds.
#include <cstdint>

#include "guest-agent/protocol/frame.hpp"
#include "guest-agent/protocol/messages.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace sbx::agent;
    if (size == 0) {
        return 0;
    }
    const std::size_t split = 1 + data[0] % 64;
    FrameDecoder decoder;
    std::size_t pos = 1;
    while (pos < size) {
        auto used = decoder.feed(std::span(data + pos, std::min(split, size - pos)));
        if (!used) {
            return 0;
        }
        pos += *used;
        if (auto frame = decoder.next()) {
            if (frame->json.size() > kMaxJsonBody || frame->data.size() > kMaxDataPayload) {
                __builtin_trap();
            }
            if (frame->kind == FrameKind::Json) {
                auto message = parse_message(frame->json);
                if (message) {
                    [[maybe_unused]] auto op = get_string(*message, "op", std::string());
                    [[maybe_unused]] auto n = get_int(*message, "offset", 0);
                }
            }
        }
    }
    return 0;
}
