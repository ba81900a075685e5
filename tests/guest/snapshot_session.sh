#!/usr/bin/env bash
# Level-1 side of the snapshot test (snapshot.sh runs it through
# tests/nested). Boots the minimal image with the agent, starts a counting
# process and writes a file, snapshots the VM through the control socket,
# stops it, restores it (MODE: eager or lazy from a compressed snapshot,
# private from a raw one mapped copy-on-write) and checks that the same process
# (same PID) counts on from where it was, the file is there, the agent
# answers and the guest's wall clock is the host's (eager: the snapshot
# waits 20 s on disk first). Restores that lack a saved device's host side,
# break a limit or change the machine are refused and leave the file alone.
# One "ok: ..." or "FAIL: ..." line per check; exit status: the number of
# failed checks.
# Usage: snapshot_session.sh MODE KERNEL INITRAMFS SBX_VMM AGENTCTL LOGDIR
set -uo pipefail
mode=$1 kernel=$2 image=$3 vmm=$4 ctl=$5 logdir=$6
here=$(cd "$(dirname "$0")" && pwd)
# A VMM whose guest triple-faults leaves its memory here (tests/lib.sh fail).
export SBX_VMM_CRASH_DUMP_DIR=$logdir
failures=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; failures=$((failures + 1)); }
check() { if [ "$2" = "$3" ]; then ok "$1"; else bad "$1: expected '$2', got '$(printf %s "$3" | head -c 400)'"; fi; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; }
control() { /usr/bin/python3 "$here/vmm_control.py" "$control_sock" "$1"; }
json_field() { sed -n "s/.*\"$1\":\\([0-9]*\\).*/\\1/p"; }
# shellcheck source=SCRIPTDIR/wait_lib.sh
. "$here/wait_lib.sh"  # wait_until, wait_counter, wait_exit
# shellcheck source=SCRIPTDIR/clock_lib.sh
. "$here/clock_lib.sh"  # clock_check
# counter : the counting process's last value (may be empty: the shell's
# `echo $i >/tmp/counter` truncates the file before it writes).
counter() { "$ctl" exec -- cat /tmp/counter; }
# counter_pid : sets $pid to the counting process's PID from `status ID`.
counter_pid() { pid=$("$ctl" status "$id" 2>/dev/null | json_field pid); [ -n "$pid" ]; }

w=$(mktemp -d /tmp/snapshot-session.XXXXXX)
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
uds=$w/v.sock control_sock=$w/control.sock snap=$w/vm.snap
export SBX_AGENT_UDS=$uds SBX_AGENT_TOKEN=$token
trap 'kill -9 ${vmm_pid:-} ${restored_pid:-} 2>/dev/null; rm -rf "$w"' EXIT
case "$mode" in
  eager | lazy) snap_mode=compressed ;;
  private) snap_mode=raw ;;
  *) echo "FAIL: unknown mode $mode"; exit 1 ;;
esac

cmdline="console=ttyS0 reboot=k panic=1 i8042.noaux i8042.nomux i8042.nopnp i8042.dumbkbd quiet sbx.token=$token"
"$vmm" --kernel "$kernel" --initrd "$image" --memory 256 --cmdline "$cmdline" --vsock "cid=3,uds=$uds" \
  --control "$control_sock" --snapshot-dir "$w" --console "file:$logdir/$mode-boot-console.log" </dev/null \
  >"$logdir/$mode-boot-vmm.out" 2>&1 &
vmm_pid=$!
if "$ctl" wait --timeout 600 >/dev/null; then
  ok "the booted guest's agent answers"
else
  echo "FAIL: the agent never answered; console tail:"; tail -n 30 "$logdir/$mode-boot-console.log"; exit 1
fi

# A process counting in its own memory, reporting each value to a file on
# the guest's tmpfs (guest RAM as well).
id=$("$ctl" exec --detach --shell 'i=0; while :; do i=$((i+1)); echo $i >/tmp/counter; sleep 0.05; done' 2>/dev/null)
[ -n "$id" ] || { echo "FAIL: exec --detach of the counter printed no id"; exit 1; }
printf 'before-%s\n' "$token" >"$w/before"
"$ctl" put "$w/before" /tmp/before 2>/dev/null || bad "put of /tmp/before"
# Until the counter has written a value (not a fixed sleep: under the
# harness the process may take seconds to start).
pid=; wait_until 120 "the PID of the counting process $id" counter_pid; pid_before=$pid
wait_counter count_before 120 0 counter
[ -n "$pid_before" ] && [ "${count_before:-0}" -gt 0 ] && ok "counter process $pid_before at $count_before" \
  || { echo "FAIL: the counter did not start (pid '$pid_before', count '$count_before')"; exit 1; }

# The booted guest's clock, to compare the restored one's with.
clock_check "$mode booted guest" "$ctl"

