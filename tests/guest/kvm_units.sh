#!/usr/bin/env bash
# Guest test: the unit tests that need a hardware-style /dev/kvm (they SKIP
# in the unit suite on a host without one), in one level-1 run:
# kvm_state_hw (vCPU and VM state round trips, a counting guest continued
# in another VM), kvm_diagnosis_hw, and vm_hw (Vm's run, pause, resume,
# stop, a device's exit request and diagnose on a tiny guest). Here each
# must pass: a SKIP inside the harness is a failure.
# Usage: kvm_units.sh SOURCE_ROOT BUILD_ROOT
set -euo pipefail
src=$1 build=$2
. "$src/tests/lib.sh"
need_harness

tests=("$build/vmm/kvm/kvm_state_hw_test" "$build/vmm/kvm/kvm_diagnosis_hw_test" "$build/vmm/vm_hw_test")
for t in "${tests[@]}"; do
  [ -x "$t" ] || fail "not built: $t"
done
work=$(mktemp -d "$build/kvm-units.XXXXXX")
trap 'rm -rf "$work"' EXIT

# shellcheck disable=SC2016  # expanded in level 1
run_nested "$work/out" --timeout 900 -- /bin/sh -c '
  for t in "$@"; do
    echo "== $t"
    "$t"
    rc=$?
    echo "== $t: exit $rc"
    [ "$rc" -eq 0 ] || exit "$rc"
  done' sh "${tests[@]}"
printf '%s\n' "$log" | grep -E '^(== |\[doctest\] (test cases|assertions))' || true
expect_status 0 "every /dev/kvm unit test passed in level 1 (none skipped)"
