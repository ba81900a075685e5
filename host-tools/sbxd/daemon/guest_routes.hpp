// The routes that reach into a running sandbox through its agent
// (docs/api.md, "Exec, processes and files"): exec (exec_routes.cpp),
// detached processes (process_routes.cpp) and files (file_routes.cpp).
// Each request opens its own connection to the agent (the agent protocol
// runs one operation per connection), through the address the driver
// gives for a running sandbox. Output and file contents stream through
// http::BodyWriter / BodyReader, never whole in memory. A sandbox with no
// VMM has its files read from its disk instead (diskfs/disk_fs.hpp),
// without resuming it; changing them needs a resume.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "guest-agent/client/agent_client.hpp"
#include "host-tools/sbxd/daemon/lifecycle.hpp"
#include "host-tools/sbxd/daemon/sandbox_driver.hpp"
#include "host-tools/sbxd/daemon/tcp_pending.hpp"
#include "host-tools/sbxd/http/router.hpp"
#include "host-tools/sbxd/store/store.hpp"

namespace sbx::sbxd {

// Registers a handler under the API's scope check (ApiService::sandbox_route).
using RouteAdder =
    std::function<void(std::string_view method, std::string_view pattern, http::Handler, http::BodyMode)>;

// An agent's error ("not_found: ...") or a failed connection, as the
// API's error: not_found 404, refused arguments 400, limit 429, anything
// that is the guest's fault or an unreachable agent 502 agent_unavailable.
[[nodiscard]] Error guest_error(const Error& error);

// The query's parameters, each named once; others are refused (invalid_argument).
using QueryParams = std::map<std::string, std::string, std::less<>>;
[[nodiscard]] Result<QueryParams> query_params(const http::Request& request,
                                               std::initializer_list<std::string_view> known);

// The exit of a process as the history records it: the exit code, or
// 128 + the signal as a shell reports it.
[[nodiscard]] int history_exit_code(std::optional<int> code, std::optional<int> signal);

// The lifecycle's part in guest requests (product.md §2): a paused
// sandbox is woken first, and each agent connection holds an activity
// lease for as long as it lives (a stream's too). Both optional.
struct GuestAccess {
    std::function<Result<void>(const std::string& id)> wake{};
    LifecycleScheduler* lifecycle = nullptr;
};

class GuestRoutes {
public:
    GuestRoutes(Store& store, SandboxDriver& driver, std::function<UnixMillis()> clock,
                GuestAccess access = {});

    void add_routes(const RouteAdder& add);

    // The sandbox must exist (404) and run, or be paused and wake (else
    // the driver's 409). hold() gives an activity lease that lasts as
    // long as the value (hosted ports' connections to the guest's
    // address); connect() a new authenticated connection to its agent,
    // on the heap so that sessions and stream producers can hold it,
    // with such a lease that ends with it.
    [[nodiscard]] Result<std::shared_ptr<LifecycleScheduler::Lease>> hold(const std::string& sandbox_id) const;
    [[nodiscard]] Result<std::shared_ptr<agent::AgentClient>> connect(const std::string& sandbox_id) const;

private:
    using Request = http::Request;
    using Response = http::Response;
    using PathParams = http::PathParams;

    // Detached processes started here, by (sandbox, process id): their
    // history row, finished when a route sees the exit.
    void remember(const std::string& sandbox_id, const std::string& process_id,
                  std::int64_t history_id) const;
    void saw_exit(const std::string& sandbox_id, const std::string& process_id, std::optional<int> code,
                  std::optional<int> signal) const;

    Response exec(const Request& request, const PathParams& params) const;
    // GET .../exec/ws (ws_exec_routes.cpp): the handshake's answer, whose
    // WebSocket handler is serve_ws_exec.
    Response exec_ws(const Request& request, const PathParams& params) const;
    void serve_ws_exec(const std::string& sandbox_id, const std::string& request_id,
                       const std::optional<std::string>& key, http::WsChannel& channel) const;
    // TCP over WebSockets (tcp_routes.cpp): GET .../tcp/ws (connect_tcp),
    // .../tcp/listen/ws (listen_tcp, each guest connection announced by
    // id) and .../tcp/accept/ws?connection=ID (one of those picked up).
    Response tcp_ws(const Request& request, const PathParams& params) const;
    Response tcp_listen_ws(const Request& request, const PathParams& params) const;
    void serve_tcp_listen(const std::string& sandbox_id, const std::string& host, std::uint16_t port,
                          const std::string& request_id, http::WsChannel& channel) const;
    Response tcp_accept_ws(const Request& request, const PathParams& params) const;
    // Before a handshake: the sandbox exists (404) and runs or is paused (else 409).
    [[nodiscard]] Result<void> reachable(const std::string& sandbox_id) const;
    Response list_processes(const Request& request, const PathParams& params) const;
    Response get_process(const Request& request, const PathParams& params) const;
    Response process_output(const Request& request, const PathParams& params) const;
    Response signal_process(const Request& request, const PathParams& params) const;
    Response process_stdin(const Request& request, const PathParams& params) const;
    Response get_file(const Request& request, const PathParams& params) const;
    Response put_file(const Request& request, const PathParams& params) const;
    Response stat_file(const Request& request, const PathParams& params) const;
    Response list_files(const Request& request, const PathParams& params) const;
    Response make_dir(const Request& request, const PathParams& params) const;
    Response remove_file(const Request& request, const PathParams& params) const;
    // GET/PUT .../files/tar: a tree as a tar stream (tar_get, tar_put).
    Response download_tar(const Request& request, const PathParams& params) const;
    Response upload_tar(const Request& request, const PathParams& params) const;

    // A read of ?path= (download, stat, list, tar): from the disk of a
    // sandbox with no VMM (ON_DISK), else through its agent (ON_AGENT).
    using DiskRead = Response (GuestRoutes::*)(const std::string& disk, const std::string& path,
                                               const Request& request) const;
    using AgentRead =
        std::function<Response(const std::shared_ptr<agent::AgentClient>& client, const std::string& path)>;
    Response read_path(const Request& request, const PathParams& params, DiskRead on_disk,
                       const AgentRead& on_agent) const;

    // Files of a sandbox with no VMM, read from its disk (disk_files.cpp).
    // The disk when the sandbox is stopped or crashed (paused too when
    // nothing wakes it); nullopt when its agent answers (or the driver
    // says why not); 404 for no sandbox.
    [[nodiscard]] Result<std::optional<std::string>> stopped_disk(const std::string& sandbox_id) const;
    // connect() for a change to its files: invalid_state for a sandbox
    // with no VMM, whose files can only be read.
    [[nodiscard]] Result<std::shared_ptr<agent::AgentClient>> connect_to_change(
        const std::string& sandbox_id) const;
    Response disk_get_file(const std::string& disk, const std::string& path, const Request& request) const;
    Response disk_stat(const std::string& disk, const std::string& path, const Request& request) const;
    Response disk_list(const std::string& disk, const std::string& path, const Request& request) const;
    Response disk_get_tar(const std::string& disk, const std::string& path, const Request& request) const;

    Store& store_;
    SandboxDriver& driver_;
    std::function<UnixMillis()> clock_;
    GuestAccess access_;
    mutable std::mutex detached_mutex_;
    mutable std::map<std::pair<std::string, std::string>, std::int64_t> detached_;
    std::unique_ptr<PendingTcpConnections> pending_ = std::make_unique<PendingTcpConnections>();
};

}  // namespace sbx::sbxd
