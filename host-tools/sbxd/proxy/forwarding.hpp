// The header edits of a forwarded message (RFC 9110 §7.6): hop-by-hop
// fields are dropped each way, and a request gains the X-Forwarded-*
// fields an app behind a proxy expects (the de facto family that RFC 7239
// §1 describes; no `Forwarded`).
#pragma once

#include <string_view>

#include <boost/beast/http/fields.hpp>

namespace sbx::sbxd::proxy {

// Removes Connection and every field it names (RFC 9110 §7.6.1), and
// Keep-Alive, Proxy-Connection, Proxy-Authorization, TE, Trailer and
// Upgrade. Host, Content-Length and Transfer-Encoding stay even when
// Connection names them (the message's framing is not the sender's to
// drop).
void strip_hop_by_hop(boost::beast::http::fields& headers);

// Appends client_ip to X-Forwarded-For (joining several such fields into
// one), and sets X-Forwarded-Proto: https and X-Forwarded-Host: host.
void add_forwarded_fields(boost::beast::http::fields& headers, std::string_view client_ip,
                          std::string_view host);

}  // namespace sbx::sbxd::proxy
