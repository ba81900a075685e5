#!/usr/bin/env bash
# Guest test: the guest's poweroff and its kernel panic end sbx-vmm with
# their own exit reasons (docs/guest-layout.md, "Poweroff and panic"), in
# one harness run with two boots of the busybox initramfs:
#   - sbx.halt=poweroff: /init runs busybox `poweroff -f`; the kernel's
#     power-off handler (pvpanic SHUTDOWN) ends sbx-vmm with status 0 and
#     "exit: poweroff";
#   - an /sbx-run hook reports what the guest's PCI probe found (both
#     functions, pvpanic bound, no error-level line), then panics the kernel (echo c > /proc/sysrq-trigger)
#     with panic=1 on the command line, so the kernel would reboot a second
#     later if pvpanic did not report the panic first: status 5, "exit:
#     panic", and no reboot in between.
# Usage: power.sh SOURCE_ROOT BUILD_ROOT
set -euo pipefail
src=$1 build=$2
. "$src/tests/lib.sh"
need_harness

# expect_lacks HAYSTACK NEEDLE WHAT
expect_lacks() {
  case "$1" in
    *"$2"*) printf '%s\n' "$1" | grep -F -- "$2" >&2; fail "$3: the log has '$2'" ;;
    *) pass "$3" ;;
  esac
}

kernel=$("$src/images/build" kernel)
initrd=$("$src/images/build" initramfs)
# The harness shares only the project tree writable; keep inputs there.
work=$(mktemp -d "$build/power.XXXXXX")
trap 'rm -rf "$work"' EXIT

cat >"$work/panic-hook" <<'HOOK'
#!/bin/sh
echo "SBX-PCI-DEVICES: $(ls /sys/bus/pci/devices | tr '\n' ' ')"
echo "SBX-PVPANIC-BOUND: $(ls /sys/bus/pci/drivers/pvpanic-pci | grep -c '^0000:')"
echo "SBX-PCI-ERRORS: $(dmesg -r | grep '^<[0-3]>' | grep -ci pci)"
dmesg | grep -i -E 'pci|pvpanic' | sed 's/^/SBX-DMESG: /'
echo "SBX-PANIC-NOW"
echo c >/proc/sysrq-trigger
HOOK
"$src/tests/guest/make-initrd" "$initrd" "$work/panic-hook" "$work/panic.cpio.gz"

vmm=$build/host-tools/sbx-vmm/sbx-vmm
cmdline="console=ttyS0 reboot=k panic=1 i8042.noaux i8042.nomux i8042.nopnp i8042.dumbkbd quiet"
# Each boot's output to its own log; its status as a line of the run's output.
cat >"$work/session" <<SESSION
"$vmm" --kernel "$kernel" --initrd "$initrd" --memory 256 \
  --cmdline "$cmdline sbx.halt=poweroff" >"$work/poweroff.log" 2>&1
echo "POWER-STATUS: poweroff \$?"
"$vmm" --kernel "$kernel" --initrd "$work/panic.cpio.gz" --memory 256 \
  --cmdline "$cmdline" >"$work/panic.log" 2>&1
echo "POWER-STATUS: panic \$?"
SESSION
run_nested "$work/out" --timeout 900 -- /bin/bash "$work/session"
expect_status 0 "level 1 ran both boots"

poweroff=$(cat "$work/poweroff.log")
expect_contains "$log" "POWER-STATUS: poweroff 0" "sbx-vmm exited 0 after the guest's poweroff"
expect_contains "$poweroff" "SBX-HALT: poweroff" "/init ran poweroff"
expect_contains "$poweroff" "exit: poweroff (guest powered off (pvpanic))" "the exit reason is poweroff"
expect_lacks "$poweroff" "System halted" "the kernel powered off instead of halting"

panic=$(cat "$work/panic.log")
expect_contains "$log" "POWER-STATUS: panic 5" "a kernel panic ends sbx-vmm with status 5"
expect_contains "$panic" "SBX-PCI-DEVICES: 0000:00:00.0 0000:00:01.0 " "the guest sees the host bridge and pvpanic on PCI"
expect_contains "$panic" "SBX-PVPANIC-BOUND: 1" "the pvpanic-pci driver bound to it"
expect_contains "$panic" "SBX-PCI-ERRORS: 0" "no error-level kernel line about PCI"
expect_contains "$panic" "SBX-PANIC-NOW" "the hook ran"
expect_contains "$panic" "Kernel panic - not syncing: sysrq triggered crash" "the guest kernel panicked"
expect_contains "$panic" "exit: panic: guest kernel panic (pvpanic)" "the exit reason is panic"
expect_lacks "$panic" "exit: reboot" "the panic did not turn into a reboot"
printf '%s\n' "$panic" | grep -E '^SBX-DMESG: ' || true
