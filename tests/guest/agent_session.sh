#!/usr/bin/env bash
# Level-1 side of the agent tests (agent_rootfs.sh runs it through
# tests/nested): boots one image with sbx-vmm and a vsock device, drives the
# agent with sbx-agentctl and prints one "ok: ..." or "FAIL: ..." line per
# check. Exit status: the number of failed checks (0: all passed).
# Usage: agent_session.sh rootfs|minimal KERNEL IMAGE SBX_VMM AGENTCTL LOGDIR [FIXTURE_DIR FIXTURE_NEW]
#   With FIXTURE_DIR the guest is restored from that fixture (built into
#   FIXTURE_NEW first when it has none: tests/guest/fixture_lib.sh).
#   rootfs: IMAGE is a sparse tar holding rootfs.ext4 (agent_image), copied
#   into level 1's /tmp; minimal: IMAGE is the initramfs.
set -uo pipefail
kind=$1 kernel=$2 image=$3 vmm=$4 ctl=$5 logdir=$6 fixture_dir=${7:-} fixture_new=${8:-}
here=$(cd "$(dirname "$0")" && pwd)
# A VMM whose guest triple-faults leaves its memory here, for run_nested's
# judgement of a fault from below (tests/lib.sh walk_crash_dumps).
export SBX_VMM_CRASH_DUMP_DIR=$logdir
# shellcheck source=SCRIPTDIR/wait_lib.sh
. "$here/wait_lib.sh"  # wait_until, wait_exit
PATH=$PATH:/usr/sbin:/sbin
failures=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; failures=$((failures + 1)); }
# check WHAT WANT GOT
check() { if [ "$2" = "$3" ]; then ok "$1"; else bad "$1: expected '$2', got '$(printf %s "$3" | head -c 400)'"; fi; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

# Level 1's loopback starts down (tests/harness/init does not bring it up):
# the forwarding check listens on 127.0.0.1.
ip link set lo up 2>/dev/null || busybox ip link set lo up 2>/dev/null || true
w=$(mktemp -d /tmp/agent-session.XXXXXX)
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
uds=$w/v.sock
export SBX_AGENT_UDS=$uds SBX_AGENT_TOKEN=$token
console=$logdir/$kind-console.log

if [ "$kind" = rootfs ]; then
  memory=1024 disk_kind=disk big_mib=${SBX_TEST_BIG_MIB:-200} guest_dir=/var/tmp
else
  memory=512 disk_kind=initrd big_mib=16 guest_dir=/tmp
fi
trap 'kill ${vmm_pid:-} 2>/dev/null; rm -rf "$w"' EXIT
t0=$(now)
if [ -n "$fixture_dir" ]; then
  # shellcheck source=SCRIPTDIR/fixture_lib.sh
  . "$here/fixture_lib.sh"
  fixture_start "$fixture_dir" "$fixture_new" "$kernel" "$image" "$vmm" "$ctl" "$logdir" "$kind" "$memory" \
    "$disk_kind" || { echo "FAIL: the $kind fixture could not be started"; exit 1; }
  token=$SBX_AGENT_TOKEN
else
  base="console=ttyS0 reboot=k panic=1 i8042.noaux i8042.nomux i8042.nopnp i8042.dumbkbd quiet"
  if [ "$kind" = rootfs ]; then
    t=$(now)
    tar -C "$w" -xSf "$image" || { echo "FAIL: unpacking $image"; exit 1; }
    echo "copied the image into level 1's /tmp in $(elapsed "$t") s"
    boot=(--disk "$w/rootfs.ext4"
      --cmdline "$base root=/dev/vda rw rootfstype=ext4 init=/lib/systemd/systemd sbx.token=$token")
  else
    boot=(--initrd "$image" --cmdline "$base sbx.token=$token")
  fi
  "$vmm" --kernel "$kernel" "${boot[@]}" --memory "$memory" --vsock "cid=3,uds=$uds" --console "file:$console" \
    </dev/null >"$logdir/$kind-vmm.out" 2>&1 &
  vmm_pid=$!
fi

if ready=$("$ctl" wait --timeout 600); then
  ok "the agent answers health ($kind): $ready"
  echo "AGENT-READY-SECONDS: $kind $(elapsed "$t0")"
else
  echo "FAIL: the agent never answered ($kind); console tail:"
  tail -n 40 "$console"
  exit 1
fi

# exec: output and exit status, stderr and a failing status.
if [ "$kind" = rootfs ]; then
  out=$("$ctl" exec -- python3 -c 'print(6*7)'); st=$?
  check "python3 -c 'print(6*7)' prints 42" 42 "$out"
  check "... and exits 0" 0 "$st"
else
  out=$("$ctl" exec -- sh -c 'echo hi; exit 0'); st=$?
  check "sh -c 'echo hi' prints hi and exits 0" "hi/0" "$out/$st"
fi
out=$("$ctl" exec -- sh -c 'echo oops >&2; exit 3' 2>"$w/err"); st=$?
check "a failing command's exit status comes back" 3 "$st"
check "... and its stderr" oops "$(cat "$w/err")"
check "... and no stdout" "" "$out"
"$ctl" exec --shell 'kill -9 $$'; st=$?
check "a command killed by SIGKILL gives 128+9" 137 "$st"

# File round trip, checked by sha256 on both ends.
head -c $((big_mib << 20)) /dev/urandom >"$w/big"
want=$(sha256sum <"$w/big" | cut -d' ' -f1)
t=$(now)
if "$ctl" put "$w/big" "$guest_dir/big" 2>"$w/put.err"; then
  ok "put $big_mib MiB in $(elapsed "$t") s ($(cat "$w/put.err"))"
else
  bad "put $big_mib MiB: $(cat "$w/put.err")"
fi
guest_sum=$("$ctl" exec -- sha256sum "$guest_dir/big" | cut -d' ' -f1)
check "the guest's sha256sum of the uploaded file" "$want" "$guest_sum"
t=$(now)
if "$ctl" get "$guest_dir/big" "$w/back" 2>"$w/get.err"; then
  ok "get $big_mib MiB in $(elapsed "$t") s ($(cat "$w/get.err"))"
else
  bad "get $big_mib MiB: $(cat "$w/get.err")"
fi
check "the file got back has the same sha256" "$want" "$(sha256sum <"$w/back" | cut -d' ' -f1)"
rm -f "$w/big" "$w/back"
"$ctl" exec -- rm -f "$guest_dir/big"

if [ "$kind" = rootfs ]; then
  # A detached process: attach, disconnect (SIGINT) mid-stream, reattach
  # from the printed offset; the two parts make the whole output once.
  # "Mid-stream" by construction, not by timing: after line-15 the process
  # waits (up to 600 s) for /tmp/sbx-attach-go, made after the disconnect.
  id=$("$ctl" exec --detach --shell 'for i in $(seq 1 15); do echo line-$i; sleep 0.2; done
    n=0; while [ ! -e /tmp/sbx-attach-go ] && [ $n -lt 3000 ]; do sleep 0.2; n=$((n + 1)); done
    for i in $(seq 16 30); do echo line-$i; sleep 0.2; done' 2>/dev/null)
  [ -n "$id" ] && ok "a detached process started (id $id)" || bad "exec --detach printed no id"
  "$ctl" attach "$id" >"$w/part1" 2>"$w/attach1.err" &
  attach=$!
  attached() { grep -qx line-1 "$w/part1" || ! kill -0 "$attach" 2>/dev/null; }
  wait_until 300 "the first attach to print line-1" attached
  kill -INT "$attach" 2>/dev/null
  wait_exit "$attach" 60 || { kill -9 "$attach"; wait "$attach"; }
  off=$(sed -n 's/^end_offset=//p' "$w/attach1.err" | tail -n1)
  if [ -n "$off" ] && [ -s "$w/part1" ] && ! grep -qx line-30 "$w/part1"; then
    ok "the first attach got $(wc -l <"$w/part1") lines, disconnected at offset $off"
  else
    bad "first attach: offset '$off', $(wc -c <"$w/part1") bytes, stderr: $(cat "$w/attach1.err")"
  fi
  "$ctl" exec -- touch /tmp/sbx-attach-go || bad "touch /tmp/sbx-attach-go"
  "$ctl" attach "$id" --offset "${off:-0}" >"$w/part2" 2>"$w/attach2.err"
  check "the reattach from that offset follows to the exit" "exit_status=0" \
    "$(grep exit_status "$w/attach2.err")"
  check "both attaches together: line-1..line-30 exactly once" "$(seq -f 'line-%g' 1 30)" \
    "$(cat "$w/part1" "$w/part2")"
  status=$("$ctl" status "$id")
  case "$status" in *'"running":false'*) ok "status after the exit: $status" ;;
    *) bad "status after the exit: $status" ;; esac

  # Port forwarding to a guest HTTP server.
  printf 'served-%s\n' "$token" >"$w/index"
  "$ctl" put --mkdirs "$w/index" /tmp/www/hello.txt 2>/dev/null || bad "put of the web page"
  web=$("$ctl" exec --detach --cwd /tmp/www -- python3 -m http.server 8000 --bind 127.0.0.1 2>/dev/null)
  # The server answers inside the guest before the host tries.
  # (Polled with a 180 s deadline: the server may take seconds to start.)
  inside=$("$ctl" exec -- python3 -c 'import time, urllib.request
deadline = time.monotonic() + 180
while True:
    try:
        print(urllib.request.urlopen("http://127.0.0.1:8000/hello.txt", timeout=10).read().decode().strip()); break
    except OSError as e:
        if time.monotonic() > deadline: print(f"no answer in 180 s: {e}"); break
        time.sleep(0.2)' 2>&1)
  check "the guest's http.server answers inside the guest" "served-$token" "$inside"
  "$ctl" forward 0 127.0.0.1:8000 >"$logdir/fwd.out" 2>&1 &
  fwd=$!
  port='' body=''
  fwd_port() { port=$(sed -n 's/^forwarding 127.0.0.1:\([0-9]*\) .*/\1/p' "$logdir/fwd.out"); [ -n "$port" ]; }
  fetch() { body=$(curl -sSf --max-time 20 "http://127.0.0.1:$port/hello.txt" 2>>"$logdir/curl.err"); }
  wait_until 120 "'sbx-agentctl forward' to print its port" fwd_port &&
    WAIT_INTERVAL=1 wait_until 180 "an answer through the forwarded port" fetch
  check "the guest's http.server reached through 'sbx-agentctl forward' (port $port)" "served-$token" "$body"
  kill "$fwd"; wait "$fwd" 2>/dev/null
  [ -n "$body" ] || { echo "forward output:"; cat "$logdir/fwd.out"; tail -n 3 "$logdir/curl.err"; \
    "$ctl" attach --no-follow "$web" 2>&1 | tail -n 5; }

  # /etc/sandboxer/env reaches later commands.
  "$ctl" get /etc/sandboxer/env "$w/env" 2>/dev/null || : >"$w/env"
  echo SBX_TEST_VALUE=hello >>"$w/env"
  "$ctl" put --mode 0644 "$w/env" /etc/sandboxer/env 2>/dev/null || bad "put of /etc/sandboxer/env"
  check "a value put into /etc/sandboxer/env is seen by a later exec" hello "$("$ctl" exec -- printenv SBX_TEST_VALUE)"
fi

# A wrong token is refused.
out=$("$ctl" --token 0123456789abcdef health 2>&1); st=$?
case "$st:$out" in 125:*unauthorized*) ok "a wrong token is refused: $out" ;;
  *) bad "a wrong token: status $st, output $out" ;; esac

# The end: the guest reboots and sbx-vmm exits 0.
if [ "$kind" = rootfs ]; then stop=(systemctl reboot); else stop=(reboot); fi
"$ctl" exec --timeout-ms 20000 -- "${stop[@]}" >/dev/null 2>&1
wait_exit "$vmm_pid" 120
if [ -z "$st" ]; then
  bad "sbx-vmm still running 120 s after '${stop[*]}' (killed)"
  kill -9 $vmm_pid; wait $vmm_pid
else
  check "sbx-vmm exits 0 after the guest's '${stop[*]}'" 0 "$st"
fi
echo "AGENT-SESSION-FAILURES: $kind $failures"
exit "$failures"
