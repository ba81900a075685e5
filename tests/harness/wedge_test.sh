#!/usr/bin/env bash
# Self-test of the nested harness's progress watchdog (tests/nested):
#  1. a command that freezes level 1's heartbeat on purpose (kill -STOP
#     $SBX_L1_HEARTBEAT_PID, then sleeps far past every bound) must end as a
#     wedge: status 249, "nested: error: level 1 wedged" on stderr, within
#     the stall bound plus a margin, with the dump (each CPU's RIP resolved to
#     a kernel symbol, and the level-1 kernel's NMI backtrace);
#  2. a quiet command that runs longer than the stall bound (sleep, exit 3)
#     still returns its own status: no false wedge.
# In direct mode (hardware KVM: no level 1, no heartbeat) it skips (77).
# Usage: wedge_test.sh [SOURCE_ROOT]   (meson suite harness)
set -euo pipefail
src=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
# shellcheck source=SCRIPTDIR/../lib.sh
. "$src/tests/lib.sh"
nested="$src/tests/nested"
status=0 log=''   # set by run_nested
# the wedges here are deliberate: never run again
export SBX_HARNESS_RETRIES=0

mode=$("$nested" --print-mode)
if [[ "$mode" != nested ]]; then
    echo "SKIP: tests/nested runs direct here (no level 1, no heartbeat to watch)"
    exit 77
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT

kept_dir() {  # the run dir the harness kept, from its last error line
    sed -n 's/.*logs kept in \(\/[^ ]*sbx-nested\.[A-Za-z0-9]*\).*/\1/p' "$out" | tail -n1
}

# --- 1. a frozen heartbeat is a wedge --------------------------------------
bound=20 margin=90
t0=$SECONDS
# shellcheck disable=SC2016  # expanded in level 1
SBX_HARNESS_STALL_TIMEOUT=$bound run_nested "$out" --timeout 900 -- \
    sh -c 'kill -STOP "$SBX_L1_HEARTBEAT_PID" && echo "SBX-FROZEN $SBX_L1_HEARTBEAT_PID"; sleep 600'
took=$((SECONDS - t0))
echo "wedge case: status $status after $took s (stall bound $bound s, level-1 boot included)"
expect_status 249 "a frozen heartbeat ends the run as a wedge (status 249)"
expect_contains "$log" "SBX-FROZEN" "the command froze the heartbeat (SBX_L1_HEARTBEAT_PID)"
expect_contains "$log" "nested: error: level 1 wedged: no heartbeat for" "stderr names the wedge"
[[ $took -lt $((bound + margin)) ]] \
    || fail "the wedge took $took s to be reported (bound $bound s + margin $margin s)"
pass "reported within the bound + $margin s ($took s)"
if ! grep -Eq '^  cpu 0: RIP [0-9a-f]{16} [A-Za-z_][A-Za-z0-9_.]*\+0x' "$out"; then
    tail -n 60 "$out" >&2
    fail "the dump lacks cpu 0's RIP resolved to a kernel symbol"
fi
pass "the dump resolves each CPU's RIP to a symbol ($(grep -Ec '^  cpu [0-9]+: RIP' "$out") CPUs)"
expect_contains "$log" "Kernel panic - not syncing: NMI" "the NMI made the level-1 kernel panic"
expect_contains "$log" "Call Trace:" "the level-1 kernel printed a backtrace"
if grep -q 'did not finish within' "$out"; then fail "the wedge was reported as a timeout"; fi
dir=$(kept_dir)
[[ -n "$dir" && -s "$dir/dump.txt" && -s "$dir/console.log" ]] \
    || fail "the run dir with dump.txt and console.log was not kept ($dir)"
pass "the run dir was kept with dump.txt and console.log"
rm -rf "$dir"

# --- 2. a quiet command longer than the bound is no wedge -------------------
bound=8
t0=$SECONDS
SBX_HARNESS_STALL_TIMEOUT=$bound run_nested "$out" --timeout 600 -- \
    sh -c 'sleep 20; echo SBX-AWAKE; exit 3'
echo "quiet case: status $status after $((SECONDS - t0)) s (stall bound $bound s)"
expect_status 3 "CMD's own status passes through (sleep 20 > stall bound $bound s)"
expect_contains "$log" "SBX-AWAKE" "CMD ran to its end"
if grep -q 'wedged' "$out"; then tail -n 30 "$out" >&2; fail "a false wedge"; fi
pass "no false wedge"
