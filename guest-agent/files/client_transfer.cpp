#include "guest-agent/files/client_transfer.hpp"

namespace sbx::agent::files::detail {

void add_owner(Json& request, const Ownership& owner) {
    if (!owner.user.empty()) {
        request["user"] = owner.user;
    }
    if (owner.uid) {
        request["uid"] = *owner.uid;
    }
    if (owner.gid) {
        request["gid"] = *owner.gid;
    }
}

Error cap_error(std::string_view what, std::uint64_t cap) {
    return make_error("download of {}: over the {}-byte cap", printable(what, 1024), cap);
}

Result<Json> receive_download(AgentClient& client, std::string_view what, const ChunkSink& sink,
                              std::optional<std::uint64_t> asked, std::uint64_t cap, std::uint64_t& received) {
    std::optional<Error> failure;
    std::uint64_t drained = 0;  // after a sink error
    bool eof = false;
    while (true) {
        auto frame = client.read_frame();
        if (!frame) {
            return frame.error();
        }
        if (frame->kind == FrameKind::Json) {
            auto message = client.reply_of(*frame);
            if (!message) {
                return message.error();
            }
            const std::string type = reply_type(*message);
            if (type != "result" || !eof) {
                return client.abandon(
                    malformed_reply(fmt::format("unexpected \"{}\" message in a download", printable(type, 64))));
            }
            if (failure) {
                return *failure;
            }
            return message;
        }
        if (frame->channel != Channel::Content || eof) {
            return client.abandon(malformed_reply(fmt::format("download: a frame on channel {} {}",
                                                              static_cast<int>(frame->channel),
                                                              eof ? "after EOF" : "instead of 3")));
        }
        if (frame->kind == FrameKind::Eof) {
            eof = true;
            continue;
        }
        const std::uint64_t so_far = received + drained;
        const std::uint64_t n = frame->data.size();
        if (frame->offset != so_far) {
            return client.abandon(
                malformed_reply(fmt::format("download: DATA at offset {}, expected {}", frame->offset, so_far)));
        }
        if (asked && n > *asked - so_far) {
            return client.abandon(malformed_reply(fmt::format("download: more than the {} bytes asked for", *asked)));
        }
        if (n > cap - so_far) {
            return client.abandon(cap_error(what, cap));
        }
        if (failure) {
            drained += n;
            continue;
        }
        received += n;
        if (auto r = sink(frame->data); !r) {
            failure = r.error();
        }
    }
}

Result<Json> upload(AgentClient& client, const ChunkSource& source) {
    UploadSender sender(client);
    std::vector<std::uint8_t> buffer(kMaxDataPayload);
    while (true) {
        auto n = source(buffer);
        if (!n) {
            return sender.cancel(n.error());
        }
        if (*n == 0) {
            break;
        }
        if (*n > buffer.size()) {
            return sender.cancel(
                make_error("the source claims {} bytes in a {}-byte buffer", *n, buffer.size()));
        }
        if (auto r = sender.send(std::span(buffer).first(*n)); !r) {
            return r.error();
        }
    }
    return sender.finish();
}

}  // namespace sbx::agent::files::detail
