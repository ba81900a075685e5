#!/usr/bin/env bash
# The examples (examples/run_all.sh) at level 0: against sbxd's real server
# and API over a host sbx-agent (sbxd_guest_fixture), where no VM can be
# made, so each runs in the fixture's running sandbox sbx_run (the host,
# as the tester) through SANDBOXER_EXAMPLE_SANDBOX. Their paths that
# create and delete sandboxes run in the nested harness
# (tests/guest/sbxd/examples.sh).
# Usage: fixture_test.sh FIXTURE SBX_AGENT SRC
set -euo pipefail
fixture=$1
agent=$2
src=$3
command -v node >/dev/null || { echo "SKIP: no node"; exit 77; }
# shellcheck source=host-tools/sbxd/tests/test_lib.sh
. "$src/host-tools/sbxd/tests/test_lib.sh"
scratch sbx-examples
start_fixture "$fixture" "$agent"
env -u SBX_API_KEY SBX_HOST="unix:$tmp/sbxd.sock" SANDBOXER_EXAMPLE_SANDBOX=sbx_run \
    SANDBOXER_EXAMPLE_USER="$(id -u)" PYTHON=/usr/bin/python3 \
    timeout 600 "$src/examples/run_all.sh" "$tmp/out"
