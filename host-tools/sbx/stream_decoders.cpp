#include "host-tools/sbx/stream_decoders.hpp"

namespace sbx::cli {

std::vector<std::string> LineSplitter::feed(std::string_view bytes) {
    std::vector<std::string> lines;
    for (;;) {
        auto newline = bytes.find('\n');
        if (newline == std::string_view::npos) {
            partial_.append(bytes);
            return lines;
        }
        partial_.append(bytes.substr(0, newline));
        bytes.remove_prefix(newline + 1);
        if (partial_.ends_with('\r')) {
            partial_.pop_back();
        }
        if (!partial_.empty()) {
            lines.push_back(std::move(partial_));
        }
        partial_.clear();
    }
}

// Lines end in CRLF, LF or CR (§9.2.5); a blank line dispatches the event.
std::vector<SseEvent> SseParser::feed(std::string_view bytes) {
    std::vector<SseEvent> events;
    for (char c : bytes) {
        if (after_cr_) {
            after_cr_ = false;
            if (c == '\n') {
                continue;
            }
        }
        if (c == '\r' || c == '\n') {
            after_cr_ = c == '\r';
            line(partial_, events);
            partial_.clear();
        } else {
            partial_ += c;
        }
    }
    return events;
}

// §9.2.6 "Interpreting an event stream": `field: value` (one optional
// space after the colon), `:` comments, unknown fields ignored.
void SseParser::line(std::string_view text, std::vector<SseEvent>& out) {
    if (text.empty()) {
        if (has_data_) {
            out.push_back(std::move(current_));
        }
        current_ = SseEvent{};
        has_data_ = false;
        return;
    }
    if (text.starts_with(':')) {
        return;
    }
    auto colon = text.find(':');
    std::string_view field = text.substr(0, colon);
    std::string_view value = colon == std::string_view::npos ? std::string_view() : text.substr(colon + 1);
    if (value.starts_with(' ')) {
        value.remove_prefix(1);
    }
    if (field == "event") {
        current_.event = std::string(value);
    } else if (field == "data") {
        if (has_data_) {
            current_.data += '\n';
        }
        current_.data.append(value);
        has_data_ = true;
    } else if (field == "id" && value.find('\0') == std::string_view::npos) {
        current_.id = std::string(value);
        last_id_ = std::string(value);
    }
}

}  // namespace sbx::cli
