#!/usr/bin/env bash
# Level-1 side of bench/net (run through tests/nested). Two parts, each
# optional (PARTS: "tap sbxd"):
#  tap:  bench/net_runner.py tap: sbx-vmm and QEMU -M microvm directly on a
#        tap of ours, same kernel and initramfs, iperf3 both ways and ping;
#  sbxd: the real sbxd, started as the sbxd guest test starts it
#        (tests/guest/sbxd/lib.sh) on the test "internet" (internet_lib.sh),
#        one cold-booted sandbox with Debian's iperf3 and its libraries
#        copied in by `sbx scp`; per run: iperf3 through NAT to a server in
#        the internet namespace, level 1 to the sandbox and to the internet
#        (the references), TCP connects (bench/net_probe.py), wrk on the
#        hosted URL (net_probe.py http in the guest) through sbxd's HTTPS
#        proxy and direct to the guest, and
#        a request to the sandbox once it has idle-paused.
# Every sample is appended to OUT (KEY<TAB>VALUE; net_runner.py table).
# Usage: net_session.sh KERNEL INITRD ROOTFS_TAR SBXD SBX_VMM SBX LOGDIR OUT \
#          RUNS SECONDS CONNECTS WRK_SECONDS WRK_CONNECTIONS PARTS
# lib.sh's start_sbxd and api use sbxd, state, sock, code and body; sbxd_internet sets inet_*:
# shellcheck disable=SC2034,SC2154
set -uo pipefail
kernel=$1 initrd=$2 image_tar=$3 sbxd=$4 vmm=$5 sbx=$6 logdir=$7 out=$8
runs=$9 secs=${10} connects=${11} wrk_secs=${12} wrk_conns=${13} parts=${14}
here=$(cd "$(dirname "$0")" && pwd)
PATH=$PATH:/usr/sbin:/sbin
# shellcheck source=tests/guest/wait_lib.sh
. "$here/../tests/guest/wait_lib.sh"
# shellcheck source=tests/guest/sbxd/lib.sh
. "$here/../tests/guest/sbxd/lib.sh"

# In the harness every VMM runs on level 1's CPU 0 (tests/guest/sbxd/
# session.sh says why); the load generators are left to the other CPU.
sbxd_cpus='' l1_cpu=()
if [ -n "${SBX_L1_HEARTBEAT_PID:-}" ]; then sbxd_cpus=0 l1_cpu=(taskset -c 1); fi
sample() { printf '%s\t%s\n' "$1" "$2" >>"$out"; echo "BENCH-NET: $1 $2"; }
say() { echo "BENCH-NET: $*"; }

if [[ " $parts " == *" tap "* ]]; then
  /usr/bin/python3 "$here/net_runner.py" tap --vmm "$vmm" --kernel "$kernel" --initrd "$initrd" \
    --runs "$runs" --seconds "$secs" --cpu "$sbxd_cpus" --client-cpu "${l1_cpu[2]:-}" --out "$out" 2>&1 |
    tee "$logdir/tap.log" | grep --line-buffered -E '^(BENCH-NET|HOST-(BENCH-RUN|BENCH-FAILED|ERROR|NET-IPERF|TIMEOUT|VMM-EXIT))'
  say "tap part exited ${PIPESTATUS[0]} ($(grep -c 'BENCH-NET: tap' "$logdir/tap.log") samples)"
fi
[[ " $parts " == *" sbxd "* ]] || exit 0

mount -o remount,size=75% /tmp 2>/dev/null || true  # as session.sh: memory files
w=$(mktemp -d /tmp/bench-net.XXXXXX)
state=$w/state sock=$w/sbxd.sock
sbxd_pid=
# shellcheck disable=SC2317  # called by the trap
cleanup() {
  if [ -n "$sbxd_pid" ]; then
    timeout 300 env SBX_HOST="unix:$sock" "$sbx" rm --label bench=net >/dev/null 2>&1
    kill "$sbxd_pid" 2>/dev/null && timeout 60 tail --pid="$sbxd_pid" -f /dev/null
  fi
  sbxd_internet_down
  rm -rf "$w"
}
trap cleanup EXIT

sbxd_images "$kernel" "$image_tar"
sbxd_internet "$logdir"
# The internet's iperf3 server and a connect sink, beside its HTTP servers.
inet_in "${l1_cpu[@]}" iperf3 -s -B "$inet_public" -p 5201 >"$logdir/iperf-internet.log" 2>&1 &
inet_pids+=($!)
inet_in /usr/bin/python3 "$here/net_probe.py" serve "$inet_public" 9000 &
inet_pids+=($!)
# One idle minute is 2 s (tests/guest/sbxd/hosted.sh does the same).
start_sbxd --idle-minute-seconds 2
say "sbxd: $(grep -o 'sbx-vmm .*adopted' "$logdir/sbxd.1.log")"

