#!/usr/bin/env bash
# sbxd's /mcp (Streamable HTTP) over sbxd's real server and API over a host
# sbx-agent (sbxd_guest_fixture: sbx_run runs, sbx_off is stopped):
# 1. tests/mcp/http_client.mjs: the official MCP SDK clients (v1 with a
#    session, v2 pinned to 2026-07-28) on TCP with API keys through every
#    exec, file and process tool; a scoped and a read-only key; the
#    transport's rules as raw requests (sessions, Origin, Host, Accept,
#    batches, the 2026-07-28 headers).
# 2. tests/mcp-conformance/run: the MCP conformance suite on the Unix
#    socket (through a loopback relay: the suite sends no key), both
#    revisions' requirement sets against their baselines.
# Usage: mcp_http_test.sh FIXTURE SBX_AGENT SRC
set -euo pipefail
fixture=$1
agent=$2
src=$3
command -v node >/dev/null || { echo "SKIP: no node"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
"$src/tests/npm-ci" "$src/tests/mcp"
# shellcheck source=host-tools/sbxd/tests/test_lib.sh
. "$src/host-tools/sbxd/tests/test_lib.sh"
scratch sbxd-mcp
start_fixture "$fixture" "$agent"
tcp=$(fixture_value tcp)
mkdir "$tmp/guest"
MCP_KEY_HOST=$(fixture_value key_host) MCP_KEY_SCOPED=$(fixture_value key_scoped) \
MCP_KEY_READ=$(fixture_value key_read) \
    timeout 300 node "$src/tests/mcp/http_client.mjs" "http://${tcp#tcp:}/mcp" sbx_run sbx_off "$tmp/guest" "$(id -u)"

python3 "$src/tests/mcp/unix_relay.py" "$tmp/sbxd.sock" >"$tmp/relay.out" &
relay=$!
trap 'kill "$relay" 2>/dev/null; scratch_cleanup' EXIT
for _ in $(seq 50); do grep -q port "$tmp/relay.out" && break; sleep 0.1; done
"$src/tests/mcp-conformance/run" "http://127.0.0.1:$(awk '{ print $2 }' "$tmp/relay.out")/mcp"
