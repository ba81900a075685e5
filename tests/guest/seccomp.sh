#!/usr/bin/env bash
# Guest test: sbx-vmm's seccomp filters on a running VM (level-1 side:
# seccomp_session.sh, one ok:/FAIL: line per check): each thread filtered
# and named after its class, the agent, a snapshot and a resume working
# under the filters, one forbidden call per thread class ending the VMM
# with status 6 and a line that names it. Every other guest test runs
# sbx-vmm with its filters on too (the default).
# Usage: seccomp.sh SOURCE_ROOT BUILD_ROOT
set -euo pipefail
src=$1 build=$2
# shellcheck source=SCRIPTDIR/../lib.sh
. "$src/tests/lib.sh"
# shellcheck source=SCRIPTDIR/agent_lib.sh
. "$src/tests/guest/agent_lib.sh"

SBX_TEST_AGENT=real agent_prepare seccomp
ctl=$build/host-tools/sbx-agentctl
[ -x "$ctl" ] || fail "no $ctl (build it first)"
agent_image minimal
run_nested "$work/out" --timeout 1200 -- /bin/bash "$src/tests/guest/seccomp_session.sh" \
  "$kernel" "$image" "$build/host-tools/sbx-vmm/sbx-vmm" "$ctl" "$work"
printf '%s\n' "$log" | grep -E '^(ok|FAIL): |^THREADS' || true
if [ "$status" -ne 0 ]; then
  printf '%s\n' "$log" | tail -n 30 >&2
  tail -n 15 "$work/boot-vmm.out" >&2 || true
  fail "seccomp: status $status"
fi
expect_contains "$log" "SECCOMP-SESSION-FAILURES: 0" "seccomp: every check passed"