# gexec SECONDS CMD...: CMD in the sandbox, its stdout; sbx's stdin is not
# the command's (--no-stdin), and sbx is ended after SECONDS (sbxd then
# ends the command).
gexec() { local s=$1; shift; timeout "$s" env SBX_HOST="unix:$sock" "$sbx" exec "$id" --no-stdin -- "$@"; }
# lib.sh's sbxc, bounded.
sbxc() { timeout 600 env SBX_HOST="unix:$sock" "$sbx" "$@"; }
# keep_logs: the sandboxes' console and VMM logs, for a failed step.
keep_logs() {
  local d
  for d in "$state"/sandboxes/*/; do
    mkdir -p "$logdir/$(basename "$d")" && cp "$d"*.log "$logdir/$(basename "$d")/" 2>/dev/null
  done
  true
}

# cold: no warm template is built behind the measurements' back. A guest
# that dies at boot (the harness's triple faults from below, docs/
# benchmarks.md) is replaced, twice at most.
id=
for attempt in 1 2 3; do
  api POST /v1/sandboxes '{"cpus":1,"memoryMib":1024,"noAutoStop":true,"cold":true,"labels":{"bench":"net"}}'
  if [ "$code" = 201 ]; then
    id=$(py "b['sandbox']['id']") addr=$(py "b['sandbox']['network']['address'].split('/')[0]")
    gexec 120 mkdir -p /root/bench >/dev/null && break
  fi
  say "create $attempt failed ($code): $(printf %s "$body" | head -c 300)"
  keep_logs
  [ -n "$id" ] && api DELETE "/v1/sandboxes/$id"
  id=
done
[ -n "$id" ] || { echo "FAIL: no sandbox"; exit 1; }
say "sandbox $id at $addr"

# Debian's iperf3 (the guest is Debian 12 too) and the libraries glibc's
# would not find there, beside it; no change to the image.
iperf_libs=$(ldd /usr/bin/iperf3 | awk '$3 ~ /^\// { print $3 }' | grep -Ev '/(libc|libm|libdl|libpthread|librt)\.so')
for f in /usr/bin/iperf3 $iperf_libs "$here/net_probe.py"; do
  sbxc scp "$f" "$id:/root/bench/" >/dev/null || { echo "FAIL: sbx scp $f"; exit 1; }
done
g_iperf=(env LD_LIBRARY_PATH=/root/bench /root/bench/iperf3)
gexec 120 chmod +x /root/bench/iperf3 >/dev/null
say "guest: $(gexec 120 "${g_iperf[@]}" --version 2>&1 | head -n 1)"
sbxc exec "$id" --detach -- "${g_iperf[@]}" -s -p 5201 >/dev/null
sbxc exec "$id" --detach -- python3 /root/bench/net_probe.py serve 0.0.0.0 9000 >/dev/null
sbxc exec "$id" --detach -- python3 /root/bench/net_probe.py http 0.0.0.0 8080 >/dev/null
page="hello from bench/net"
app_up() { [ "$(curl -s --max-time 5 "http://$addr:8080/")" = "$page" ]; }
wait_until 180 "the app in $id" app_up || { echo "FAIL: the guest's app does not answer"; exit 1; }

sbxc ca >"$w/ca.pem"
body=$(sbxc --json host "$id" 8080 | tail -n 1)
url=$(py "b['hostedPort']['url']") token=$(py "b['hostedPort']['token']")
host=${url#https://}; host=${host%%[:/]*}
proxy_port=${url##*:}; proxy_port=${proxy_port%%/*}
hp_curl() { curl -sS --max-time 120 --cacert "$w/ca.pem" --resolve "$host:$proxy_port:127.0.0.1" -H "X-Sbx-Auth: $token" "$@"; }
[ "$(hp_curl "$url")" = "$page" ] || { echo "FAIL: $url does not answer"; exit 1; }
say "hosted at $url"
# wrk has no --resolve: its own mount namespace with an /etc/hosts that names the URL's host.
{ cat /etc/hosts; echo "127.0.0.1 $host"; } >"$w/hosts"

# iperf KEY CMD...: one iperf3 -J run (client CMD), its Mbit/s received as KEY.
iperf() {
  local key=$1 mbps; shift
  "$@" >"$w/iperf.json" 2>"$w/iperf.err"
  if mbps=$(/usr/bin/python3 "$here/net_runner.py" iperf "$w/iperf.json" 2>>"$w/iperf.err"); then
    sample "$key" "$mbps"
  else
    say "$key failed: $(tail -n 2 "$w/iperf.err" | tr '\n' ' ') $(head -c 300 "$w/iperf.json")"
  fi
}
# connects KEY CMD...: net_probe.py connect's median and p95.
connects() {
  local key=$1 line; shift
  line=$("$@" 2>&1)
  say "$key: $line"
  case $line in *median_ms=*)
    local median=${line#*median_ms=} p95=${line#*p95_ms=}
    sample "$key.median" "${median%% *}"
    sample "$key.p95" "${p95%% *}" ;;
  esac
}
# load KEY URL: wrk, fixed duration and connections, through the hosts file above.
load() {
  local key=$1 url=$2 r
  # shellcheck disable=SC2016  # expanded by the inner shell
  timeout $((wrk_secs + 120)) unshare -m sh -c 'mount --bind "$0" /etc/hosts && exec "$@"' "$w/hosts" \
    "${l1_cpu[@]}" wrk -t 1 -c "$wrk_conns" -d "${wrk_secs}s" --timeout 30s --latency \
    -H "X-Sbx-Auth: $token" "$url" >"$w/wrk.out" 2>&1
  if r=$(/usr/bin/python3 "$here/net_runner.py" wrk "$w/wrk.out" 2>/dev/null); then
    read -r rps p50 p99 errors <<<"$r"
    sample "$key.rps" "$rps"; sample "$key.p50" "$p50"; sample "$key.p99" "$p99"; sample "$key.errors" "$errors"
  else
    say "$key failed: $(tr '\n' ' ' <"$w/wrk.out" | head -c 400)"
  fi
}
state_is() { api GET "/v1/sandboxes/$id"; [ "$(py "b['sandbox']['state']" 2>/dev/null)" = "$1" ]; }

t=(-t "$secs" -J --connect-timeout 10000)
for run in $(seq "$runs"); do
  say "run $run/$runs"
  iperf sbxd.nat.up gexec $((secs + 180)) "${g_iperf[@]}" -c "$inet_public" "${t[@]}"
  iperf sbxd.nat.down gexec $((secs + 180)) "${g_iperf[@]}" -c "$inet_public" "${t[@]}" -R
  iperf sbxd.tap.up timeout $((secs + 180)) "${l1_cpu[@]}" iperf3 -c "$addr" "${t[@]}" -R
  iperf sbxd.tap.down timeout $((secs + 180)) "${l1_cpu[@]}" iperf3 -c "$addr" "${t[@]}"
  iperf sbxd.l1.up timeout $((secs + 180)) "${l1_cpu[@]}" iperf3 -c "$inet_public" "${t[@]}"
  iperf sbxd.l1.down timeout $((secs + 180)) "${l1_cpu[@]}" iperf3 -c "$inet_public" "${t[@]}" -R
  connects sbxd.connect.nat gexec $((connects + 180)) python3 /root/bench/net_probe.py connect "$inet_public" 9000 "$connects"
  connects sbxd.connect.tap timeout $((connects + 180)) "${l1_cpu[@]}" /usr/bin/python3 "$here/net_probe.py" connect "$addr" 9000 "$connects"
  connects sbxd.connect.l1 timeout $((connects + 180)) "${l1_cpu[@]}" /usr/bin/python3 "$here/net_probe.py" connect "$inet_public" 9000 "$connects"
  load hosted.proxy "$url"
  load hosted.direct "http://$addr:8080/"
  # The same request, running, then once the sandbox has idle-paused.
  r=$(hp_curl -o "$w/page" -w '%{time_total}' "$url") && [ "$(cat "$w/page")" = "$page" ] && sample hosted.running "$r"
  api POST "/v1/sandboxes/$id/idle" '{"idleMinutes":1}'
  if WAIT_INTERVAL=0.5 wait_until 180 "the idle pause of $id" state_is paused; then
    r=$(hp_curl -o "$w/page" -w '%{time_total}' "$url") && [ "$(cat "$w/page")" = "$page" ] && sample hosted.wake "$r"
  else
    say "run $run: $id did not pause"
  fi
  api POST "/v1/sandboxes/$id/idle" '{"idleMinutes":null}'
  state_is running || say "run $run: $id is not running after the wake"
done
api DELETE "/v1/sandboxes/$id"
say "sbxd part done"
