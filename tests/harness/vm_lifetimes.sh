#!/usr/bin/env bash
# Many short VM lifetimes in one level-1 run, for tests/harness/soak (case
# "lifetimes"): sbx-vmm boots the plain initramfs guest to userspace, the
# guest reboots, sbx-vmm exits 0; 1 and 2 vCPUs in turn. Every start and
# end of a VM exercises what wedged level 1 before (kvm_destroy_vm's
# cross-CPU calls, interrupts to a vCPU thread on the other level-1 CPU).
# Prints one LIFETIME line per VM; exit status: the number that failed.
# The same lifetimes under the references, to tell our stalls from the
# harness's: SBX_LIFETIMES_VMM=qemu (QEMU -M microvm with KVM) or lkvm
# (kvmtool, SBX_LKVM: its lkvm binary, built outside the tree).
# Usage (host): tests/harness/vm_lifetimes.sh [COUNT]   (default 12)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=${SBX_BUILD_DIR:-$src/build}
count=${1:-12}
vmm=${SBX_LIFETIMES_VMM:-sbx}
case $vmm in
  sbx | qemu) ;;
  lkvm) [ -x "${SBX_LKVM:-}" ] || { echo "SBX_LIFETIMES_VMM=lkvm needs SBX_LKVM=/path/to/lkvm" >&2; exit 125; } ;;
  *) echo "SBX_LIFETIMES_VMM must be sbx, qemu or lkvm, not '$vmm'" >&2; exit 125 ;;
esac
if [ "${SBX_NESTED:-}" != 1 ] && [ "$("$src/tests/nested" --print-mode 2>/dev/null)" = nested ]; then
  exec "$src/tests/nested" --timeout $((count * 240 + 60)) -- /bin/bash "$0" "$count"
fi
kernel=$("$src/images/build" kernel) && initrd=$("$src/images/build" initramfs) || exit 125
w=$(mktemp -d /tmp/lifetimes.XXXXXX)
# The guest's kernel command line: sbx-vmm's default (also for the
# references) and SBX_LIFETIMES_APPEND.
append="console=ttyS0 reboot=k panic=1 pci=off nomodule i8042.noaux i8042.nomux i8042.nopnp i8042.dumbkbd quiet"
append+=${SBX_LIFETIMES_APPEND:+ $SBX_LIFETIMES_APPEND}
# start_vm CPUS: one VM in the background, its console in $w/console.log.
start_vm() {
  case $vmm in
    sbx)
      "$build/host-tools/sbx-vmm/sbx-vmm" --kernel "$kernel" --initrd "$initrd" --cpus "$1" --memory 256 \
        --cmdline "$append" --control "$w/control.sock" --console "file:$w/console.log" </dev/null >"$w/vmm.out" 2>&1 & ;;
    qemu)
      qemu-system-x86_64 -M microvm,x-option-roms=off,rtc=off,acpi=off,pit=on,pic=on \
        -enable-kvm -cpu host -smp "$1" -m 256 -nodefaults -no-user-config -display none \
        -serial "file:$w/console.log" -device i8042 -no-reboot -kernel "$kernel" \
        -initrd "$initrd" -append "$append" </dev/null >"$w/vmm.out" 2>&1 & ;;
    lkvm)
      HOME=$w "$SBX_LKVM" run --kernel "$kernel" --initrd "$initrd" --cpus "$1" --mem 256 \
        --console serial --network mode=none --params "$append" \
        </dev/null >"$w/console.log" 2>"$w/vmm.out" & ;;
  esac
}
failures=0
for i in $(seq 1 "$count"); do
  cpus=$((1 + i % 2))
  t0=$(date +%s.%N)
  start_vm "$cpus"
  pid=$!
  # A boot takes seconds here; one still running after SBX_LIFETIMES_STALL
  # (60) s has stalled: say where the guest is (tests/guest/vm_diagnose.py),
  # then end it.
  st=
  for _ in $(seq 1 $((${SBX_LIFETIMES_STALL:-60} * 10))); do
    kill -0 "$pid" 2>/dev/null || { wait "$pid"; st=$?; break; }
    sleep 0.1
  done
  if [ -z "$st" ]; then
    echo "LIFETIME $i: stalled for ${SBX_LIFETIMES_STALL:-60} s; diagnosis:"
    tail -n 3 "$w/console.log" | sed 's/^/  console: /'
    for t in /proc/"$pid"/task/*; do
      echo "  thread ${t##*/} $(cat "$t/comm") $(cut -d' ' -f3 "$t/stat") wchan=$(cat "$t/wchan")"
      sed 's/^/      /' "$t/stack" 2>/dev/null | head -n 12
    done
    if [ "$vmm" = sbx ]; then
      python3 "$src/tests/guest/vm_diagnose.py" "$w/control.sock" "$(dirname "$kernel")/System.map" 2>&1 | tail -n 12 | sed 's/^/  /'
      sleep 20
      echo "  20 s later:"
      python3 "$src/tests/guest/vm_diagnose.py" "$w/control.sock" "$(dirname "$kernel")/System.map" 2>&1 | sed 's/^/  /'
    fi
    tail -n 3 "$w/console.log" | sed 's/^/  console: /'
    kill -9 "$pid"; wait "$pid"; st=124
  fi
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  if [ "$st" -eq 0 ] && grep -q SBX-BOOTED "$w/console.log"; then
    echo "LIFETIME $i: ok, $vmm, $cpus vCPU(s), $secs s"
  else
    failures=$((failures + 1))
    echo "LIFETIME $i: FAILED, $vmm, $cpus vCPU(s), status $st after $secs s; vmm: $(tail -n 2 "$w/vmm.out" | tr '\n' ' ')"
    tail -n 5 "$w/console.log" | sed 's/^/  console: /'
  fi
done
rm -rf "$w"
echo "LIFETIMES: $count, failed $failures"
exit "$failures"
