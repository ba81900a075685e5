#!/usr/bin/env bash
# Guest test: virtio-rng. The guest's hw_random core uses the virtio device
# and /dev/hwrng gives 64 bytes that are not all zero.
# Usage: virtio_rng.sh SOURCE_ROOT BUILD_ROOT sbx|qemu
set -euo pipefail
src=$1 build=$2 vmm=$3
# shellcheck source=SCRIPTDIR/../lib.sh
. "$src/tests/lib.sh"
# shellcheck source=SCRIPTDIR/virtio_lib.sh
. "$src/tests/guest/virtio_lib.sh"

virtio_prepare virtio-rng "$vmm"
virtio_initrd rng.sh
virtio_run "$vmm" --rng
virtio_expect_clean_run "virtio-rng ($vmm)"
expect_contains "$log" "SBX-RNG-CURRENT: virtio_rng" "hw_random uses the virtio device"
expect_contains "$log" "SBX-RNG: nonzero" "/dev/hwrng gave 64 bytes, not all zero"
