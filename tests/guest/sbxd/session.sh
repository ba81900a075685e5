#!/usr/bin/env bash
# Level-1 side of the sbxd guest test (tests/guest/sbxd.sh runs it through
# tests/nested). Starts the real sbxd (state in level 1's tmpfs, images in
# an images/build-shaped folder) and runs the test's parts in one level-1
# boot, one after another against the same sbxd, so that later parts create
# from the warm template the first create built. A part is
# tests/guest/sbxd/PART.sh, sourced with lib.sh's helpers; it leaves no
# sandbox behind. PARTS (default: every part, lifecycle first) picks some.
# One "ok: ..." or "FAIL: ..." line per check; exit status: failures.
# Usage: session.sh KERNEL ROOTFS_TAR SBXD SBX_VMM AGENTCTL SBX LOGDIR [PART...]
set -uo pipefail
kernel=$1 image_tar=$2 sbxd=$3 vmm=$4 ctl=$5 sbx=$6 logdir=$7
shift 7
here=$(cd "$(dirname "$0")" && pwd)
# A VMM whose guest triple-faults leaves its memory here (tests/lib.sh fail);
# sbxd's VMMs are jailed, each as its own uid, and must be able to create it.
export SBX_VMM_CRASH_DUMP_DIR=$logdir
chmod 1777 "$logdir"
parts=("$@")
if [ ${#parts[@]} -eq 0 ]; then
  parts=(lifecycle)
  for f in "$here"/*.sh; do
    p=$(basename "$f" .sh)
    case $p in lib | session | lifecycle) ;; *) parts+=("$p") ;; esac
  done
fi
# shellcheck source=SCRIPTDIR/../wait_lib.sh
. "$here/../wait_lib.sh"  # wait_until, wait_counter
# shellcheck source=SCRIPTDIR/lib.sh
. "$here/lib.sh"

# Level 1's /tmp is a tmpfs of half its memory. A memory snapshot of a
# guest restored from a file there reads every page, and a read fault on
# a hole of a tmpfs file fills it: a template's 1 GiB memory file becomes
# 1 GiB of tmpfs (on a disk file system a hole stays a hole). Room for that.
mount -o remount,size=75% /tmp 2>/dev/null || true
# Level 1's init mounts no cgroup file system; sbxd puts each VMM in a
# cgroup v2 of its own under /sys/fs/cgroup when that is cgroup2.
if [ -n "${SBX_L1_HEARTBEAT_PID:-}" ] && ! grep -q ' /sys/fs/cgroup cgroup2 ' /proc/mounts; then
  mount -t cgroup2 none /sys/fs/cgroup || echo "SBXD-CGROUP: cannot mount cgroup2"
fi
# In the nested harness, sbxd and every VMM it starts run on level 1's
# CPU 0 (lib.sh start_sbxd): a KVM vCPU thread that moves between level-1
# CPUs can come back from a #VMEXIT with the other CPU's %gs under TCG's
# emulated SVM (tests/harness/README.md, "Level 1 itself"); pinned, none
# moves. Hardware KVM runs unpinned.
sbxd_cpus=
[ -n "${SBX_L1_HEARTBEAT_PID:-}" ] && sbxd_cpus=0
echo "SBXD-CPUS: sbxd and its VMMs on ${sbxd_cpus:-every CPU}"
w=$(mktemp -d /tmp/sbxd-session.XXXXXX)
state=$w/state sock=$w/sbxd.sock
sbxd_pid=
trap 'kill -9 $sbxd_pid 2>/dev/null; pkill -9 -f -- "--snapshot-dir $state/" 2>/dev/null; sbxd_internet_down; rm -rf "$w"' EXIT

t_session=$EPOCHREALTIME
sbxd_images "$kernel" "$image_tar"
sbxd_internet "$logdir"  # its servers' logs stay with the test's
start_sbxd
echo "SBXD-DRIVER: $(grep -o 'sbx-vmm .*adopted' "$logdir/sbxd.1.log")"
echo "SBXD-TIME: session set-up (images, internet, sbxd) $(elapsed "$t_session") s"
# A part that ended in an earlier level-1 attempt of this test (run_nested
# runs the session again after a level-1 panic, wedge or a triple fault
# from below) is not run again: its check lines, kept in $logdir/parts-done
# when it ended, are printed again and its failures count. Parts are
# independent (each makes and deletes its own sandboxes), so a retry costs
# the part level 1 died in and those after it, not the whole session.
done_dir=$logdir/parts-done
mkdir -p "$done_dir"
for part in "${parts[@]}"; do
  [ -f "$here/$part.sh" ] || { bad "no part $part"; continue; }
  if [ -f "$done_dir/$part" ]; then
    echo "SBXD-PART: $part (ended in an earlier level-1 attempt; its lines again)"
    cat "$done_dir/$part"
    failures=$((failures + $(grep -c '^FAIL: ' "$done_dir/$part")))
    continue
  fi
  echo "SBXD-PART: $part"
  t_part=$(now) check_clock=${EPOCHREALTIME//[!0-9]/}
  part_record=$done_dir/.$part.running
  : >"$part_record"
  # shellcheck source=/dev/null
  . "$here/$part.sh"
  part_record=
  echo "SBXD-TIME: part $part $(elapsed "$t_part") s"
  echo "SBXD-DF: after $part: $(df -m /tmp | awk 'NR == 2 { print $3 " MiB used of " $2 " in /tmp" }')," \
    "$(free -m | awk '/^Mem:/ { print $7 " MiB of " $2 " available" }')"
  dmesg 2>/dev/null | grep -E "Out of memory|oom-kill|Killed process" | tail -n 3 | sed 's/^/SBXD-OOM: /'

  # A guest triple-faulted (sbx-vmm dumped its memory): the run is judged,
  # and perhaps run again, on that dump (tests/lib.sh run_nested), so the
  # parts after this one would only make a retry later.
  wait_crash_dumps "$logdir"
  if dumps=$(compgen -G "$logdir/sbx-vmm-*.mem"); then
    bad "a guest triple-faulted during part $part (${dumps//$'\n'/ }); the session ends here"
    break
  fi
  mv "$done_dir/.$part.running" "$done_dir/$part"
  # Test hook: the first attempt panics level 1 after this part (to show
  # the retry above; tests/guest/README.md).
  if [ "${SBX_TEST_PANIC_AFTER:-}" = "$part" ] && [ ! -e "$done_dir/.panicked" ]; then
    touch "$done_dir/.panicked"; sync
    echo c >/proc/sysrq-trigger
  fi
done
t=$(now)
kill "$sbxd_pid"; wait "$sbxd_pid"
check "sbxd exits 0 on SIGTERM" 0 "$?"
echo "SBXD-TIME: sbxd's SIGTERM $(elapsed "$t") s; the session $(elapsed "$t_session") s"
echo "SBXD-SESSION-FAILURES: $failures"
exit "$failures"
