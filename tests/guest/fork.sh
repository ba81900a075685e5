#!/usr/bin/env bash
# Guest test: 4 VMs forked from one raw snapshot (level-1 side:
# fork_session.sh): each shares the snapshot's memory copy-on-write, gets
# and reports a new identity (vsock CID, MAC, generation, RNG reseed), and
# its counting process runs on independently.
# Usage: fork.sh SOURCE_ROOT BUILD_ROOT
set -euo pipefail
src=$1 build=$2
# shellcheck source=SCRIPTDIR/../lib.sh
. "$src/tests/lib.sh"
# shellcheck source=SCRIPTDIR/agent_lib.sh
. "$src/tests/guest/agent_lib.sh"

SBX_TEST_AGENT=real agent_prepare "snapshot-fork"
ctl=$build/host-tools/sbx-agentctl
[ -x "$ctl" ] || fail "no $ctl (build it first)"
agent_image minimal
# Level 1 gets a CPU per fork. With more running vCPUs than level-1 CPUs,
# level 1's TCG-emulated SVM once crashed the level-1 kernel itself
# (recursive page faults from error_entry in sbx-vmm's KVM_RUN: its GS base
# was wrong after a VM exit); the SMP boot flake needs the same condition.
run_nested "$work/out" --cpus 4 --timeout 1700 -- /bin/bash "$src/tests/guest/fork_session.sh" \
  "$kernel" "$image" "$build/host-tools/sbx-vmm/sbx-vmm" "$ctl" "$work"
printf '%s\n' "$log" | grep -E '^(ok|FAIL): |^FORK|^CLOCK' || true
if [ "$status" -ne 0 ]; then
  printf '%s\n' "$log" | tail -n 30 >&2
  for f in "$work"/*vmm.out; do echo "== $f" >&2; tail -n 10 "$f" >&2 || true; done
  fail "snapshot-fork: status $status"
fi
expect_contains "$log" "FORK-SESSION-FAILURES: 0" "snapshot-fork: every check passed"
