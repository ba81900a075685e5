#!/usr/bin/env bash
# Guest test: snapshot and restore of a running guest (level-1 side:
# snapshot_session.sh, one ok:/FAIL: line per check). On the minimal image
# with the agent: a counting process keeps its PID and counts on, a file
# written before the snapshot is there, the agent answers, a restore with
# the wrong memory size is refused and leaves the file untouched.
# Usage: snapshot.sh SOURCE_ROOT BUILD_ROOT eager|lazy|private
set -euo pipefail
src=$1 build=$2 mode=$3
# shellcheck source=SCRIPTDIR/../lib.sh
. "$src/tests/lib.sh"
# shellcheck source=SCRIPTDIR/agent_lib.sh
. "$src/tests/guest/agent_lib.sh"

SBX_TEST_AGENT=real agent_prepare "snapshot-$mode"
ctl=$build/host-tools/sbx-agentctl
[ -x "$ctl" ] || fail "no $ctl (build it first)"
agent_image minimal
run_nested "$work/out" --timeout 1700 -- /bin/bash "$src/tests/guest/snapshot_session.sh" \
  "$mode" "$kernel" "$image" "$build/host-tools/sbx-vmm/sbx-vmm" "$ctl" "$work"
printf '%s\n' "$log" | grep -E '^(ok|FAIL): |^SNAPSHOT|^RESTORE|^CLOCK|^ON-DISK|^VMM: |^GUEST-CLOCKSOURCE' || true
if [ "$status" -ne 0 ]; then
  printf '%s\n' "$log" | tail -n 30 >&2
  for f in "$work/$mode"-*vmm.out; do echo "== $f" >&2; tail -n 15 "$f" >&2 || true; done
  fail "snapshot-$mode: status $status"
fi
expect_contains "$log" "SNAPSHOT-SESSION-FAILURES: $mode 0" "snapshot-$mode: every check passed"
