#!/usr/bin/env bash
# Level-1 side of the fork test (fork.sh runs it through tests/nested).
# Boots the minimal image with the agent, a vsock device and a tap, starts
# a counting process, takes a raw snapshot and starts 4 VMs from it, each
# mapping the snapshot copy-on-write with its own vsock CID, tap and MAC.
# Each fork gets a new identity through the agent (generation, RNG seed,
# MAC, its own token) and must report it; the origin's token must then be
# refused by every fork; the forks' kernel RNGs must differ, their
# counters keep the PID and diverge, their wall clocks are the host's, and
# their memory is shared (the sum of the VMMs' PSS is well under the sum of
# their RSS).
# One "ok: ..." or "FAIL: ..." line per check; exit status: failures.
# Usage: fork_session.sh KERNEL INITRAMFS SBX_VMM AGENTCTL LOGDIR
set -uo pipefail
kernel=$1 image=$2 vmm=$3 ctl=$4 logdir=$5
here=$(cd "$(dirname "$0")" && pwd)
# A VMM whose guest triple-faults leaves its memory here (tests/lib.sh fail).
export SBX_VMM_CRASH_DUMP_DIR=$logdir
PATH=$PATH:/usr/sbin:/sbin
forks=4
failures=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; failures=$((failures + 1)); }
check() { if [ "$2" = "$3" ]; then ok "$1"; else bad "$1: expected '$2', got '$(printf %s "$3" | head -c 400)'"; fi; }
control() { /usr/bin/python3 "$here/vmm_control.py" "$1" "$2"; }
json_field() { sed -n "s/.*\"$1\":\"\\{0,1\\}\\([^,\"}]*\\).*/\\1/p"; }
# agent I ARGS: sbx-agentctl on VM I, with its own token once it has one.
agent() { local i=$1; shift; SBX_AGENT_UDS=$w/v$i.sock SBX_AGENT_TOKEN=${tokens[$i]:-$SBX_AGENT_TOKEN} "$ctl" "$@"; }
# new_token I TOKEN: the identity op's token field on VM I (sbx-agentctl
# has no option for it yet); prints the reply's token_replaced.
new_token() {
  /usr/bin/python3 - "$here" "$w/v$1.sock" "${tokens[$1]:-$SBX_AGENT_TOKEN}" "$2" <<'EOF'
import socket, sys
sys.path.insert(0, sys.argv[1])
from agent_frames import recv_message, send_frame
uds, token, new = sys.argv[2:5]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(600)
s.connect(uds)
s.sendall(b"CONNECT 52\n")
line = b""
while not line.endswith(b"\n") and len(line) < 64:
    c = s.recv(1)
    if not c:
        break
    line += c
if not line.startswith(b"OK "):
    sys.exit(f"CONNECT 52 answered {line!r}")
send_frame(s, {"type": "hello", "version": 1, "token": token})
if recv_message(s).get("type") != "hello":
    sys.exit("hello refused")
send_frame(s, {"type": "request", "op": "identity", "token": new})
print(str(recv_message(s).get("token_replaced")).lower())
EOF
}
smaps_kib() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/smaps_rollup"; }
# shellcheck source=SCRIPTDIR/wait_lib.sh
. "$here/wait_lib.sh"  # wait_until, wait_counter, wait_exit
# shellcheck source=SCRIPTDIR/clock_lib.sh
. "$here/clock_lib.sh"  # clock_check
# counter_of I : VM I's counter (may be empty: `echo $i >/tmp/counter`
# truncates the file before it writes).
counter_of() { agent "$1" exec -- cat /tmp/counter; }
# counter_pid I : sets $pid to the counting process's PID in VM I.
counter_pid() { pid=$(agent "$1" status "$id" 2>/dev/null | json_field pid); [ -n "$pid" ]; }

