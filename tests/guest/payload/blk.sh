#!/bin/sh
# Guest side of the virtio-blk test (/sbx-run; the same for every VMM).
#   /dev/vda: ext4 made by the host, holding hello.txt and big.bin (a
#             test stream the host wrote; its sha256 is reported);
#   /dev/vdb: attached read-only, starting with a line of text;
#   /dev/vdc (optional): a scratch disk for the load at the end;
#   /dev/vdd (optional): a qcow2 overlay on a raw base of the test stream
#             (seed SEED+4): the sha256 of its first MiB is reported, then
#             the stream with seed SEED+5 (1 MiB) is written at sector 2051.
# Reports what it reads, writes from-guest.txt and from-guest.bin (the test
# stream, WRITE_BYTES long, seed SEED+1) for the host to check in the image
# after the VM exits, then checks that vdb refuses writes. One SBX-BLK-*
# line per step; the exit status counts the failed steps.
WRITE_BYTES=4194304 SEED=7
# shellcheck disable=SC1091 # written by the host side, when present
[ -f /etc/sbx-test.env ] && . /etc/sbx-test.env
failed=0
bad() { echo "SBX-BLK-FAIL: $*"; failed=$((failed + 1)); }

echo "SBX-VIRTIO-IDS: $(cat /sys/bus/virtio/devices/*/device 2>/dev/null | tr '\n' ' ')"
for d in vda vdb; do
    [ -b /dev/$d ] || bad "no /dev/$d"
    echo "SBX-BLK-SIZE: $d $(cat /sys/block/$d/size 2>/dev/null) sectors ro=$(cat /sys/block/$d/ro 2>/dev/null)"
done

mkdir -p /mnt
if timeout 60 mount -t ext4 /dev/vda /mnt; then
    echo "SBX-BLK-READ: $(cat /mnt/hello.txt)"
    echo "SBX-BLK-BIG-READ-SHA256: $(timeout 120 sha256sum </mnt/big.bin | cut -d' ' -f1)"
    echo "written-by-guest-through-virtio-blk" >/mnt/from-guest.txt || bad "write from-guest.txt"
    timeout 120 sbx-vsock gen "$WRITE_BYTES" "$((SEED + 1))" >/mnt/from-guest.bin || bad "write from-guest.bin"
    sync
    if timeout 60 umount /mnt; then echo "SBX-BLK-WRITE: done"; else bad "umount /dev/vda"; fi
else
    bad "mount /dev/vda"
fi

# The read-only disk: readable, flagged read-only, and a write fails.
echo "SBX-BLK-VDB-READ: $(head -c 64 /dev/vdb | tr -d '\0')"
echo "SBX-BLK-VDB-RO: $(cat /sys/block/vdb/ro) getro=$(blockdev --getro /dev/vdb)"
# oflag=direct: the write reaches the device now, not at a later writeback.
if timeout 60 dd if=/dev/zero of=/dev/vdb bs=4096 count=1 oflag=direct 2>/dev/null; then
    bad "a write to the read-only /dev/vdb succeeded"
else
    echo "SBX-BLK-VDB-WRITE: refused"
fi

# The qcow2 overlay: reads come from its base until written; the write
# starts mid-cluster and ends mid-cluster (copy-on-write at both ends).
if [ -b /dev/vdd ]; then
    echo "SBX-BLK-SIZE: vdd $(cat /sys/block/vdd/size) sectors"
    echo "SBX-BLK-VDD-READ-SHA256: $(timeout 60 head -c 1048576 /dev/vdd | sha256sum | cut -d' ' -f1)"
    mkdir -p /tmp
    sbx-vsock gen 1048576 "$((SEED + 5))" >/tmp/vdd.bin || bad "make the vdd stream"
    if timeout 60 dd if=/tmp/vdd.bin of=/dev/vdd bs=512 seek=2051 oflag=direct 2>/dev/null && sync; then
        echo "SBX-BLK-VDD-WRITE: done"
    else
        bad "write to /dev/vdd"
    fi
fi

# /dev/vdc: a scratch disk under a heavy load of direct writes and flushes,
# reported as running only once all of it is going; the host then sends the
# VMM SIGTERM, which must end it promptly (SBX-RUN-EXIT never comes).
if [ -b /dev/vdc ]; then
    sectors=$(cat /sys/block/vdc/size)
    writers=8
    part=$((sectors / 2048 / writers))  # MiB per writer
    i=0
    while [ "$i" -lt "$writers" ]; do
        (while :; do dd if=/dev/zero of=/dev/vdc bs=1M count="$part" seek=$((i * part)) oflag=direct 2>/dev/null; done) &
        i=$((i + 1))
    done
    (while :; do dd if=/dev/zero of=/dev/vdc bs=64k count=4 conv=fsync 2>/dev/null; done) &
    sleep 3
    echo "SBX-BLK-STEPS-FAILED: $failed"
    echo "SBX-BLK-LOAD: running ($writers direct writers of $part MiB and a flushing one; in flight: $(cat /sys/block/vdc/inflight | tr -s " "))"
    sleep 600
fi
exit "$failed"
