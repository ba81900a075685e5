#include "guest-agent/files/upload.hpp"

namespace sbx::agent::files {

Result<std::optional<std::vector<std::uint8_t>>> UploadReader::next() {
    auto frame = stream_.read();
    if (!frame) {
        broken_ = true;
        return frame.error();
    }
    if (frame->kind == FrameKind::Json) {
        auto message = parse_message(frame->json);
        if (message && (*message)["type"] == "cancel") {
            return make_error("cancelled by the client after {} bytes", received_);
        }
        return make_error("expected DATA or EOF on channel 3 (or a cancel), got a message");
    }
    if (frame->channel != Channel::Content) {
        return make_error("upload data must be on channel 3, not {}", static_cast<int>(frame->channel));
    }
    if (frame->kind == FrameKind::Eof) {
        return std::optional<std::vector<std::uint8_t>>();
    }
    if (frame->offset != received_) {
        return make_error("DATA at offset {}, expected {}", frame->offset, received_);
    }
    received_ += frame->data.size();
    return std::optional(std::move(frame->data));
}

Result<void> end_failed_upload(Session& session, const UploadReader& upload, Error error) {
    if (!upload.broken()) {
        return error;
    }
    if (!is_closed(error)) {
        [[maybe_unused]] auto r =
            session.stream().write_message(error_message(code::kBadFrame, error.to_string()));
    }
    session.finish();
    return ok();
}

Result<std::optional<std::uint64_t>> receive_upload(
    Session& session, const std::function<Result<void>(std::span<const std::uint8_t>)>& consume) {
    if (auto r = session.stream().write_message(Json{{"type", "ready"}}); !r) {
        return r.error();
    }
    UploadReader upload(session.stream());
    while (true) {
        auto chunk = upload.next();
        if (!chunk) {
            if (auto r = end_failed_upload(session, upload, chunk.error()); !r) {
                return r.error();
            }
            return std::optional<std::uint64_t>();
        }
        if (!*chunk) {
            return std::optional<std::uint64_t>(upload.received());
        }
        if (auto r = consume(**chunk); !r) {
            return r.error();
        }
    }
}

}  // namespace sbx::agent::files
