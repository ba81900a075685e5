#include "host-tools/sbxd/daemon/ws_exec.hpp"

#include <nlohmann/json.hpp>

#include "host-tools/sbxd/api/fields.hpp"

namespace sbx::sbxd {

namespace {

using nlohmann::json;

// A JSON object from a text frame, or kWsInvalidPayload.
Result<json> json_object(std::string_view text) {
    json value = json::parse(text, nullptr, false);
    if (value.is_discarded()) {
        return make_coded_error(kWsInvalidPayload, "the message is not JSON");
    }
    if (!value.is_object()) {
        return make_coded_error(kWsInvalidPayload, "the message is not a JSON object");
    }
    return value;
}

// rows and cols of a tty or a resize, 1 to 65535 each.
Result<agent::PtySize> read_size(const json& object, std::string_view what) {
    api::Fields fields(object);
    auto rows = fields.integer("rows", 1, 65535);
    auto cols = fields.integer("cols", 1, 65535);
    if (!rows) {
        return rows.error();
    }
    if (!cols) {
        return cols.error();
    }
    if (!*rows || !*cols) {
        return api::invalid_argument(fmt::format("{} needs rows and cols", what));
    }
    if (auto r = fields.finish(); !r) {
        return r.error();
    }
    return agent::PtySize{static_cast<int>(**rows), static_cast<int>(**cols)};
}

}  // namespace

Result<ExecBody> read_ws_start(const http::WsMessage& message) {
    if (!message.text) {
        return make_coded_error(kWsUnsupportedData,
                                "the first message must be the exec request as JSON text");
    }
    auto object = json_object(message.data);
    if (!object) {
        return object.error();
    }
    std::optional<agent::PtySize> pty;
    if (auto it = object->find("tty"); it != object->end() && !it->is_null()) {
        if (!it->is_object()) {
            return api::invalid_argument("tty must be an object {\"rows\":R,\"cols\":C}");
        }
        api::Fields tty(*it);
        auto rows = tty.integer("rows", 1, 65535);
        auto cols = tty.integer("cols", 1, 65535);
        if (!rows || !cols) {
            return rows ? cols.error() : rows.error();
        }
        if (auto r = tty.finish(); !r) {
            return api::invalid_argument("tty: " + r.error().message);
        }
        pty = agent::PtySize{static_cast<int>(rows->value_or(24)), static_cast<int>(cols->value_or(80))};
    }
    object->erase("tty");
    auto exec = parse_exec_fields(std::move(*object), ExecForm::WebSocket);
    if (!exec) {
        return exec.error();
    }
    exec->request.pty = pty;
    exec->request.stdin_open = true;
    return exec;
}

Result<WsControl> read_ws_control(std::string_view text) {
    auto object = json_object(text);
    if (!object) {
        return object.error();
    }
    auto type = object->find("type");
    if (type == object->end() || !type->is_string()) {
        return make_coded_error(kWsUnsupportedData, "a control message needs a type: resize, signal or eof");
    }
    const auto& name = type->get_ref<const std::string&>();
    json rest = *object;
    rest.erase("type");
    WsControl control;
    if (name == "resize") {
        auto size = read_size(rest, "resize");
        if (!size) {
            return size.error();
        }
        control.kind = WsControl::Resize;
        control.rows = size->rows;
        control.cols = size->cols;
        return control;
    }
    if (name == "signal") {
        auto value = rest.find("signal");
        if (value == rest.end() || rest.size() != 1) {
            return api::invalid_argument(
                "a signal message is {\"type\":\"signal\",\"signal\":NAME or NUMBER}");
        }
        auto sig = parse_signal(*value);
        if (!sig) {
            return sig.error();
        }
        control.kind = WsControl::Signal;
        control.signal = *sig;
        return control;
    }
    if (name == "eof") {
        if (!rest.empty()) {
            return api::invalid_argument("an eof message has no other fields");
        }
        control.kind = WsControl::Eof;
        return control;
    }
    return make_coded_error(kWsUnsupportedData, "unknown control message type {}", json(name).dump());
}

http::WsMessage ws_output(std::uint8_t stream, std::span<const std::uint8_t> bytes) {
    http::WsMessage message;
    message.data.reserve(bytes.size() + 1);
    message.data.push_back(static_cast<char>(stream));
    message.data.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    return message;
}

http::WsClose ws_close_for(const Error& error) {
    using namespace http::ws_close;
    if (error.code == kWsUnsupportedData) {
        return {kUnsupportedData, error.code};
    }
    if (error.code == kWsInvalidPayload) {
        return {kInvalidPayload, error.code};
    }
    api::ApiError api = api::to_api_error(error);
    if (api.status == 429 || api.status == 503) {
        return {kTryAgainLater, api.code};
    }
    if (api.status == 500) {
        return {kInternalError, api.code};
    }
    return {static_cast<std::uint16_t>(kApplicationBase + api.status), api.code};
}

http::WsMessage ws_error(const Error& error, std::string_view request_id) {
    api::ApiError api = api::to_api_error(error);
    if (error.code == kWsUnsupportedData || error.code == kWsInvalidPayload) {
        api = api::ApiError{400, std::string(api::code::kBadRequest), error.to_string()};
    }
    json body = json::parse(api::error_body(api, request_id));
    body["type"] = "error";
    return http::WsMessage{true, body.dump()};
}

void ws_fail(http::WsChannel& channel, const Error& error, std::string_view request_id) {
    [[maybe_unused]] auto sent = channel.send(ws_error(error, request_id));
    channel.close(ws_close_for(error));
}

}  // namespace sbx::sbxd
