#include "host-tools/sbx/output.hpp"

#include <unistd.h>

#include <algorithm>
#include <iostream>

namespace sbx::cli {

Failure failure_of(const Error& error) {
    Failure failure;
    failure.code = error.code.empty() ? "internal" : error.code;
    failure.message = error.to_string();
    if (failure.code == "usage") {
        failure.exit_code = kExitUsage;
    } else if (failure.code == "unreachable" || failure.code == "connection_lost" ||
               failure.code == "bad_response") {
        failure.exit_code = kExitUnreachable;
    } else if (failure.code == "local") {
        failure.exit_code = kExitLocal;
    }
    return failure;
}

Failure failure_of(const HttpReply& reply) {
    Failure failure;
    failure.status = reply.status;
    failure.request_id = reply.request_id;
    failure.retry_after = reply.retry_after;
    Json body = Json::parse(reply.body, nullptr, false);
    if (body.is_object() && body.value("code", Json()).is_string() &&
        body.value("message", Json()).is_string()) {
        failure.code = body["code"].get<std::string>();
        failure.message = body["message"].get<std::string>();
        if (body.value("requestId", Json()).is_string()) {
            failure.request_id = body["requestId"].get<std::string>();
        }
        return failure;
    }
    failure.exit_code = kExitUnreachable;
    failure.code = "bad_response";
    failure.message =
        fmt::format("HTTP {} without the API's error body ({} bytes of {})", reply.status, reply.body.size(),
                    reply.content_type.empty() ? "no type" : reply.content_type);
    return failure;
}

Json error_event(const Failure& failure) {
    Json event = {{"type", "error"},
                  {"status", failure.status == 0 ? Json() : Json(failure.status)},
                  {"code", failure.code},
                  {"message", failure.message},
                  {"requestId", failure.request_id.empty() ? Json() : Json(failure.request_id)}};
    if (!failure.retry_after.empty()) {
        event["retryAfter"] = failure.retry_after;
    }
    return event;
}

std::string error_line(const Failure& failure) {
    std::string detail = failure.code;
    if (failure.status != 0) {
        detail += fmt::format(", HTTP {}", failure.status);
    }
    if (!failure.request_id.empty()) {
        detail += ", " + failure.request_id;
    }
    if (!failure.retry_after.empty()) {
        detail += ", retry after " + failure.retry_after + " s";
    }
    return fmt::format("sbx: {} ({})", failure.message, detail);
}

void Output::event(const Json& value) const {
    std::string line = value.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fflush(stdout);
}

void Output::text(std::string_view text) const {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
}

void Output::note(std::string_view text) const {
    if (!json_) {
        std::fprintf(stderr, "%.*s\n", static_cast<int>(text.size()), text.data());
    }
}

int Output::fail(const Failure& failure) const {
    std::string line = json_ ? error_event(failure).dump(-1, ' ', false, Json::error_handler_t::replace)
                             : error_line(failure);
    std::fprintf(stderr, "%s\n", line.c_str());
    return failure.exit_code;
}

std::string format_table(const std::vector<std::string>& headers,
                         const std::vector<std::vector<std::string>>& rows) {
    auto flat = [](std::string text) {
        std::replace_if(
            text.begin(), text.end(), [](char c) { return c == '\n' || c == '\t' || c == '\r'; }, ' ');
        return text;
    };
    std::vector<std::size_t> widths(headers.size());
    for (std::size_t i = 0; i < headers.size(); ++i) {
        widths[i] = headers[i].size();
        for (const auto& row : rows) {
            if (i < row.size()) {
                widths[i] = std::max(widths[i], flat(row[i]).size());
            }
        }
    }
    std::string out;
    auto add_row = [&](const std::vector<std::string>& row) {
        std::string line;
        for (std::size_t i = 0; i < headers.size(); ++i) {
            std::string value = i < row.size() ? flat(row[i]) : "";
            line += value;
            if (i + 1 < headers.size()) {
                line += std::string(widths[i] - value.size() + 2, ' ');
            }
        }
        while (line.ends_with(' ')) {
            line.pop_back();
        }
        out += line + "\n";
    };
    add_row(headers);
    for (const auto& row : rows) {
        add_row(row);
    }
    return out;
}

std::string format_labels(const Json& labels) {
    std::string out;
    if (labels.is_object()) {
        for (const auto& [key, value] : labels.items()) {
            out += (out.empty() ? "" : ",") + key + "=" +
                   (value.is_string() ? value.get<std::string>() : value.dump());
        }
    }
    return out.empty() ? "-" : out;
}

std::string cell(const Json& object, std::string_view key) {
    if (!object.is_object()) {
        return "-";
    }
    auto it = object.find(key);
    if (it == object.end() || it->is_null()) {
        return "-";
    }
    return it->is_string() ? it->get<std::string>() : it->dump();
}

std::string sandbox_table(const Json& sandboxes) {
    std::vector<std::vector<std::string>> rows;
    for (const auto& sandbox : sandboxes) {
        std::string memory = cell(sandbox, "memoryMib");
        rows.push_back({cell(sandbox, "id"), cell(sandbox, "state"), cell(sandbox, "size"),
                        cell(sandbox, "cpus"), memory == "-" ? memory : memory + " MiB",
                        format_labels(sandbox.value("labels", Json())), cell(sandbox, "lastActivityAt")});
    }
    return format_table({"ID", "STATE", "SIZE", "CPUS", "MEMORY", "LABELS", "LAST ACTIVITY"}, rows);
}

std::string sandbox_details(const Json& sandbox) {
    std::vector<std::vector<std::string>> rows;
    if (sandbox.is_object()) {
        for (const auto& [key, value] : sandbox.items()) {
            std::string text;
            if (key == "labels") {
                text = format_labels(value);
            } else if (value.is_array()) {
                for (const auto& item : value) {
                    text += (text.empty() ? "" : ",") +
                            (item.is_string() ? item.get<std::string>() : item.dump());
                }
                text = text.empty() ? "-" : text;
            } else {
                text = cell(sandbox, key);
            }
            rows.push_back({key + ":", text});
        }
    }
    // Headless: format_table's first row is its header, here the first field.
    if (rows.empty()) {
        return "";
    }
    auto header = rows.front();
    rows.erase(rows.begin());
    return format_table(header, rows);
}

std::string shell_words(const Json& command) {
    if (command.is_string()) {
        return command.get<std::string>();
    }
    std::string out;
    for (const auto& word : command) {
        std::string text = word.is_string() ? word.get<std::string>() : word.dump();
        bool plain = !text.empty() && text.find_first_of(" \t\n'\"\\$`*?;&|<>()[]{}#~!") == std::string::npos;
        if (!plain) {
            std::string quoted = "'";
            for (char c : text) {
                quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
            }
            text = quoted + "'";
        }
        out += (out.empty() ? "" : " ") + text;
    }
    return out;
}

}  // namespace sbx::cli
