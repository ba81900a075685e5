#!/usr/bin/env bash
# Level-1 side of the sbxd lifecycle test (sbxd.sh runs it through
# tests/nested). Starts the real sbxd (state in level 1's tmpfs, images in
# an images/build-shaped folder) and drives it only over its Unix socket
# with curl: create on the default image, an exec in it through the agent
# (sbx-agentctl with the address in the sandbox folder's vmm.json), a
# counting process, stop with memory, resume (memoryRestored, same PID,
# counting on), a create from the warm template the first create had
# built, fork count 2 (two running children with the parent's
# process and their own tokens and CIDs), kill -9 of sbxd and a restart
# that adopts every VMM, then delete (no VMM, folder or layer left).
# One "ok: ..." or "FAIL: ..." line per check; exit status: failures.
# Usage: sbxd_session.sh KERNEL ROOTFS_TAR SBXD SBX_VMM AGENTCTL LOGDIR
set -uo pipefail
kernel=$1 image_tar=$2 sbxd=$3 vmm=$4 ctl=$5 logdir=$6
here=$(cd "$(dirname "$0")" && pwd)
failures=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; failures=$((failures + 1)); }
check() { if [ "$2" = "$3" ]; then ok "$1"; else bad "$1: expected '$2', got '$(printf %s "$3" | head -c 600)'"; fi; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
# shellcheck source=SCRIPTDIR/wait_lib.sh
. "$here/wait_lib.sh"  # wait_until, wait_counter

w=$(mktemp -d /tmp/sbxd-session.XXXXXX)
state=$w/state sock=$w/sbxd.sock
sbxd_pid=
trap 'kill -9 $sbxd_pid 2>/dev/null; pkill -9 -f -- "--snapshot-dir $state/" 2>/dev/null; rm -rf "$w"' EXIT

# An images/build cache with the kernel and the unpacked default image.
mkdir -p "$w/images/kernel/k" "$w/images/rootfs/r"
ln -s "$kernel" "$w/images/kernel/k/vmlinux"
tar -C "$w/images/rootfs/r" -xSf "$image_tar" || { echo "FAIL: unpacking $image_tar"; exit 1; }
touch "$w/images/kernel/k/.complete" "$w/images/rootfs/r/.complete"

starts=0
start_sbxd() {
  starts=$((starts + 1))
  "$sbxd" --state-dir "$state" --images "$w/images" --vmm "$vmm" --listen "unix:$sock" \
    2>"$logdir/sbxd.$starts.log" &
  sbxd_pid=$!
  for _ in $(seq 300); do
    curl -sf --unix-socket "$sock" http://sbxd/v1/health >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "FAIL: sbxd did not answer"; cat "$logdir/sbxd.$starts.log"; exit 1
}
# api METHOD PATH [BODY]: the reply's body in $body, its status in $code.
api() {
  local out
  out=$(curl -sS --unix-socket "$sock" -X "$1" "http://sbxd$2" -H 'Content-Type: application/json' \
    ${3:+--data "$3"} -w '\n%{http_code}' --max-time 1500)
  body=$(printf '%s\n' "$out" | sed '$d') code=$(printf '%s\n' "$out" | tail -n 1)
}
# py EXPR: EXPR over the JSON body as b.
py() { printf '%s' "$body" | /usr/bin/python3 -c "import json,sys; b=json.load(sys.stdin); print($1)"; }
vmm_field() { /usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" \
  "$state/sandboxes/$1/vmm.json" "$2"; }
# agent ID ARGS: sbx-agentctl on sandbox ID at the address in its folder.
agent() {
  local id=$1; shift
  SBX_AGENT_UDS=$(vmm_field "$id" uds) SBX_AGENT_TOKEN=$(vmm_field "$id" token) "$ctl" "$@"
}
counter_of() { agent "$1" exec -- cat /tmp/counter; }
counter_pid() { pid=$(agent "$1" status "$proc" 2>/dev/null | sed -n 's/.*"pid":\([0-9]*\).*/\1/p'); [ -n "$pid" ]; }
# The sandboxes' VMMs (a warm template's build is another).
vmm_count() { pgrep -f -- "--snapshot-dir $state/sandboxes/" | grep -c .; }

start_sbxd
echo "SBXD-DRIVER: $(grep -o 'sbx-vmm .*adopted' "$logdir/sbxd.1.log")"

# 1. Create: a cold boot of the default image to agent-ready.
t=$(now)
api POST /v1/sandboxes '{"cpus":1,"memoryMib":1024,"noAutoStop":true,"labels":{"test":"sbxd"}}'
check "create answers 201" 201 "$code"
id=$(py "b['sandbox']['id']" 2>/dev/null)
check "the new sandbox is running" running "$(py "b['sandbox']['state']" 2>/dev/null)"
echo "SBXD-TIME: create (cold) $(elapsed "$t") s"
check "without a warm template it says it cold-booted" 1 "$(py "sum('no warm template' in w for w in b['warnings'])" 2>/dev/null)"
[ -n "$id" ] && [ "$code" = 201 ] || { printf '%s\n' "$body"; tail -n 20 "$state"/sandboxes/*/console.log; exit 1; }
folder=$state/sandboxes/$id
check "its disk is a qcow2 overlay" 'QFI' "$(head -c 3 "$folder/disk.qcow2")"
check "one VMM runs" 1 "$(vmm_count)"
check "an exec through the agent" "hello from $id" "$(agent "$id" exec -- sh -c "echo hello from $id")"
proc=$(agent "$id" exec --detach --shell 'i=0; while :; do i=$((i+1)); echo $i >/tmp/counter; sleep 0.05; done' 2>/dev/null)
pid=; wait_until 120 "the PID of the counting process" counter_pid "$id"; pid_before=$pid
wait_counter count_before 120 0 counter_of "$id"
[ -n "$pid_before" ] && ok "counting process $pid_before at ${count_before:-?}" || bad "the counter did not start"
api GET "/v1/sandboxes/$id"
check "get reports it running" running "$(py "b['sandbox']['state']" 2>/dev/null)"

# 2. Stop with memory, then resume it from that memory.
t=$(now)
api POST "/v1/sandboxes/$id/stop" '{}'
check "stop answers 200" 200 "$code"
check "stop leaves it stopped" stopped "$(py "b['sandbox']['state']" 2>/dev/null)"
echo "SBXD-TIME: stop $(elapsed "$t") s"
check "the memory is saved in the folder" yes "$([ -s "$folder/memory.snap" ] && echo yes)"
check "no VMM runs while it is stopped" 0 "$(vmm_count)"
token_before=$(vmm_field "$id" token)
t=$(now)
api POST "/v1/sandboxes/$id/resume" '{}'
check "resume answers 200" 200 "$code"
check "resume restores the memory" True "$(py "b['memoryRestored']" 2>/dev/null)"
check "the resumed sandbox is running" running "$(py "b['sandbox']['state']" 2>/dev/null)"
echo "SBXD-TIME: resume $(elapsed "$t") s"
check "the resumed guest has a new token" yes "$([ "$(vmm_field "$id" token)" != "$token_before" ] && echo yes)"
check "the counting process kept its PID" "$pid_before" "$(agent "$id" status "$proc" | sed -n 's/.*"pid":\([0-9]*\).*/\1/p')"
wait_counter count_after 120 "${count_before:-0}" counter_of "$id" \
  && ok "it counts on: ${count_before} before the stop, ${count_after} after" \
  || bad "the counter did not move past ${count_before} (last '${count_after}')"

# 3. A create from the warm template the first one had built.
wait_until 900 "the warm template" sh -c "ls -d '$state'/templates/default-* 2>/dev/null | grep -v '[.]tmp-' | grep -q ."
t=$(now)
api POST /v1/sandboxes '{"cpus":1,"memoryMib":1024,"noAutoStop":true}'
check "a warm create answers 201" 201 "$code"
echo "SBXD-TIME: create (warm template) $(elapsed "$t") s"
check "a warm create does not cold-boot" 0 "$(py "sum('warm template' in w for w in b['warnings'])" 2>/dev/null)"
warm=$(py "b['sandbox']['id']" 2>/dev/null)
if [ -n "$warm" ]; then
  check "the warm sandbox runs commands" "warm $warm" "$(agent "$warm" exec -- sh -c "echo warm $warm")"
  check "the warm sandbox has its own token" yes "$([ "$(vmm_field "$warm" token)" != "$(vmm_field "$id" token)" ] && echo yes)"
  api DELETE "/v1/sandboxes/$warm"
  check "delete of the warm sandbox" 200 "$code"
fi

# 4. Fork: two children from the parent's memory, the parent running on.
t=$(now)
api POST "/v1/sandboxes/$id/fork" '{"count":2}'
check "fork answers 201" 201 "$code"
echo "SBXD-TIME: fork $(elapsed "$t") s"
children=$(py "' '.join(s['id'] for s in b['sandboxes'])" 2>/dev/null)
check "two children" 2 "$(printf '%s\n' $children | grep -c .)"
check "both children running" "running running" "$(py "' '.join(s['state'] for s in b['sandboxes'])" 2>/dev/null)"
check "parent and children: three VMMs" 3 "$(vmm_count)"
api GET "/v1/sandboxes/$id"
check "the parent runs on" running "$(py "b['sandbox']['state']" 2>/dev/null)"
check "the parent's counter keeps its PID" "$pid_before" "$(agent "$id" status "$proc" | sed -n 's/.*"pid":\([0-9]*\).*/\1/p')"
tokens=$(vmm_field "$id" token) cids=$(vmm_field "$id" cid)
for c in $children; do
  check "child $c has the parent's counting process" "$pid_before" "$(agent "$c" status "$proc" | sed -n 's/.*"pid":\([0-9]*\).*/\1/p')"
  check "child $c runs commands" "child $c" "$(agent "$c" exec -- sh -c "echo child $c")"
  tokens="$tokens $(vmm_field "$c" token)" cids="$cids $(vmm_field "$c" cid)"
done
check "three distinct tokens" 3 "$(printf '%s\n' $tokens | sort -u | grep -c .)"
check "three distinct CIDs" 3 "$(printf '%s\n' $cids | sort -u | grep -c .)"
check "one frozen layer under the three disks" 1 "$(ls "$state/layers" | grep -c .)"

# 5. kill -9 of sbxd: the VMMs run on and the next sbxd adopts them.
kill -9 "$sbxd_pid"; wait "$sbxd_pid" 2>/dev/null
check "the VMMs outlive sbxd" 3 "$(vmm_count)"
start_sbxd
check "the restarted sbxd adopts the three VMMs" "3 running VMM(s) adopted" \
  "$(grep -o '[0-9]* running VMM(s) adopted' "$logdir/sbxd.$starts.log")"
api GET "/v1/sandboxes?state=running"
check "all three still running" 3 "$(py "len(b['sandboxes'])" 2>/dev/null)"
check "the parent still answers after the restart" "still $id" "$(agent "$id" exec -- sh -c "echo still $id")"

# 6. Delete everything: no VMM, folder or layer left.
for s in $children "$id"; do
  api DELETE "/v1/sandboxes/$s"
  check "delete $s answers 200" 200 "$code"
done
api GET "/v1/sandboxes/$id"
check "a deleted sandbox is gone" 404 "$code"
check "no VMM left" 0 "$(vmm_count)"
check "no sandbox folder left" 0 "$(ls "$state/sandboxes" | grep -c .)"
check "no layer left" 0 "$(ls "$state/layers" 2>/dev/null | grep -c .)"
kill "$sbxd_pid"; wait "$sbxd_pid"
check "sbxd exits 0 on SIGTERM" 0 "$?"
echo "SBXD-SESSION-FAILURES: $failures"
exit "$failures"
