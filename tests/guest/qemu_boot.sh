#!/usr/bin/env bash
# Guest test: QEMU -M microvm boots the same kernel and initramfs in the same
# harness, the reference every sbx-vmm benchmark is compared with. If this
# fails, the harness or the images are broken, not sbx-vmm.
# Usage: qemu_boot.sh SOURCE_ROOT
set -euo pipefail
src=$1
. "$src/tests/lib.sh"
need_harness
need_cmd qemu-system-x86_64 "the QEMU -M microvm reference"

kernel=$("$src/images/build" vmlinux)
initrd=$("$src/images/build" initramfs)
out=$(mktemp)
trap 'rm -f "$out"' EXIT

run_nested "$out" --timeout 900 -- \
  qemu-system-x86_64 -M microvm,x-option-roms=off,rtc=off,acpi=off,pit=on,pic=on \
  -enable-kvm -cpu host -smp 2 -m 256 -nodefaults -no-user-config -nographic \
  -serial stdio -device i8042 -no-reboot -kernel "$kernel" -initrd "$initrd" \
  -append "console=ttyS0 reboot=k panic=1 pci=off nomodule quiet"
expect_status 0 "qemu exited 0 after the guest rebooted"
expect_contains "$log" "SBX-BOOTED" "guest reached userspace under QEMU"
expect_contains "$log" "SBX-NPROC: 2" "guest sees 2 vCPUs under QEMU"
