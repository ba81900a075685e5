#!/usr/bin/env bash
# The TypeScript SDK's level-0 tests (sdk/typescript/README.md): node --test
# over dist/ against sbxd's real server and API over a host sbx-agent
# (sbxd_guest_fixture: sbx_run runs, sbx_off is stopped), plus the retry
# policy and the desktop's requests against a local stub server and the
# tar reader/writer against GNU tar. Builds dist/ with the pinned tsc first (npm ci only when the lock
# changed, through tests/npm-ci).
# Usage: fixture_test.sh FIXTURE SBX_AGENT SRC
set -euo pipefail
fixture=$1
agent=$2
src=$3
sdk=$src/sdk/typescript
command -v node >/dev/null || { echo "SKIP: no node"; exit 77; }
command -v npm >/dev/null || { echo "SKIP: no npm"; exit 77; }
"$src/tests/npm-ci" "$sdk"
(cd "$sdk" && ./node_modules/.bin/tsc -p tsconfig.json)
# shellcheck source=host-tools/sbxd/tests/test_lib.sh
. "$src/host-tools/sbxd/tests/test_lib.sh"
scratch sbx-ts-sdk
start_fixture "$fixture" "$agent"
value() { fixture_value "$1"; }
tcp=$(value tcp)
mkdir "$tmp/work"
cd "$sdk"
# SBX_HOST unset: live.test.mjs (a real sbxd with VMs) skips itself here.
env -u SBX_HOST -u SBX_API_KEY \
    SBX_FIXTURE_SOCKET="$tmp/sbxd.sock" SBX_FIXTURE_TCP="http://${tcp#tcp:}" \
    SBX_FIXTURE_KEY_HOST="$(value key_host)" SBX_FIXTURE_KEY_SCOPED="$(value key_scoped)" \
    SBX_FIXTURE_KEY_READ="$(value key_read)" SBX_FIXTURE_DIR="$tmp/work" \
    timeout 300 node --test --test-reporter=spec test/*.test.mjs