t=$(now)
# A lazy restore loads the working set first: record one (the pages the
# guest writes in the 300 ms before the pause).
ws=0; [ "$mode" = lazy ] && ws=300
reply=$(control "{\"op\":\"snapshot\",\"path\":\"$snap\",\"mode\":\"$snap_mode\",\"working_set_ms\":$ws}"); st=$?
check "snapshot ($snap_mode) through the control socket" 0 "$st"
if [ "$mode" = lazy ]; then
  ws_bytes=$(printf %s "$reply" | sed -n 's/.*"working_set_bytes":\([0-9]*\).*/\1/p')
  [ "${ws_bytes:-0}" -gt 0 ] && ok "a working set was recorded ($ws_bytes bytes written in 300 ms)" \
    || bad "no working set recorded: $reply"
fi
saved_at=$(now)
echo "SNAPSHOT: $mode $(elapsed "$t") s, $(du -k "$snap" 2>/dev/null | cut -f1) KiB on disk: $reply"
check "the VM is paused after the snapshot" '"paused"' "$(control '{"op":"status"}' | grep -o '"paused"')"
control '{"op":"stop"}' >/dev/null
wait_exit "$vmm_pid" 120
check "the snapshotted sbx-vmm exits 0 on stop" 0 "${st:-still running}"

# Refusals leave the file alone and start nothing.
sum=$(sha256sum <"$snap")
refused() {  # DESCRIPTION CODE FLAGS...: the restore exits 1 with CODE
  local what=$1 code=$2
  shift 2
  # Bounded: a restore that is wrongly accepted runs its guest (status 124).
  timeout 60 "$vmm" --restore "$snap" --console none "$@" >"$w/refused.out" 2>&1; st=$?
  check "a restore $what is refused (status 1)" 1 "$st"
  grep -q "$code" "$w/refused.out" && ok "... as $code" || bad "... message: $(cat "$w/refused.out")"
}
refused "with another memory size" config_mismatch --memory 512 --vsock "cid=3,uds=$uds"
if [ "$mode" = eager ]; then
  refused "without a host side for the saved vsock device" missing_host_device
  grep -q "virtio-vsock" "$w/refused.out" && ok "... naming the device" || bad "... message: $(cat "$w/refused.out")"
  refused "of 256 MiB under --max-memory 128" limit_exceeded --max-memory 128 --vsock "cid=3,uds=$uds"
  refused "with a disk the snapshot does not have" config_mismatch --vsock "cid=3,uds=$uds" --disk "$w/before"
fi
check "... and the snapshot is unchanged" "$sum" "$(sha256sum <"$snap")"
# The clock check needs time on disk that a guest would miss: 20 s (a
# deliberate duration, not a wait for an event) since the snapshot, in one
# mode; the clock code is the same for all three, each checked below.
if [ "$mode" = eager ]; then
  rest=$(awk -v a="$saved_at" -v b="$(now)" 'BEGIN { r = 20 - (b - a); print (r > 0) ? r : 0 }')
  sleep "$rest"
fi
echo "ON-DISK: $mode $(elapsed "$saved_at") s between the snapshot and the restore"

t=$(now)
"$vmm" --restore "$snap" --restore-mode "$mode" --vsock "cid=3,uds=$uds" --control "$control_sock" \
  --console "file:$logdir/$mode-restored-console.log" </dev/null >"$logdir/$mode-restored-vmm.out" 2>&1 &
restored_pid=$!
if health=$("$ctl" wait --timeout 120); then
  ok "the restored guest's agent answers ($mode)"
  echo "RESTORE-TO-AGENT: $mode $(elapsed "$t") s"
else
  bad "the restored guest's agent never answered; vmm output:"; tail -n 20 "$logdir/$mode-restored-vmm.out"
fi
# The first value read after the restore, then one past it: it counts on.
wait_counter count_after 120 0 counter
wait_counter count_later 120 "${count_after:-0}" counter
pid=; counter_pid; pid_after=$pid
check "the counting process has the same PID" "$pid_before" "$pid_after"
if [ "${count_after:-0}" -ge "$count_before" ] && [ "${count_later:-0}" -gt "${count_after:-0}" ]; then
  ok "it counts on from where it was: $count_before before, $count_after at restore, then $count_later"
else
  bad "the counter: $count_before before, '$count_after' at restore, then '$count_later' (must be >= $count_before, then move on)"
fi
check "the file written before the snapshot is there" "before-$token" "$("$ctl" exec -- cat /tmp/before)"
clock_check "$mode restore" "$ctl"
grep -h "guest clock advanced" "$logdir/$mode-restored-vmm.out" | sed 's/^/VMM: /'
echo "GUEST-CLOCKSOURCE: $("$ctl" exec -- cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null)"

"$ctl" exec --timeout-ms 20000 -- reboot >/dev/null 2>&1
wait_exit "$restored_pid" 120
check "the restored sbx-vmm exits 0 after the guest's reboot" 0 "${st:-still running}"
[ -z "$st" ] && { kill -9 "$restored_pid"; wait "$restored_pid"; }
echo "SNAPSHOT-SESSION-FAILURES: $mode $failures"
exit "$failures"
