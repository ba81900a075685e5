#!/bin/sh
# Guest side of bench/virtio: sbx-bench's blk and vsock workloads, and the
# earlier bench/virtio_runner.py (/sbx-run; the same for every VMM).
# Parameters come from /etc/sbx-test.env (if an initramfs made for the
# earlier runner carries one), then from the kernel command line's
# sbxbench.KEY=VALUE words (sbx-bench's; the kernel passes dotted words to
# no one, so they are read from /proc/cmdline): steps (blk, vsock or
# blk,vsock: the default), blk_mib, rand_s, vsock_bytes. /dev/vda is a raw
# scratch disk (or a qcow2 overlay of one): it is overwritten.
#  1. virtio-blk, O_DIRECT, queue depth 1 (sbx-blkbench): sequential write
#     then read of BLK_MIB MiB in 1 MiB requests, then RAND_SECONDS of
#     random 4 KiB reads; each prints "SBX-BENCH: blk-... MBps=... iops=...";
#  2. virtio-vsock guest -> host: VSOCK_BYTES zeros to the host's port 5002
#     (the host times the arrival);
#  3. host -> guest: listen on 1236, the host sends VSOCK_BYTES and closes.
# The exit status counts the failed steps.
BLK_MIB=128 RAND_SECONDS=10 VSOCK_BYTES=67108864 STEPS=blk,vsock
# shellcheck disable=SC1091 # in the initramfs, if at all
[ -f /etc/sbx-test.env ] && . /etc/sbx-test.env
read -r cmdline </proc/cmdline
# shellcheck disable=SC2086 # the command line's words
for word in $cmdline; do
    case "$word" in
        sbxbench.steps=*) STEPS=${word#*=} ;;
        sbxbench.blk_mib=*) BLK_MIB=${word#*=} ;;
        sbxbench.rand_s=*) RAND_SECONDS=${word#*=} ;;
        sbxbench.vsock_bytes=*) VSOCK_BYTES=${word#*=} ;;
    esac
done
failed=0
bad() { echo "SBX-BENCH-FAIL: $*"; failed=$((failed + 1)); }
step() { case ",$STEPS," in *",$1,"*) return 0 ;; esac; return 1; }

# What the driver negotiated: request size limits and the feature bits
# (virtio spec order), for reading differences between the VMMs.
q=/sys/block/vda/queue
if [ -d $q ]; then
    echo "SBX-BENCH-QUEUE: max_sectors_kb=$(cat $q/max_sectors_kb) max_hw_sectors_kb=$(cat $q/max_hw_sectors_kb)" \
        "max_segments=$(cat $q/max_segments) max_segment_size=$(cat $q/max_segment_size)" \
        "nr_requests=$(cat $q/nr_requests) scheduler=$(cat $q/scheduler)"
fi
for d in /sys/bus/virtio/devices/*; do
    [ -e "$d/device" ] && echo "SBX-BENCH-FEATURES: $(cat "$d/device") $(cat "$d/features")"
done
if step blk; then
    if [ -b /dev/vda ]; then
        timeout 600 sbx-blkbench seqwrite /dev/vda 1024 "$BLK_MIB" || bad "seqwrite"
        timeout 600 sbx-blkbench seqread /dev/vda 1024 "$BLK_MIB" || bad "seqread"
        timeout 600 sbx-blkbench randread /dev/vda 4 "$RAND_SECONDS" || bad "randread"
    else
        bad "blk: no /dev/vda (no virtio-blk device the kernel drives)"
    fi
fi
if step vsock; then
    echo "SBX-BENCH-STEP: vsock-g2h"
    timeout 600 sbx-vsock -r -s "zero:$VSOCK_BYTES" -o null -w 10 connect 2 5002 </dev/null || bad "vsock g2h"
    echo "SBX-BENCH-STEP: vsock-h2g"
    timeout 600 sbx-vsock -n -k -r -s none -o null listen 1236 </dev/null || bad "vsock h2g"
fi
exit "$failed"
