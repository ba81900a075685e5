#!/usr/bin/env bash
# Guest test: virtio-net on a tap in level 1 (sbxtap0, 172.31.0.1/24; the
# guest is 172.31.0.2 with MAC 52:54:00:12:34:56): the guest sees its MAC,
# pings the host, and TCP works both ways (guest busybox nc to a host
# listener, host to a guest nc listener), each side checking the other's line.
# Usage: virtio_net.sh SOURCE_ROOT BUILD_ROOT sbx|qemu
set -euo pipefail
src=$1 build=$2 vmm=$3
# shellcheck source=SCRIPTDIR/../lib.sh
. "$src/tests/lib.sh"
# shellcheck source=SCRIPTDIR/virtio_lib.sh
. "$src/tests/guest/virtio_lib.sh"

virtio_prepare virtio-net "$vmm"
virtio_initrd net.sh
virtio_run "$vmm" --scenario net
virtio_expect_clean_run "virtio-net ($vmm)"
expect_contains "$log" "SBX-NET-MAC: 52:54:00:12:34:56" "eth0 has the MAC given to the VMM"
expect_contains "$log" "SBX-NET-PING: ok" "the guest pings the host"
expect_contains "$log" "HOST-NET-FROM-GUEST: hello-from-guest-tcp" "the host received the guest's TCP line"
expect_contains "$log" "SBX-NET-TCP-REPLY: hello-from-host-tcp" "the guest received the host's TCP answer"
expect_contains "$log" "SBX-NET-TCP-FROM-HOST: hello-from-host-tcp-connect" "the guest's listener received the host's line"
expect_contains "$log" "HOST-NET-REPLY-FROM-GUEST: hello-from-guest-tcp-listener" "the host received the guest listener's line"
