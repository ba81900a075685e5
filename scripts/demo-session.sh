#!/usr/bin/env bash
# Level-1 side of the main job (scripts/demo runs it through tests/nested,
# or directly on a host with hardware virtualization): starts sbxd with
# its state in a temporary directory and drives it only with `sbx`:
# new, exec (one out to "the internet": a server in a network namespace
# this script starts, tests/guest/internet_lib.sh), host (a server in the
# sandbox at its private HTTPS URL, through sbxd's proxy), stop, resume (the same
# process, from memory), fork, rm.
# Prints one "DEMO-STEP: NAME SECONDS DETAIL" line per step.
# Usage: demo-session.sh BUILD_DIR KERNEL ROOTFS_TAR LOGDIR
set -euo pipefail
build=$1 kernel=$2 rootfs_tar=$3 logdir=$4
sbx=$build/host-tools/sbx/sbx
w=$(mktemp -d /tmp/sbx-demo.XXXXXX)
sbxd_pid=
# shellcheck source=../tests/guest/internet_lib.sh
. "$(dirname "$0")/../tests/guest/internet_lib.sh"
cleanup() {
  set +e
  [ -n "$sbxd_pid" ] && kill "$sbxd_pid" 2>/dev/null && wait "$sbxd_pid" 2>/dev/null
  pkill -9 -f -- "--snapshot-dir $w/" 2>/dev/null
  sbxd_internet_down
  rm -rf "$w"
}
trap cleanup EXIT
now() { date +%s.%N; }
step() { echo "DEMO-STEP: $1 $(awk -v a="$2" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }') ${3:-}"; }
field() { /usr/bin/python3 -c "import json,sys
for line in sys.stdin:
    b = json.loads(line)
print(eval(sys.argv[1]))" "$1"; }

# sbxd finds the kernel and the slim image (sbxd's image slim) as in an
# images/build cache; the demo names it (sbx new --from slim): the full
# default image would take minutes to build and boot.
mkdir -p "$w/images/kernel/k" "$w/images/rootfs-slim/r"
ln -s "$kernel" "$w/images/kernel/k/vmlinux"
tar -C "$w/images/rootfs-slim/r" -xSf "$rootfs_tar"
touch "$w/images/kernel/k/.complete" "$w/images/rootfs-slim/r/.complete"
sbxd_internet
"$build/host-tools/sbxd/sbxd" --state-dir "$w/state" --images "$w/images" --listen "unix:$w/sbxd.sock" \
  "${sbxd_net_flags[@]}" 2>"$logdir/sbxd.log" &
sbxd_pid=$!
export SBX_HOST=unix:$w/sbxd.sock
for _ in $(seq 300); do "$sbx" ls >/dev/null 2>&1 && break; sleep 0.1; done

t=$(now)
id=$("$sbx" new --from slim --cpus 1 --memory 1024 --no-auto-stop | tee "$logdir/new.jsonl" | field "b['id']")
step new "$t" "$id"
t=$(now)
out=$("$sbx" exec "$id" --no-stdin -- python3 -c 'import platform; print("hello from", platform.node(), platform.release(), "python", platform.python_version())')
step exec "$t" "$out"
t=$(now)
web=$("$sbx" exec "$id" --no-stdin -- curl -sS --max-time 20 "http://$inet_public/")
step net "$t" "curl http://$inet_public/: $web"
"$sbx" exec "$id" --detach -- sh -c 'cd /tmp && echo hello through a hosted URL >index.html && exec python3 -m http.server 8000' >/dev/null
"$sbx" ca >"$w/ca.pem"
t=$(now)
url=$("$sbx" host "$id" 8000 | field "b['hostedPort']['tokenUrl']")
hostport=${url#https://}; hostport=${hostport%%/*}
hosted=
for _ in $(seq 60); do  # until the server in the guest listens
  hosted=$(curl -sS --max-time 10 --cacert "$w/ca.pem" --resolve "${hostport%:*}:${hostport##*:}:127.0.0.1" \
    -L -c "$w/jar" -b "$w/jar" "$url" 2>/dev/null) && [ "$hosted" = "hello through a hosted URL" ] && break
  sleep 0.5
done
step host "$t" "${url%%\?*} (private: ?_token= traded for a cookie): $hosted"
proc=$("$sbx" exec "$id" --detach -- sh -c 'i=0; while :; do i=$((i+1)); echo $i >/tmp/counter; sleep 0.1; done' \
  | field "b['process']['id']")
pid_before=$("$sbx" exec "$id" --status "$proc" | field "b['process']['pid']")
sleep 2
count_before=$("$sbx" exec "$id" --no-stdin -- cat /tmp/counter)
t=$(now)
"$sbx" stop "$id" >/dev/null
step stop "$t" "with memory; counter process $pid_before at $count_before"
t=$(now)
restored=$("$sbx" resume "$id" | field "b['memoryRestored']")
step resume "$t" "memoryRestored: $restored"
pid_after=$("$sbx" exec "$id" --status "$proc" | field "b['process']['pid']")
sleep 1
count_after=$("$sbx" exec "$id" --no-stdin -- cat /tmp/counter)
echo "DEMO-PROCESS: pid $pid_before before the stop, $pid_after after; counter $count_before -> $count_after"
t=$(now)
child=$("$sbx" fork "$id" --count 1 | field "b['sandboxes'][0]['id']")
child_count=$("$sbx" exec "$child" --no-stdin -- cat /tmp/counter)
step fork "$t" "$child (its copy of the counter: $child_count)"
t=$(now)
"$sbx" rm "$id" "$child" >/dev/null
step rm "$t" "$id $child"
left=$("$sbx" ls | field "len(b['sandboxes'])")
echo "DEMO-LEFT: $left"
[ "$web" = "hello from the internet" ] && [ "$hosted" = "hello through a hosted URL" ] && [ "$restored" = True ] && [ "$pid_before" = "$pid_after" ] && [ "$count_after" -gt "$count_before" ] \
  && [ "$left" = 0 ] && echo "DEMO-OK"
exit 0
