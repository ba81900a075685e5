// For sbxd's API unit tests: a driver whose every operation fails
// ("internal", unused) for a test to override the ones it needs, a
// request as the HTTP server would hand it to ApiService, and a store with
// sandboxes in it.
#pragma once

#include <string>
#include <utility>

#include "host-tools/sbxd/daemon/api_service.hpp"
#include "host-tools/sbxd/testing/temp_dir.hpp"

namespace sbx::sbxd::testing {

struct UnusedDriver : SandboxDriver {
    static Error unused() { return make_coded_error("internal", "unused"); }
    Result<CreateOutcome> create(const CreateSpec&) override { return unused(); }
    Result<SandboxRecord> stop(const std::string&, const api::StopRequest&) override { return unused(); }
    Result<ResumeOutcome> resume(const std::string&, const api::ResumeRequest&) override { return unused(); }
    Result<std::vector<SandboxRecord>> fork(const std::string&, const api::ForkRequest&,
                                            const std::optional<IdempotencyClaim>&,
                                            const std::vector<std::string>&) override {
        return unused();
    }
    Result<void> remove(const std::string&) override { return unused(); }
    Result<SnapshotRecord> snapshot(const std::string&, const api::SnapshotRequest&) override {
        return unused();
    }
    Result<void> remove_snapshot(const std::string&) override { return unused(); }
    Result<AgentAddress> agent(const std::string&) override {
        return make_coded_error("invalid_state", "no VMM");
    }
    Result<std::string> disk(const std::string&) override {
        return make_coded_error("invalid_state", "no disk");
    }
    Result<std::string> console_log(const std::string&) override { return unused(); }
};

// TARGET is a path with its query; request id "req_test".
inline http::Request api_request(std::string method, const std::string& target, std::string body = {},
                                 http::Pairs headers = {},
                                 http::Transport transport = http::Transport::Unix) {
    http::Request request;
    request.method = std::move(method);
    auto split = http::split_target(target).value();
    request.path = split.first;
    request.query = split.second;
    request.body = std::move(body);
    request.headers = std::move(headers);
    request.request_id = "req_test";
    request.transport = transport;
    return request;
}

// A response's first header of that name (as the handler set it), or "".
inline std::string header(const http::Response& response, std::string_view name) {
    for (const auto& [key, value] : response.headers) {
        if (key == name) {
            return value;
        }
    }
    return "";
}

// The API error code of a JSON error response.
inline std::string code_of(const http::Response& response) {
    return nlohmann::json::parse(response.body).value("code", "");
}

// A small sandbox from "default", created at AT, in the store.
inline SandboxRecord add_sandbox(Store& store, const std::string& id, UnixMillis at = 1'700'000'000'000) {
    SandboxRecord s;
    s.id = id;
    s.name = id;
    s.from = "default";
    s.size = "small";
    s.created_at = at;
    s.last_activity_at = at;
    REQUIRE(store.create_sandbox(s, std::nullopt).has_value());
    return s;
}

}  // namespace sbx::sbxd::testing
