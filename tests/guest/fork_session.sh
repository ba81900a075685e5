#!/usr/bin/env bash
# Level-1 side of the fork test (fork.sh runs it through tests/nested).
# Boots the minimal image with the agent, a vsock device and a tap, starts
# a counting process, takes a raw snapshot and starts 4 VMs from it, each
# mapping the snapshot copy-on-write with its own vsock CID, tap and MAC.
# Each fork gets a new identity through the agent (generation, RNG seed,
# MAC) and must report it; the forks' kernel RNGs must differ, their
# counters keep the PID and diverge, and their memory is shared (the sum
# of the VMMs' PSS is well under the sum of their RSS).
# One "ok: ..." or "FAIL: ..." line per check; exit status: failures.
# Usage: fork_session.sh KERNEL INITRAMFS SBX_VMM AGENTCTL LOGDIR
set -uo pipefail
kernel=$1 image=$2 vmm=$3 ctl=$4 logdir=$5
here=$(cd "$(dirname "$0")" && pwd)
PATH=$PATH:/usr/sbin:/sbin
forks=4
failures=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; failures=$((failures + 1)); }
check() { if [ "$2" = "$3" ]; then ok "$1"; else bad "$1: expected '$2', got '$(printf %s "$3" | head -c 400)'"; fi; }
control() { /usr/bin/python3 "$here/vmm_control.py" "$1" "$2"; }
json_field() { sed -n "s/.*\"$1\":\"\\{0,1\\}\\([^,\"}]*\\).*/\\1/p"; }
agent() { local i=$1; shift; SBX_AGENT_UDS=$w/v$i.sock "$ctl" "$@"; }
smaps_kib() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/smaps_rollup"; }

w=$(mktemp -d /tmp/fork-session.XXXXXX)
export SBX_AGENT_TOKEN
SBX_AGENT_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
pids=()
trap 'kill -9 "${pids[@]}" 2>/dev/null; rm -rf "$w"' EXIT
cmdline="console=ttyS0 reboot=k panic=1 pci=off i8042.noaux i8042.nomux i8042.nopnp i8042.dumbkbd quiet sbx.token=$SBX_AGENT_TOKEN"

"$vmm" --kernel "$kernel" --initrd "$image" --memory 256 --cmdline "$cmdline" --vsock "cid=3,uds=$w/v0.sock" \
  --net tap=sbxfork0,mac=02:00:00:00:00:10 --control "$w/c0.sock" --console "file:$logdir/origin-console.log" \
  </dev/null >"$logdir/origin-vmm.out" 2>&1 &
origin=$!
pids+=("$origin")
agent 0 wait --timeout 600 >/dev/null || { echo "FAIL: the agent never answered"; tail -n 30 "$logdir/origin-console.log"; exit 1; }
id=$(agent 0 exec --detach --shell 'i=0; while :; do i=$((i+1)); echo $i >/tmp/counter; sleep 0.05; done' 2>/dev/null)
sleep 1
pid_before=$(agent 0 status "$id" | json_field pid)
count_before=$(agent 0 exec -- cat /tmp/counter)
control "$w/c0.sock" "{\"op\":\"snapshot\",\"path\":\"$w/vm.snap\",\"mode\":\"raw\"}" >/dev/null \
  && ok "raw snapshot of the origin (counter process $pid_before at $count_before)" || bad "snapshot failed"
control "$w/c0.sock" '{"op":"stop"}' >/dev/null
wait "$origin"

for i in $(seq 1 $forks); do
  "$vmm" --restore "$w/vm.snap" --restore-mode private --vsock "cid=$((10 + i)),uds=$w/v$i.sock" \
    --net "tap=sbxfork$i,mac=02:00:00:00:00:1$i" --control "$w/c$i.sock" \
    --console "file:$logdir/fork$i-console.log" </dev/null >"$logdir/fork$i-vmm.out" 2>&1 &
  pids+=($!)
done
for i in $(seq 1 $forks); do
  agent "$i" wait --timeout 120 >/dev/null || bad "fork $i: the agent never answered"
  reply=$(agent "$i" identity --generation "$i" --seed-random --mac "02:00:00:00:00:1$i")
  check "fork $i reports its new CID" "$((10 + i))" "$(printf %s "$reply" | json_field cid)"
  check "fork $i reports generation $i" "$i" "$(printf %s "$reply" | json_field generation)"
  check "fork $i was reseeded" true "$(printf %s "$reply" | json_field reseeded)"
  check "fork $i's virtio-net card has its new MAC" "02:00:00:00:00:1$i" "$(agent "$i" exec -- cat /sys/class/net/eth0/address)"
  check "fork $i's counting process has the origin's PID" "$pid_before" "$(agent "$i" status "$id" | json_field pid)"
done

# Each fork's kernel RNG was reseeded with its own seed: no two forks
# produce the same bytes, as they would from the same saved CRNG state.
randoms=$(for i in $(seq 1 $forks); do agent "$i" exec --shell 'head -c 16 /dev/urandom | od -An -tx1 | tr -d " \n"'; echo; done)
check "4 forks give 4 different /dev/urandom outputs" "$forks" "$(printf '%s\n' "$randoms" | sort -u | grep -c .)"

# Counters diverge: fork 1 is paused for 2 s while the others count on.
control "$w/c1.sock" '{"op":"pause"}' >/dev/null || bad "pause of fork 1"
sleep 2
control "$w/c1.sock" '{"op":"resume"}' >/dev/null || bad "resume of fork 1"
counts=$(for i in $(seq 1 $forks); do agent "$i" exec -- cat /tmp/counter; done | tr '\n' ' ')
read -r -a c <<<"$counts"
if [ "${#c[@]}" -eq "$forks" ] && [ "${c[0]}" -ge "$count_before" ] && [ "${c[0]}" -lt "${c[1]}" ] \
   && [ "${c[0]}" -lt "${c[2]}" ] && [ "${c[0]}" -lt "${c[3]}" ]; then
  ok "the counters diverge from $count_before: $counts(fork 1 was paused for 2 s)"
else
  bad "the counters: $counts(from $count_before; fork 1, paused 2 s, should be lowest)"
fi

# Shared memory: pages read from the snapshot are the same page-cache pages in every fork.
rss=0 pss=0
for i in $(seq 1 $forks); do
  rss=$((rss + $(smaps_kib "${pids[$i]}" Rss))); pss=$((pss + $(smaps_kib "${pids[$i]}" Pss)))
done
if [ "$pss" -gt 0 ] && [ $((pss * 10)) -lt $((rss * 9)) ]; then
  ok "the forks share memory: PSS $((pss / 1024)) MiB of RSS $((rss / 1024)) MiB in all"
else
  bad "the forks do not share memory: PSS $pss KiB, RSS $rss KiB"
fi
echo "FORK-MEMORY: rss_kib=$rss pss_kib=$pss"

for i in $(seq 1 $forks); do
  agent "$i" exec --timeout-ms 20000 -- reboot >/dev/null 2>&1
done
for i in $(seq 1 $forks); do
  st=; for _ in $(seq 1 240); do
    if ! kill -0 "${pids[$i]}" 2>/dev/null; then wait "${pids[$i]}"; st=$?; break; fi; sleep 0.5
  done
  check "fork $i's sbx-vmm exits 0 after its reboot" 0 "${st:-still running}"
done
echo "FORK-SESSION-FAILURES: $failures"
exit "$failures"