w=$(mktemp -d /tmp/fork-session.XXXXXX)
export SBX_AGENT_TOKEN
SBX_AGENT_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
pids=()
tokens=()
# A fork that triple-faulted left a dump: keep the snapshot it was restored
# from beside it (tests/lib.sh compares the dump's page tables with it).
keep_snapshot() { if compgen -G "$logdir/sbx-vmm-*.mem" >/dev/null; then mv "$w/vm.snap" "$logdir/" 2>/dev/null; fi; }
trap 'kill -9 "${pids[@]}" 2>/dev/null; keep_snapshot; rm -rf "$w"' EXIT
# In the nested harness every VMM runs on level 1's CPU 0, as the sbxd
# test's do (sbxd/session.sh: a vCPU thread that moves between level-1
# CPUs can come back from #VMEXIT with the other CPU's %gs; here a level-1
# panic "TASK stack guard page was hit" on 2026-12-03). Hardware KVM: any.
vmm_cpus=
[ -n "${SBX_L1_HEARTBEAT_PID:-}" ] && vmm_cpus=0
cmdline="console=ttyS0 reboot=k panic=1 i8042.noaux i8042.nomux i8042.nopnp i8042.dumbkbd quiet sbx.token=$SBX_AGENT_TOKEN"

${vmm_cpus:+taskset -c "$vmm_cpus"} "$vmm" --kernel "$kernel" --initrd "$image" --memory 256 --cmdline "$cmdline" --vsock "cid=3,uds=$w/v0.sock" \
  --net tap=sbxfork0,mac=02:00:00:00:00:10 --control "$w/c0.sock" --snapshot-dir "$w" \
  --console "file:$logdir/origin-console.log" \
  </dev/null >"$logdir/origin-vmm.out" 2>&1 &
origin=$!
pids+=("$origin")
agent 0 wait --timeout 600 >/dev/null || { echo "FAIL: the agent never answered"; tail -n 30 "$logdir/origin-console.log"; exit 1; }
id=$(agent 0 exec --detach --shell 'i=0; while :; do i=$((i+1)); echo $i >/tmp/counter; sleep 0.05; done' 2>/dev/null)
[ -n "$id" ] || { echo "FAIL: exec --detach of the counter printed no id"; exit 1; }
# Until the counter has written a value (not a fixed sleep: under the
# harness the process may take seconds to start).
pid=; wait_until 120 "the PID of the counting process $id" counter_pid 0; pid_before=$pid
wait_counter count_before 120 0 counter_of 0
[ -n "$pid_before" ] && [ "${count_before:-0}" -gt 0 ] \
  || { echo "FAIL: the counter did not start (pid '$pid_before', count '$count_before')"; exit 1; }
control "$w/c0.sock" "{\"op\":\"snapshot\",\"path\":\"$w/vm.snap\",\"mode\":\"raw\"}" >/dev/null \
  && ok "raw snapshot of the origin (counter process $pid_before at $count_before)" || bad "snapshot failed"
control "$w/c0.sock" '{"op":"stop"}' >/dev/null
wait "$origin"

for i in $(seq 1 $forks); do
  ${vmm_cpus:+taskset -c "$vmm_cpus"} "$vmm" --restore "$w/vm.snap" --restore-mode private --vsock "cid=$((10 + i)),uds=$w/v$i.sock" \
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
  token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  check "fork $i takes its own token" true "$(new_token "$i" "$token")"
  tokens[i]=$token
  refused=$(SBX_AGENT_UDS=$w/v$i.sock "$ctl" health 2>&1 >/dev/null)
  check "fork $i refuses the origin's token" 1 "$(printf %s "$refused" | grep -c unauthorized)"
  check "fork $i answers its own token" '"result"' "$(agent "$i" health | grep -o '"result"')"
  # Each fork, restored at its own time, has the host's time, not the snapshot's.
  clock_check "fork $i" agent "$i"
done

