#!/usr/bin/env bash
# `sbx mcp` under the official MCP SDK clients (tests/mcp/stdio_client.mjs:
# v1 over 2025-11-25, v2 pinned to 2026-07-28) against sbxd's real server
# and API over a host sbx-agent (sbxd_guest_fixture, as files_test.sh: the
# "guest" is this host; sandbox sbx_run runs). Every exec, file and
# process tool, errors, concurrent calls. The lifecycle tools (create,
# stop, resume, fork, host_port) need a VM: tests/guest/sbxd/mcp.sh.
# Usage: mcp_test.sh FIXTURE SBX_AGENT SBX SRC
set -euo pipefail
fixture=$1
agent=$2
sbx=$3
src=$4
command -v node >/dev/null || { echo "SKIP: no node"; exit 77; }
"$src/tests/npm-ci" "$src/tests/mcp"
tmp=$(mktemp -d /tmp/sbx-mcp-XXXXXX)
pid=
cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid"; wait "$pid" || true; fi
    [ -n "${KEEP:-}" ] && return
    rm -rf "$tmp"
}
trap cleanup EXIT
"$fixture" "$agent" "$tmp" >"$tmp/fixture.out" 2>"$tmp/fixture.log" &
pid=$!
for _ in $(seq 100); do
    grep -q listening "$tmp/fixture.out" && break
    kill -0 "$pid" 2>/dev/null || { cat "$tmp/fixture.log" >&2; exit 1; }
    sleep 0.1
done
grep -q listening "$tmp/fixture.out" || { cat "$tmp/fixture.log" >&2; exit 1; }
mkdir "$tmp/guest"
SBX_HOST=unix:$tmp/sbxd.sock XDG_CONFIG_HOME=$tmp/config \
    timeout 300 node "$src/tests/mcp/stdio_client.mjs" "$sbx" sbx_run "$tmp/guest" "$(id -u)"
