#!/usr/bin/env bash
# Guest test: virtio-blk. The host makes an ext4 image holding a text file
# and 8 MiB of the test stream; the guest mounts /dev/vda, reports both,
# writes a text file and 4 MiB of another stream, syncs and unmounts. After
# the VMM exits the host reads them back from the image (debugfs, no root)
# and checks the file system (e2fsck -n). A second, raw disk attached
# read-only is /dev/vdb: readable, flagged read-only, a write fails, and the
# image is unchanged afterwards. A third, scratch disk takes a heavy write
# load at the end, when the host sends the VMM SIGTERM: sbx-vmm must exit 0
# within a bound, and the images checked above must be as the guest left them.
# /dev/vdd is a qcow2 overlay made by qemu-img create -b BASE -F raw: the
# guest reads its base through it and writes 1 MiB before the load; then
# qemu-img check finds it clean, qemu-img compare finds it equal to the base
# with that write, and the base is unchanged.
# Usage: virtio_blk.sh SOURCE_ROOT BUILD_ROOT sbx|qemu
set -euo pipefail
src=$1 build=$2 vmm=$3
# shellcheck source=SCRIPTDIR/../lib.sh
. "$src/tests/lib.sh"
# shellcheck source=SCRIPTDIR/virtio_lib.sh
. "$src/tests/guest/virtio_lib.sh"

for c in mkfs.ext4 debugfs e2fsck; do need_cmd "$c" "e2fsprogs: the host makes and checks the ext4 image"; done
need_cmd qemu-img "qemu-utils: the host makes and checks the qcow2 overlay"
read_bytes=$((8 << 20)) write_bytes=$((4 << 20)) seed=7
virtio_prepare virtio-blk "$vmm"
echo "WRITE_BYTES=$write_bytes SEED=$seed" >"$work/env"
virtio_initrd blk.sh "$work/env:/etc/sbx-test.env"

# vda: ext4 made from a directory, unprivileged (mkfs.ext4 -d).
mkdir "$work/fs"
echo "hello-from-the-host-disk" >"$work/fs/hello.txt"
"$tools/sbx-vsock" gen "$read_bytes" "$seed" >"$work/fs/big.bin"
mkfs.ext4 -q -F -L sbxtest -d "$work/fs" "$work/vda.img" 64M
big_sum=$(sha256sum <"$work/fs/big.bin" | cut -d' ' -f1)
# vdb: raw, a line of text at its start.
echo "read-only-disk-content" >"$work/vdb.img"
truncate -s 1M "$work/vdb.img"
vdb_sum=$(sha256sum <"$work/vdb.img")

# vdc: a sparse scratch disk that the guest loads with writes at the end.
truncate -s 128M "$work/vdc.img"

# vdd: a qcow2 overlay (its backing name relative, as sbxd would store it)
# on 8 MiB of the test stream.
"$tools/sbx-vsock" gen $((8 << 20)) $((seed + 4)) >"$work/vdd-base.raw"
(cd "$work" && qemu-img create -q -f qcow2 -b vdd-base.raw -F raw vdd.qcow2)
vdd_base_sum=$(sha256sum <"$work/vdd-base.raw")
vdd_head_sum=$(head -c 1048576 "$work/vdd-base.raw" | sha256sum | cut -d' ' -f1)

virtio_run "$vmm" --disk "$work/vda.img" --disk "$work/vdb.img,ro" --disk "$work/vdc.img" \
  --disk "$work/vdd.qcow2" --sigterm-on "SBX-BLK-LOAD: running"