# Each fork's kernel RNG was reseeded with its own seed: no two forks
# produce the same bytes, as they would from the same saved CRNG state.
randoms=$(for i in $(seq 1 $forks); do agent "$i" exec --shell 'head -c 16 /dev/urandom | od -An -tx1 | tr -d " \n"'; echo; done)
check "4 forks give 4 different /dev/urandom outputs" "$forks" "$(printf '%s\n' "$randoms" | sort -u | grep -c .)"

# Counters diverge: fork 1 is paused for 2 s (a deliberate duration) while
# the others count on. No check depends on how far a counter gets in those
# 2 s (an agent round trip alone can take seconds under the harness):
#  - a_K: every fork's counter before the pause, read in the order 2 3 4 1,
#    each at least count_before (every fork starts from the snapshot);
#  - while fork 1 is paused, its VMM says so and every other fork's counter
#    moves past its a_K (waited for, with a deadline);
#  - after the resume, fork 1 is read first (b_1 >= a_1) and moves on,
#    then the others (b_K);
#  - fork 1 lags: its gain b_1 - a_1 is below every other fork's gain
#    b_K - a_K. Fork 1's window [a_1, b_1] lies inside each other fork's
#    [a_K, b_K], and fork 1 did not run for the pause P (2 s plus the
#    status and the waits for the other counters, several agent round
#    trips), while it ran for R (the rest of its window: about two round
#    trips and two vmm_control.py starts). So this holds unless fork 1
#    counted over (P + R) / R times as fast as another fork (about 2-3x;
#    the counters are sleep-bound loops, so they run at about one rate).
declare -A a b
for i in 2 3 4 1; do
  wait_counter "a[$i]" 120 "$((count_before - 1))" counter_of "$i" \
    || bad "fork $i's counter is not at or above $count_before before the pause (last '${a[$i]}')"
done
control "$w/c1.sock" '{"op":"pause"}' >/dev/null || bad "pause of fork 1"
check "fork 1's VMM reports it paused" '"paused"' "$(control "$w/c1.sock" '{"op":"status"}' | grep -o '"paused"')"
sleep 2
moved=
for i in 2 3 4; do
  wait_counter "b[$i]" 120 "${a[$i]:-0}" counter_of "$i" && moved+=" $i:${a[$i]}->${b[$i]}" \
    || bad "fork $i's counter did not move past ${a[$i]} while fork 1 was paused (last '${b[$i]}')"
done
[ -n "$moved" ] && ok "while fork 1 is paused the other forks count on:$moved"
control "$w/c1.sock" '{"op":"resume"}' >/dev/null || bad "resume of fork 1"
wait_counter "b[1]" 120 "$((${a[1]:-1} - 1))" counter_of 1
wait_counter after1 120 "${b[1]:-0}" counter_of 1
if [ "${b[1]:-0}" -ge "${a[1]:-1}" ] && [ "${after1:-0}" -gt "${b[1]:-0}" ]; then
  ok "fork 1 counts on after its resume: ${a[1]} before the pause, ${b[1]} after, then $after1"
else
  bad "fork 1 after its resume: '${b[1]}' (before the pause: '${a[1]}'), then '$after1'"
fi
for i in 2 3 4; do wait_counter "b[$i]" 120 0 counter_of "$i"; done
counts="a: ${a[1]} ${a[2]} ${a[3]} ${a[4]}, b: ${b[1]} ${b[2]} ${b[3]} ${b[4]}"
lags=1
for i in 2 3 4; do
  [ $(( ${b[1]:-0} - ${a[1]:-0} )) -lt $(( ${b[$i]:-0} - ${a[$i]:-0} )) ] || lags=0
done
if [ "$lags" = 1 ]; then
  ok "fork 1, paused for 2 s, gained least: $counts (from $count_before)"
else
  bad "fork 1, paused for 2 s, should gain least: $counts (from $count_before)"
fi
echo "FORK-COUNTERS: before=$count_before $counts"

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
  wait_exit "${pids[$i]}" 120
  check "fork $i's sbx-vmm exits 0 after its reboot" 0 "${st:-still running}"
done
echo "FORK-SESSION-FAILURES: $failures"
exit "$failures"
