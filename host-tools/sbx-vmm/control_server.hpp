// sbx-vmm's control socket: a Unix stream socket where each request is
// one JSON object on one line and each reply is one JSON object on one
// line (docs/vmm-control.md). Clients are served one at a time, on the
// server's own thread; a request line is at most 64 KiB. The socket file
// is 0600, and a peer (SO_PEERCRED) other than its user or root is
// refused; nothing a client sends throws past the server.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/event_fd.hpp"
#include "base/result.hpp"
#include "base/thread_class.hpp"
#include "base/unique_fd.hpp"

namespace sbx {

class ControlServer {
public:
    using Handler = std::function<nlohmann::json(const nlohmann::json& request)>;

    // Listens on `path` (a stale socket there is replaced) and serves
    // requests with `handler` until destroyed. `hook` runs first on the
    // server's thread (base/thread_class.hpp).
    static Result<std::unique_ptr<ControlServer>> start(const std::string& path, Handler handler,
                                                        const ThreadStartHook& hook = {});
    ControlServer(const ControlServer&) = delete;
    ControlServer& operator=(const ControlServer&) = delete;
    ~ControlServer();

    // The reply to a request that failed: {"ok": false, "error": CODE,
    // "message": MESSAGE}, CODE being the error's code, or "failed" when it
    // has none.
    static nlohmann::json error_reply(const Error& error);

private:
    ControlServer(std::string path, UniqueFd listener, EventFd stop, Handler handler);
    void serve();
    void serve_client(int fd);
    nlohmann::json handle(const nlohmann::json& request);

    std::string path_;
    UniqueFd listener_;
    EventFd stop_;
    Handler handler_;
    std::thread thread_;
};

}  // namespace sbx