expect_status 0 "virtio-blk ($vmm): the VMM exited 0 on SIGTERM"
expect_contains "$log" "SBX-BLK-STEPS-FAILED: 0" "virtio-blk ($vmm): every guest-side step passed"
expect_lacks "$log" "HOST-ERROR" "virtio-blk ($vmm): no host-side error"
# Teardown is bounded: the vCPUs stop, each disk cancels its I/O in flight
# and waits for the kernel at most 2 s. 5 s natively; 15 s allows for the
# harness (the exit itself, not the guest, runs in level 1's TCG).
exit_s=$(printf '%s\n' "$log" | sed -n 's/^HOST-SIGTERM-EXIT: \([0-9.]*\) s.*/\1/p' | head -n1)
[ -n "$exit_s" ] || fail "virtio-blk ($vmm): no HOST-SIGTERM-EXIT line (the load never reported running)"
echo "virtio-blk ($vmm): exited ${exit_s} s after SIGTERM under a heavy write load"
printf '%s\n' "$log" | grep -m1 -o 'SBX-BLK-LOAD: .*' || true
if [ "$vmm" = sbx ]; then
  awk -v s="$exit_s" 'BEGIN { exit !(s <= 15) }' || fail "sbx-vmm took ${exit_s} s to exit after SIGTERM (bound 15 s)"
  pass "sbx-vmm exits within 15 s of SIGTERM under a heavy write load (${exit_s} s)"
  expect_contains "$log" "stopped by SIGTERM" "sbx-vmm names SIGTERM as the reason it stopped"
fi
expect_contains "$log" "SBX-BLK-READ: hello-from-the-host-disk" "the guest read the host's file from ext4 on /dev/vda"
expect_contains "$log" "SBX-BLK-BIG-READ-SHA256: $big_sum" "the guest read 8 MiB intact"
expect_contains "$log" "SBX-BLK-WRITE: done" "the guest wrote, synced and unmounted"

got=$(debugfs -R 'cat /from-guest.txt' "$work/vda.img" 2>/dev/null)
[ "$got" = "written-by-guest-through-virtio-blk" ] || fail "the image holds '$got' in /from-guest.txt"
pass "the host reads the guest's file from the image"
debugfs -R "dump /from-guest.bin $work/from-guest.bin" "$work/vda.img" >/dev/null 2>&1 || true
want=$("$tools/sbx-vsock" gen "$write_bytes" "$((seed + 1))" | sha256sum | cut -d' ' -f1)
got=$(sha256sum <"$work/from-guest.bin" 2>/dev/null | cut -d' ' -f1) || true
[ "$got" = "$want" ] || fail "the guest's 4 MiB file in the image has sha256 '$got', expected $want"
pass "the guest's 4 MiB write is intact in the image"
e2fsck -fn "$work/vda.img" >"$work/fsck" 2>&1 || { cat "$work/fsck" >&2; fail "e2fsck finds errors in the image"; }
pass "the file system is clean after the guest's unmount"

expect_contains "$log" "SBX-BLK-VDB-READ: read-only-disk-content" "the guest reads the read-only /dev/vdb"
expect_contains "$log" "SBX-BLK-VDB-RO: 1 getro=1" "/dev/vdb is read-only in the guest"
expect_contains "$log" "SBX-BLK-VDB-WRITE: refused" "a write to /dev/vdb fails"
[ "$(sha256sum <"$work/vdb.img")" = "$vdb_sum" ] || fail "the read-only image changed"
pass "the read-only image is unchanged"

expect_contains "$log" "SBX-BLK-SIZE: vdd 16384 sectors" "the qcow2 overlay is the base's 8 MiB"
expect_contains "$log" "SBX-BLK-VDD-READ-SHA256: $vdd_head_sum" "the guest reads the base through the overlay"
expect_contains "$log" "SBX-BLK-VDD-WRITE: done" "the guest wrote 1 MiB to the overlay"
qemu-img check -f qcow2 "$work/vdd.qcow2" >"$work/qcheck" 2>&1 || { cat "$work/qcheck" >&2; fail "qemu-img check finds the overlay unclean"; }
pass "qemu-img check: the overlay is clean after the SIGTERM"
cp "$work/vdd-base.raw" "$work/vdd-expected.raw"
"$tools/sbx-vsock" gen 1048576 $((seed + 5)) >"$work/vdd-write.bin"
dd if="$work/vdd-write.bin" of="$work/vdd-expected.raw" bs=512 seek=2051 conv=notrunc 2>/dev/null
qemu-img compare -f qcow2 -F raw "$work/vdd.qcow2" "$work/vdd-expected.raw" >"$work/qcompare" 2>&1 ||
  { cat "$work/qcompare" >&2; fail "qemu-img compare: the overlay differs from the base with the guest's write"; }
pass "qemu-img compare: the overlay holds the base with the guest's write"
[ "$(sha256sum <"$work/vdd-base.raw")" = "$vdd_base_sum" ] || fail "the overlay's base changed"
pass "the overlay's base is unchanged"
