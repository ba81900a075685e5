#!/bin/sh
# Guest side of the virtio-rng test (/sbx-run; the same for every VMM):
# the hw_random core uses the virtio device, and /dev/hwrng gives 64 bytes
# that are not all zero. The exit status counts the failed steps.
failed=0
bad() { echo "SBX-RNG-FAIL: $*"; failed=$((failed + 1)); }

echo "SBX-VIRTIO-IDS: $(cat /sys/bus/virtio/devices/*/device 2>/dev/null | tr '\n' ' ')"
echo "SBX-RNG-CURRENT: $(cat /sys/class/misc/hw_random/rng_current 2>&1)"
# fullblock: a read of /dev/hwrng may return fewer bytes than asked.
hex=$(timeout 60 dd if=/dev/hwrng bs=64 count=1 iflag=fullblock 2>/dev/null | od -An -v -tx1 | tr -d ' \n')
echo "SBX-RNG-BYTES: $hex"
[ ${#hex} -eq 128 ] || bad "read ${#hex} hex digits from /dev/hwrng, not 128"
case $hex in
    *[1-9a-f]*) echo "SBX-RNG: nonzero" ;;
    *) bad "/dev/hwrng gave only zeros" ;;
esac
exit "$failed"
