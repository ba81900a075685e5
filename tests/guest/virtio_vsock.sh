#!/usr/bin/env bash
# Guest test: virtio-vsock (guest CID 3). Host-initiated and guest-initiated
# connections, each with a line in both directions, then 100 MiB guest ->
# host and 100 MiB host -> guest, each checked by sha256 against the test
# stream (sbx-vsock gen) computed here. For sbx-vmm the host side speaks the
# hybrid Unix-socket convention, for QEMU AF_VSOCK (vhost-vsock).
# Usage: virtio_vsock.sh SOURCE_ROOT BUILD_ROOT sbx|qemu [BYTES]
set -euo pipefail
src=$1 build=$2 vmm=$3 big=${4:-$((100 << 20))}
# shellcheck source=SCRIPTDIR/../lib.sh
. "$src/tests/lib.sh"
# shellcheck source=SCRIPTDIR/virtio_lib.sh
. "$src/tests/guest/virtio_lib.sh"

seed=7
virtio_prepare virtio-vsock "$vmm"
echo "BIG_BYTES=$big SEED=$seed" >"$work/env"
virtio_initrd vsock.sh "$work/env:/etc/sbx-test.env"
g2h=$("$tools/sbx-vsock" gen "$big" "$seed" | sha256sum | cut -d' ' -f1)
h2g=$("$tools/sbx-vsock" gen "$big" "$((seed + 1))" | sha256sum | cut -d' ' -f1)

virtio_run "$vmm" --scenario vsock --big-bytes "$big" --seed "$seed"
virtio_expect_clean_run "virtio-vsock ($vmm)"
expect_contains "$log" "SBX-VSOCK-CID: 3" "the guest's CID is 3"
expect_contains "$log" "SBX-VSOCK-H2G-MSG: hello-from-host-connect" "host-initiated: the guest received the host's line"
expect_contains "$log" "HOST-VSOCK-H2G-REPLY: hello-from-guest-listener" "host-initiated: the host received the guest's line"
expect_contains "$log" "HOST-VSOCK-G2H-MSG: hello-from-guest-connect" "guest-initiated: the host received the guest's line"
expect_contains "$log" "SBX-VSOCK-G2H-REPLY: hello-from-host-listener" "guest-initiated: the guest received the host's answer"
expect_contains "$log" "HOST-VSOCK-G2H-BIG-SHA256: $g2h bytes=$big " "$big bytes guest -> host intact"
expect_contains "$log" "SBX-VSOCK-H2G-SHA256: $h2g" "$big bytes host -> guest intact"
printf '%s\n' "$log" | grep -E 'HOST-VSOCK-(G2H-BIG-SHA256|H2G-BIG)|SBX-VSOCK-REPORT' || true
