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
# shellcheck source=host-tools/sbxd/tests/test_lib.sh
. "$src/host-tools/sbxd/tests/test_lib.sh"
scratch sbx-mcp
start_fixture "$fixture" "$agent"
mkdir "$tmp/guest"
SBX_HOST=unix:$tmp/sbxd.sock XDG_CONFIG_HOME=$tmp/config \
    timeout 300 node "$src/tests/mcp/stdio_client.mjs" "$sbx" sbx_run "$tmp/guest" "$(id -u)"
