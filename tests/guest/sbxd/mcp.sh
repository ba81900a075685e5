# sbxd part "mcp" (sourced by session.sh, sbxd running): MCP against the
# real sbxd and real VMs. A sandbox's whole life through `sbx mcp` and the
# official MCP SDK client (tests/mcp/lifecycle_client.mjs: create with the
# server's defaults, exec, files, a counter and a web server started
# detached, host_port and handoff_session, stop with memory and a file read
# from the stopped disk, resume with the same counter going on, fork,
# snapshots, delete); the same through sbxd's /mcp with the SDK's Streamable
# HTTP transport; then curl on /mcp: a session's initialize and a
# tools/call answered, and a 2026-07-28 tools/list.
# tests/guest/sbxd.sh installs tests/mcp's npm packages at level 0.
# shellcheck shell=bash
# session.sh and lib.sh set w, sock, code, body, here, sbx:
# shellcheck disable=SC2154

mcp_dir=$here/../../mcp
if [ ! -x /usr/bin/node ] || [ ! -f "$mcp_dir/node_modules/@modelcontextprotocol/sdk/package.json" ]; then
  bad "mcp: missing node or tests/mcp's packages (npm ci in tests/mcp)"
  return 0
fi
t=$(now)
mcp_out=$(SBX_HOST=unix:$sock timeout 1800 /usr/bin/node "$mcp_dir/lifecycle_client.mjs" "$sbx" 2>"$w/mcp-stderr.log")
mcp_status=$?
printf '%s\n' "$mcp_out"
check "mcp: a sandbox's whole life through sbx mcp" 0 "$mcp_status" ||
  tail -n 20 "$w/mcp-stderr.log" | sed 's/^/mcp stderr: /'
echo "SBXD-TIME: mcp lifecycle $(elapsed "$t") s"

# The same life through sbxd's own /mcp (Streamable HTTP, 2025-11-25
# session) on its Unix socket, through a loopback relay (the SDK's HTTP
# transport speaks TCP; the socket's mode is its authentication).
/usr/bin/python3 "$mcp_dir/unix_relay.py" "$sock" >"$w/mcp-relay.out" &
mcp_relay=$!
wait_until 10 "the relay's port" grep -q port "$w/mcp-relay.out" || true
t=$(now)
mcp_out=$(timeout 1800 /usr/bin/node "$mcp_dir/lifecycle_client.mjs" --url \
  "http://127.0.0.1:$(awk '{ print $2 }' "$w/mcp-relay.out")/mcp" 2>"$w/mcp-http-stderr.log")
mcp_status=$?
printf '%s\n' "$mcp_out"
check "mcp: a sandbox's whole life through sbxd's /mcp" 0 "$mcp_status" ||
  tail -n 20 "$w/mcp-http-stderr.log" | sed 's/^/mcp-http stderr: /'
kill "$mcp_relay" 2>/dev/null
echo "SBXD-TIME: mcp lifecycle over /mcp $(elapsed "$t") s"

# /mcp on sbxd's socket: initialize opens a session, a tool call in it.
mcp_post() {  # BODY [HEADER...]: the reply's status, headers and body into $w/mcp.*
  local data=$1; shift
  code=$(curl -sS --unix-socket "$sock" -o "$w/mcp.body" -D "$w/mcp.head" -w '%{http_code}' \
    -H 'Accept: application/json, text/event-stream' -H 'Content-Type: application/json' "$@" \
    -d "$data" http://localhost/mcp)
  body=$(cat "$w/mcp.body")
}
mcp_post '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}'
check "mcp: /mcp initialize answers 200" 200 "$code"
mcp_sid=$(sed -n 's/^[Mm][Cc][Pp]-[Ss]ession-[Ii]d: *\([^[:space:]]*\).*/\1/p' "$w/mcp.head")
check "mcp: /mcp names the server" sandboxer "$(py "b['result']['serverInfo']['name']" 2>/dev/null)"
mcp_post '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sandbox_list","arguments":{"labels":{"test":"mcp"}}}}' \
  -H "MCP-Session-Id: $mcp_sid" -H 'MCP-Protocol-Version: 2025-11-25'
check "mcp: /mcp tools/call sandbox_list in the session (none left)" "200 0" \
  "$code $(py "len(b['result']['structuredContent']['sandboxes'])" 2>/dev/null)"
mcp_post '{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}' \
  -H 'MCP-Protocol-Version: 2026-07-28' -H 'Mcp-Method: tools/list'
check "mcp: /mcp 2026-07-28 tools/list" "200 complete" "$code $(py "b['result']['resultType']" 2>/dev/null)"
