#!/usr/bin/env bash
# Guest test: sbx-vmm boots our kernel and the minimal initramfs to
# userspace through the nested harness, the guest reports its vCPU count,
# and a guest reboot ends sbx-vmm with status 0.
# Usage: boot.sh SOURCE_ROOT BUILD_ROOT CPUS kernel|vmlinux
set -euo pipefail
src=$1 build=$2 cpus=$3 format=$4
. "$src/tests/lib.sh"
need_harness

kernel=$("$src/images/build" "$format")
initrd=$("$src/images/build" initramfs)
out=$(mktemp)
trap 'rm -f "$out"' EXIT

run_nested "$out" --timeout 600 -- \
  "$build/vmm/process/sbx-vmm" --kernel "$kernel" --initrd "$initrd" --cpus "$cpus" --memory 256
if [ "$status" -eq 2 ] && [ "$cpus" -gt 1 ]; then
  # KNOWN BUG (open, see the closing note of the First-light issue): under
  # the nested harness an SMP guest sometimes triple-faults on an AP (about
  # 1 boot in 7 with 4 vCPUs on a 2-vCPU level 1). Until it is fixed, one
  # retry, said loudly, so the flake stays visible in every log.
  printf '%s\n' "$log" | grep -E 'exit:' >&2 || true
  echo "FLAKE: SMP guest triple fault (known bug); retrying once" >&2
  run_nested "$out" --timeout 600 -- \
    "$build/vmm/process/sbx-vmm" --kernel "$kernel" --initrd "$initrd" --cpus "$cpus" --memory 256
fi
expect_status 0 "sbx-vmm exited 0 after the guest rebooted"
expect_contains "$log" "SBX-BOOTED" "guest reached userspace"
expect_contains "$log" "SBX-UNAME: Linux" "guest ran uname"
expect_contains "$log" "SBX-NPROC: $cpus" "guest sees $cpus vCPUs"
expect_contains "$log" "guest boot time:" "boot timer recorded the init's write"
expect_contains "$log" "exit: reset" "exit reason is the guest reset"
