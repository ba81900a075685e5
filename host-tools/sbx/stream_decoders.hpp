// Incremental decoders for sbxd's streamed replies: JSON Lines (exec's
// application/x-ndjson) and Server-Sent Events (a process's output,
// text/event-stream per the WHATWG HTML standard §9.2 "Server-sent
// events"). Bytes go in as they arrive, in pieces of any size; complete
// lines or events come out.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sbx::cli {

class LineSplitter {
public:
    // The lines completed by `bytes`, without their "\n" (or "\r\n");
    // empty lines are skipped.
    [[nodiscard]] std::vector<std::string> feed(std::string_view bytes);
    // A last line not ended by "\n" (a cut-off stream), if any.
    [[nodiscard]] const std::string& partial() const { return partial_; }

private:
    std::string partial_;
};

struct SseEvent {
    std::string event = "message";  // the `event:` field, "message" when none
    std::string data;               // `data:` lines joined by "\n"
    std::optional<std::string> id;  // the `id:` field when this event had one
};

class SseParser {
public:
    [[nodiscard]] std::vector<SseEvent> feed(std::string_view bytes);
    // The last event id seen (the SSE "last event ID buffer").
    [[nodiscard]] const std::string& last_id() const { return last_id_; }

private:
    void line(std::string_view text, std::vector<SseEvent>& out);

    std::string partial_;
    bool after_cr_ = false;  // the previous piece ended in "\r": a "\n" next is part of that line end
    SseEvent current_;
    bool has_data_ = false;
    std::string last_id_;
};

}  // namespace sbx::cli
