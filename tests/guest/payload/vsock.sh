#!/bin/sh
# Guest side of the virtio-vsock test (/sbx-run; the same for every VMM: the
# host is CID 2 both for QEMU's vhost-vsock and for the hybrid Unix-socket
# convention of sbx-vmm). In order, each step after the previous one:
#  1. host-initiated: listen on 1234, send a line; the host sends a line,
#     reads ours and closes; report what the host sent;
#  2. guest-initiated: connect to the host's port 5000, send a line; the host
#     reads it, answers a line and closes; report the answer;
#  3. guest -> host: BIG_BYTES of the test stream (seed SEED) to port 5001;
#     the host hashes what arrives;
#  4. host -> guest: listen on 1235; the host sends the test stream with seed
#     SEED+1 and closes; report its sha256.
# No step depends on half-close (-k: the guest never shuts down only its
# sending side while it still expects data): the hybrid convention turns a
# host-side EOF into a full shutdown. The listener's "SBX-VSOCK-LISTENING:
# PORT" line (sbx-vsock -n) tells the host when to connect.
# The exit status counts the failed steps.
BIG_BYTES=104857600 SEED=7
# shellcheck disable=SC1091 # written by the host side, when present
[ -f /etc/sbx-test.env ] && . /etc/sbx-test.env
failed=0
bad() { echo "SBX-VSOCK-FAIL: $*"; failed=$((failed + 1)); }

echo "SBX-VIRTIO-IDS: $(cat /sys/bus/virtio/devices/*/device 2>/dev/null | tr '\n' ' ')"
echo "SBX-VSOCK-CID: $(sbx-vsock cid 2>&1)"

echo "hello-from-guest-listener" >/tmp/reply
if timeout 120 sbx-vsock -n -k listen 1234 </tmp/reply >/tmp/h2g; then
    echo "SBX-VSOCK-H2G-MSG: $(cat /tmp/h2g)"
else
    bad "listen 1234"
fi

if reply=$(echo "hello-from-guest-connect" | timeout 120 sbx-vsock -k -w 60 connect 2 5000); then
    echo "SBX-VSOCK-G2H-REPLY: $reply"
else
    bad "connect 2 5000"
fi

if timeout 600 sbx-vsock -r -s "gen:$BIG_BYTES:$SEED" -o null connect 2 5001 </dev/null; then
    echo "SBX-VSOCK-G2H-BIG: sent"
else
    bad "sending $BIG_BYTES bytes to 2:5001"
fi

# sha256sum reads a pipe; the listener's status comes back through a file.
sum=$( { timeout 600 sbx-vsock -n -k -r -s none listen 1235 </dev/null; echo $? >/tmp/st; } |
    sha256sum | cut -d' ' -f1)
if [ "$(cat /tmp/st)" = 0 ]; then
    echo "SBX-VSOCK-H2G-SHA256: $sum"
else
    bad "receiving on 1235"
fi
exit "$failed"
