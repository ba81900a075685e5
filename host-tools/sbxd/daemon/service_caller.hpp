// The MCP tools' API calls made in-process (host-tools/mcp/api_caller.hpp):
// each an http::Request through ApiService::handle with the Authorization,
// transport and (on the Unix socket) principal of the request that carried
// the tool call, so authentication, scope, the read-only rule and the
// request log are exactly those of a client's own request. A streamed
// answer (exec's NDJSON, a download) is produced on a thread of its own and
// read as it comes; a sink that has enough cancels it, which ends an
// attached exec's process as a client leaving would.
#pragma once

#include "host-tools/mcp/api_caller.hpp"
#include "host-tools/sbxd/daemon/api_service.hpp"

namespace sbx::sbxd {

class ServiceCaller final : public mcp::ApiCaller {
public:
    ServiceCaller(const ApiService& service, const http::Request& outer) : service_(service), outer_(outer) {}
    [[nodiscard]] Result<mcp::ApiHead> call(const mcp::ApiCall& call, const mcp::BodySink& sink) override;

private:
    const ApiService& service_;
    const http::Request& outer_;
};

}  // namespace sbx::sbxd
