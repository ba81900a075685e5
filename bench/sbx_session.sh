#!/usr/bin/env bash
# Level-1 side of bench/sbx (run through tests/nested): starts sbxd exactly
# as the sbxd guest test does (tests/guest/sbxd/lib.sh: the same images
# cache, flags and health wait), has bench/sbx_runner.py measure through
# sbx, then deletes every sandbox and stops sbxd.
# With MODE "jail-compare" (bench/sbx --jail-compare): RUNS rounds, each
# one run of the life cycle under an sbxd with --jail on and one with
# --jail off (each on its own state, so each builds its warm template
# once), in alternating order; bench/sbx_jail.py sums them up.
# Usage: sbx_session.sh KERNEL ROOTFS_TAR SBXD SBX_VMM SBX LOGDIR JSON RUNS [MODE]
set -uo pipefail
kernel=$1 image_tar=$2 sbxd=$3 vmm=$4 sbx=$5 logdir=$6 json=$7 runs=$8 mode=${9:-}
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=SCRIPTDIR/../tests/guest/sbxd/lib.sh
. "$here/../tests/guest/sbxd/lib.sh"

w=$(mktemp -d /tmp/bench-sbx.XXXXXX)
state=$w/state sock=$w/sbxd.sock
sbxd_pid=
# The runner deletes its sandboxes; this is for a runner that died early.
# sbxd is stopped by its pid (a VMM it leaves dies with level 1).
# shellcheck disable=SC2317  # called by the trap
cleanup() {
  if [ -n "$sbxd_pid" ]; then
    timeout 600 env SBX_HOST="unix:$sock" "$sbx" rm --label bench=sbx >/dev/null 2>&1
    kill "$sbxd_pid" 2>/dev/null && timeout 60 tail --pid="$sbxd_pid" -f /dev/null
  fi
  rm -rf "$w"
}
trap cleanup EXIT

sbxd_images "$kernel" "$image_tar"
image=$(ls "$w"/images/rootfs-slim/r/*.ext4)
if [ "$mode" = jail-compare ]; then
  status=0
  for round in $(seq "$runs"); do
    order="on off"
    [ $((round % 2)) -eq 0 ] && order="off on"
    for jail in $order; do
      state=$w/state-$jail sock=$w/sbxd-$jail.sock
      echo "BENCH-SBX: round $round, sbxd --jail $jail"
      start_sbxd --jail "$jail"
      SBX_HOST=unix:$sock /usr/bin/python3 "$here/sbx_runner.py" --sbx "$sbx" --state "$state" \
        --image "$image" --kernel "$kernel" --sbx-vmm "$vmm" --logdir "$logdir" --runs 1 \
        --lifecycle-only --json "$logdir/jail-$jail-$round.json" || status=1
      kill "$sbxd_pid" 2>/dev/null && timeout 60 tail --pid="$sbxd_pid" -f /dev/null
      sbxd_pid=
    done
  done
  /usr/bin/python3 "$here/sbx_jail.py" "$logdir" "$json" || status=1
  exit $status
fi
start_sbxd
SBX_HOST=unix:$sock /usr/bin/python3 "$here/sbx_runner.py" --sbx "$sbx" --state "$state" \
  --image "$image" --kernel "$kernel" --sbx-vmm "$vmm" --logdir "$logdir" --json "$json" --runs "$runs"
exit $?
