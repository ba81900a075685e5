// GuestRoutes' shared parts: reaching a sandbox's agent, its errors as the
// API's, the detached processes' history rows, and the route table.
#include "host-tools/sbxd/daemon/guest_routes.hpp"

#include <algorithm>
#include <utility>

#include "host-tools/sbxd/api/api_error.hpp"
#include "host-tools/sbxd/api/fields.hpp"

namespace sbx::sbxd {

Error guest_error(const Error& error) {
    const std::string_view code = agent::error_code(error);
    std::string message = error.to_string();
    auto as = [&](std::string_view api_code) { return Error{message, 0, std::string(api_code)}; };
    // docs/agent-protocol.md, "Error codes".
    if (code == "not_found") {
        return as(api::code::kNotFound);
    }
    if (code == "exists") {
        return as(api::code::kAlreadyExists);
    }
    if (code == "bad_request" || code == "is_a_directory" || code == "not_a_directory" || code == "not_empty" ||
        code == "permission_denied" || code == "offset_gone") {
        return as(api::code::kInvalidArgument);
    }
    if (code == "limit") {
        return as(api::code::kLimitReached);
    }
    if (code == "no_space" || code == "io_error") {
        return as(api::code::kInternal);
    }
    return as(api::code::kAgentUnavailable);
}

Result<QueryParams> query_params(const http::Request& request, std::initializer_list<std::string_view> known) {
    QueryParams out;
    for (const auto& [key, value] : request.query) {
        if (std::find(known.begin(), known.end(), key) == known.end()) {
            return api::invalid_argument(fmt::format("unknown query parameter '{}'", key));
        }
        if (!out.emplace(key, value).second) {
            return api::invalid_argument(fmt::format("query parameter '{}' given twice", key));
        }
    }
    return out;
}

int history_exit_code(std::optional<int> code, std::optional<int> signal) {
    if (code) {
        return *code;
    }
    return 128 + signal.value_or(0);
}

GuestRoutes::GuestRoutes(Store& store, SandboxDriver& driver, std::function<UnixMillis()> clock,
                         GuestAccess access)
    : store_(store), driver_(driver), clock_(std::move(clock)), access_(std::move(access)) {}

Result<std::shared_ptr<LifecycleScheduler::Lease>> GuestRoutes::hold(const std::string& sandbox_id) const {
    auto sandbox = store_.get_sandbox(sandbox_id);
    if (!sandbox) {
        return sandbox.error();
    }
    // Wake on request; a stopped sandbox (by a user or its auto-stop) stays stopped.
    if (sandbox->state == SandboxState::Paused && access_.wake) {
        if (auto woken = access_.wake(sandbox_id); !woken) {
            return woken.error();
        }
    }
    // Before any connection, so that the idle timer cannot pause it under us.
    auto lease = std::make_shared<LifecycleScheduler::Lease>();
    if (access_.lifecycle != nullptr) {
        *lease = access_.lifecycle->lease(sandbox_id);
    }
    return lease;
}

Result<std::shared_ptr<agent::AgentClient>> GuestRoutes::connect(const std::string& sandbox_id) const {
    auto lease = hold(sandbox_id);
    if (!lease) {
        return lease.error();
    }
    auto address = driver_.agent(sandbox_id);
    if (!address) {
        return address.error();
    }
    auto client = agent::AgentClient::connect(
        agent::AgentEndpoint{.uds_path = address->uds_path, .token = address->token});
    if (!client) {
        return Error{fmt::format("reaching the agent of {}: {}", sandbox_id, client.error().to_string()), 0,
                     std::string(api::code::kAgentUnavailable)};
    }
    struct Leased {
        agent::AgentClient client;
        std::shared_ptr<LifecycleScheduler::Lease> lease;
    };
    auto leased = std::make_shared<Leased>(Leased{std::move(*client), std::move(*lease)});
    return std::shared_ptr<agent::AgentClient>(leased, &leased->client);
}

void GuestRoutes::remember(const std::string& sandbox_id, const std::string& process_id,
                           std::int64_t history_id) const {
    std::lock_guard lock(detached_mutex_);
    detached_[{sandbox_id, process_id}] = history_id;
}

void GuestRoutes::saw_exit(const std::string& sandbox_id, const std::string& process_id, std::optional<int> code,
                           std::optional<int> signal) const {
    std::int64_t history_id = 0;
    {
        std::lock_guard lock(detached_mutex_);
        auto it = detached_.find({sandbox_id, process_id});
        if (it == detached_.end()) {
            return;
        }
        history_id = it->second;
        detached_.erase(it);
    }
    [[maybe_unused]] auto r = store_.finish_exec(history_id, history_exit_code(code, signal));
}

void GuestRoutes::add_routes(const RouteAdder& add) {
    using http::BodyMode;
    auto route = [&](std::string_view method, std::string_view pattern,
                     Response (GuestRoutes::*handler)(const Request&, const PathParams&) const,
                     BodyMode body = BodyMode::Whole) {
        add(method, pattern,
            [this, handler](const Request& request, const PathParams& params) { return (this->*handler)(request, params); },
            body);
    };
    const std::string base = "/v1/sandboxes/{id}";
    route("POST", base + "/exec", &GuestRoutes::exec);
    route("GET", base + "/exec/ws", &GuestRoutes::exec_ws, BodyMode::WebSocket);
    route("GET", base + "/tcp/ws", &GuestRoutes::tcp_ws, BodyMode::WebSocket);
    route("GET", base + "/tcp/listen/ws", &GuestRoutes::tcp_listen_ws, BodyMode::WebSocket);
    route("GET", base + "/tcp/accept/ws", &GuestRoutes::tcp_accept_ws, BodyMode::WebSocket);
    route("GET", base + "/processes", &GuestRoutes::list_processes);
    route("GET", base + "/processes/{proc}", &GuestRoutes::get_process);
    route("GET", base + "/processes/{proc}/output", &GuestRoutes::process_output);
    route("POST", base + "/processes/{proc}/signal", &GuestRoutes::signal_process);
    route("POST", base + "/processes/{proc}/stdin", &GuestRoutes::process_stdin);
    route("GET", base + "/files", &GuestRoutes::get_file);
    route("PUT", base + "/files", &GuestRoutes::put_file, BodyMode::Streamed);
    route("DELETE", base + "/files", &GuestRoutes::remove_file);
    route("GET", base + "/files/stat", &GuestRoutes::stat_file);
    route("GET", base + "/files/list", &GuestRoutes::list_files);
    route("POST", base + "/files/mkdir", &GuestRoutes::make_dir);
    route("GET", base + "/files/tar", &GuestRoutes::download_tar);
    route("PUT", base + "/files/tar", &GuestRoutes::upload_tar, BodyMode::Streamed);
}

}  // namespace sbx::sbxd
