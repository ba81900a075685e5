# Helpers for the sbxd guest test's parts (sourced by session.sh on level
# 1): checks, starting sbxd, calling its API over the Unix socket with curl,
# and reaching a sandbox's agent with sbx-agentctl.
# Needs: $sbxd $vmm $ctl $sbx $state $sock $w $logdir set by the caller
# (session.sh, or bench/sbx_session.sh, which uses only the start code).
# shellcheck shell=bash
failures=0
vmm_control=$(dirname "${BASH_SOURCE[0]}")/../vmm_control.py
pf_spin=$(dirname "${BASH_SOURCE[0]}")/../tools/pf_spin.py
# Each check line also goes to $part_record when session.sh sets it: the
# part's lines, kept for a later level-1 attempt (session.sh).
# A check line that comes over 10 s after the one before it says so first
# (SBXD-SLOW: the steps that make a part long; session.sh resets the clock
# at each part). $EPOCHREALTIME, so no process per check.
check_clock=${EPOCHREALTIME//[!0-9]/}
check_slow() {
  local t=${EPOCHREALTIME//[!0-9]/} d
  d=$((t - check_clock)) check_clock=$t
  [ "$d" -lt 10000000 ] || printf 'SBXD-SLOW: %d.%d s to: %s\n' $((d / 1000000)) $((d / 100000 % 10)) "$1"
}
ok() { check_slow "$*"; echo "ok: $*"; [ -z "${part_record:-}" ] || echo "ok: $*" >>"$part_record"; }
bad() {
  check_slow "$*"
  echo "FAIL: $*"; failures=$((failures + 1))
  [ -z "${part_record:-}" ] || echo "FAIL: $*" >>"$part_record"
  keep_sandbox_logs
  end_if_a_guest_crashed
}
# end_if_a_guest_crashed: a guest that triple-faulted has left its memory
# in $SBX_VMM_CRASH_DUMP_DIR (sbx-vmm). The part's checks after it would
# fail for that alone (run15: a part's 40 checks, 10 minutes), and the run
# is judged, and run again from this part when the fault came from below
# the VMM, on that dump (tests/lib.sh run_nested). So once the dump is
# whole the session ends here, its part unfinished.
end_if_a_guest_crashed() {
  local dir=${SBX_VMM_CRASH_DUMP_DIR:-} dumps
  [ -n "$dir" ] && [ "$BASH_SUBSHELL" -eq 0 ] || return 0
  compgen -G "$dir/sbx-vmm-*.mem*" >/dev/null || return 0
  declare -F wait_crash_dumps >/dev/null && wait_crash_dumps "$dir"
  dumps=$(compgen -G "$dir/sbx-vmm-*.mem*" | xargs)
  echo "FAIL: a guest triple-faulted during part ${part:-?} ($dumps); the session ends here"
  exit 1
}
# keep_sandbox_logs: every sandbox's console and VMM log as they are at a
# failure, in $logdir/fail.N/ID/ (the first 8 failures; a part deletes its
# sandboxes, and level 1's tmpfs goes with the run).
keep_sandbox_logs() {
  [ "$failures" -le 8 ] && [ -d "${state:-}/sandboxes" ] || return 0
  local d f
  for d in "$state"/sandboxes/*/; do
    for f in "$d"*.log "$d"vmm.json; do
      [ -f "$f" ] || continue
      mkdir -p "$logdir/fail.$failures/$(basename "$d")" && cp "$f" "$logdir/fail.$failures/$(basename "$d")/"
    done
    [ -S "${d}vmm/control.sock" ] || continue
    f=$logdir/fail.$failures/$(basename "$d")/diagnose.json
    timeout 20 /usr/bin/python3 "$vmm_control" "${d}vmm/control.sock" '{"op":"diagnose"}' >"$f" 2>&1
    # a guest spinning on #PFs from below the VMM says so (run_nested reruns)
    [ "$failures" -gt 2 ] || timeout 60 /usr/bin/python3 "$pf_spin" "${d}vmm/control.sock" "$(basename "$d")" || true
    [ "$failures" -le 2 ] && /usr/bin/python3 - "$f" "$(basename "$d")" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except ValueError:
    sys.exit(0)
for v in d.get("vcpus", []):
    k = v.get("kvm", {})
    print(f"SBXD-DIAG: {sys.argv[2]} vCPU {v.get('id')}: rip {v.get('rip')} exception {v.get('exception')}"
          f" {v.get('mp_state')}; exits {k.get('exits')} emulated {k.get('insn_emulation')}"
          f" guest #PF {k.get('pf_guest')} halts {k.get('halt_exits')} irqs {k.get('irq_injections')}")
PY
  done
  return 0
}
check() { if [ "$2" = "$3" ]; then ok "$1"; else bad "$1: expected '$2', got '$(printf %s "$3" | head -c 600)'"; return 1; fi; }
# now: seconds since the epoch (to the microsecond); elapsed T: seconds since
# T (one decimal). Bash's clock: no process.
now() { echo "$EPOCHREALTIME"; }
elapsed() {
  local d=$(((${EPOCHREALTIME//[!0-9]/} - ${1//[!0-9]/}) / 100000))
  echo "$((d / 10)).$((d % 10))"
}

# sbxd_images KERNEL ROOTFS_TAR: an images/build-shaped cache in $w/images
# with the kernel and the unpacked slim image (images/build rootfs-slim,
# sbxd's image slim), which start_sbxd makes sbxd's default
# (bench/sbx_session.sh too). The full image (sbxd's image default) is
# there only when $SBX_SBXD_FULL_IMAGE names it (tests/guest/sbxd.sh, the
# full group): a link to the artifact cache's file, read in place.
sbxd_images() {
  mkdir -p "$w/images/kernel/k" "$w/images/rootfs-slim/r"
  ln -s "$1" "$w/images/kernel/k/vmlinux"
  tar -C "$w/images/rootfs-slim/r" -xSf "$2" || { echo "FAIL: unpacking $2"; exit 1; }
  touch "$w/images/kernel/k/.complete" "$w/images/rootfs-slim/r/.complete"
  if [ -n "${SBX_SBXD_FULL_IMAGE:-}" ]; then
    mkdir -p "$w/images/rootfs-full/f"
    ln -s "$SBX_SBXD_FULL_IMAGE" "$w/images/rootfs-full/f/rootfs.ext4"
    touch "$w/images/rootfs-full/f/.complete"
  fi
}

# sbxd_internet, sbxd_internet_down and sbxd_net_flags (the test's
# "internet" and the flags that point sbxd at it):
# shellcheck source=SCRIPTDIR/../internet_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../internet_lib.sh"

starts=0
# start_sbxd [FLAG...]: sbxd on this state, with the slim image as its
# default, with extra flags (limits.sh); on the CPUs in $sbxd_cpus
# (taskset -c) when it is set (session.sh).
start_sbxd() {
  starts=$((starts + 1))
  ${sbxd_cpus:+taskset -c "$sbxd_cpus"} "$sbxd" --state-dir "$state" --images "$w/images" --default-image slim --vmm "$vmm" --listen "unix:$sock" "${sbxd_net_flags[@]}" "$@" \
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
  body=${out%$'\n'*} code=${out##*$'\n'}
}
# py EXPR: EXPR over the JSON body as b.
# A process start is the dear step of a check in level 1 (TCG runs its
# loader and Python's imports instruction by instruction): Python as -I -S
# (no site module, no user paths) starts in about half the time, and
# vmm_field reads vmm.json without starting anything.
py() { printf '%s' "$body" | /usr/bin/python3 -I -S -c "import json,sys; b=json.load(sys.stdin); print($1)"; }
# vmm_field ID KEY: KEY of the sandbox's vmm.json, which sbxd writes flat
# (sandbox_files.cpp: numbers, and strings without escapes: a token, paths).
vmm_field() {
  local text= re="\"$2\":(\"([^\"\\\\]*)\"|(-?[0-9]+))"
  read -r -d '' text <"$state/sandboxes/$1/vmm.json"
  [[ $text =~ $re ]] || { echo "vmm_field: no $2 in $state/sandboxes/$1/vmm.json" >&2; return 1; }
  printf '%s\n' "${BASH_REMATCH[2]}${BASH_REMATCH[3]}"
}
# agent ID ARGS: sbx-agentctl on sandbox ID at the address in its folder.
agent() {
  local id=$1; shift
  SBX_AGENT_UDS=$(vmm_field "$id" uds) SBX_AGENT_TOKEN=$(vmm_field "$id" token) "$ctl" "$@"
}
# last_event: the id of the newest event (GET /v1/events pages 1000 at a time).
last_event() {
  local after=0 next
  while :; do
    api GET "/v1/events?after=$after"
    next=$(py "b['events'][-1]['id'] if b['events'] else ''" 2>/dev/null)
    [ -n "$next" ] || break
    after=$next
  done
  echo "$after"
}
# state_changes ID AFTER: ID's state changes since event AFTER, oldest
# first, as FROM>TO or FROM>TO:REASON words.
state_changes() {
  api GET "/v1/events?after=$2"
  py "' '.join(e['data']['from'] + '>' + e['data']['to'] + (':' + e['data']['reason'] if e['data'].get('reason') else '') for e in b['events'] if e['sandboxId'] == '$1' and e['type'] == 'state')" 2>/dev/null
}
# stop_resume PART ID [cold]: stop ID with its memory (cold: without) and
# resume it (cold: a boot), checked as PART's, with the time both took as
# SBXD-TIME.
stop_resume() {
  local t stop='{}' with='with memory' resumed='restores the memory' restored=True what=stop+resume
  [ "${3:-}" != cold ] ||
    stop='{"memory":false}' with='without memory' resumed='without memory cold-boots' restored=False what='stop+cold boot'
  t=$(now)
  api POST "/v1/sandboxes/$2/stop" "$stop"
  check "$1: stop $with answers 200" 200 "$code"
  api POST "/v1/sandboxes/$2/resume" '{}'
  check "$1: resume $resumed" "$restored" "$(py "b['memoryRestored']" 2>/dev/null)"
  echo "SBXD-TIME: $1 $what $(elapsed "$t") s"
}
counter_of() { agent "$1" exec -- cat /tmp/counter; }
counter_pid() { pid=$(agent "$1" status "$proc" 2>/dev/null | sed -n 's/.*"pid":\([0-9]*\).*/\1/p'); [ -n "$pid" ]; }
# The sandboxes' VMMs (a warm template's build is another).
vmm_count() { pgrep -f -- "--snapshot-dir $state/sandboxes/" | grep -c .; }
# vmm_cgroup ID: the cgroup v2 path of the sandbox's VMM (/proc/PID/cgroup).
vmm_cgroup() { sed -n 's/^0:://p' "/proc/$(vmm_field "$1" pid)/cgroup" 2>/dev/null; }
# The VMMs' cgroups (session.sh mounts cgroup2 at /sys/fs/cgroup in level 1).
cgroups=/sys/fs/cgroup/sandboxer

# sbxc ARGS: the sbx command line against this sbxd (piped: JSON).
sbxc() { SBX_HOST=unix:$sock "$sbx" "$@"; }

# A real headless Chromium through tests/browser/probe.mjs (the browser and
# desktop parts; tests/guest/sbxd.sh runs `npm ci` there at level 0, as
# level 1 has no network). PART names the part in check lines.
# probe_ready PART: Chromium, certutil, node and playwright-core are there;
# else a bad line and status 1.
probe_ready() {
  local need missing=
  for need in /usr/bin/chromium /usr/bin/certutil /usr/bin/node "$here/../../browser/node_modules/playwright-core/package.json"; do
    [ -e "$need" ] || missing="$missing $need"
  done
  [ -z "$missing" ] && return 0
  bad "$1: missing:$missing (chromium, libnss3-tools, nodejs; npm ci in tests/browser)"
  return 1
}
# probe_home PART: $probe_home, a throwaway HOME whose NSS database trusts
# sbxd's CA to issue server certificates (trust "C,,"): Chromium on Linux
# takes locally added roots from $HOME/.pki/nssdb (docs/sbxd.md,
# "Certificates").
probe_home() {
  probe_home=$w/$1-home
  mkdir -p "$probe_home/.pki/nssdb"
  sbxc ca >"$w/$1-ca.pem" 2>/dev/null
  certutil -N -d "sql:$probe_home/.pki/nssdb" --empty-password >/dev/null 2>&1 &&
    certutil -A -d "sql:$probe_home/.pki/nssdb" -t C,, -n "Sandboxer local CA" -i "$w/$1-ca.pem" >/dev/null 2>&1
  check "$1: an NSS database trusts sbxd's CA" 0 "$?"
}
# probe_start PART: the probe as a coprocess, one Chromium for the part,
# its log in $logdir/PART.log; checks that Chromium starts. Its pipes,
# copied to plain descriptors (a coprocess's own are closed in subshells),
# are written from a subshell that ignores SIGPIPE: a probe that died
# fails its checks rather than kill the session. br_do CMD... sends one
# command and reads its JSON reply into $body, with a deadline.
probe_start() {
  local t
  coproc br_probe { HOME=$probe_home exec /usr/bin/node "$here/../../browser/probe.mjs" /usr/bin/chromium 2>>"$logdir/$1.log"; }
  br_pid=$br_probe_PID
  exec {br_in}>&"${br_probe[1]}" {br_out}<&"${br_probe[0]}"
  t=$(now)
  body=
  IFS= read -r -t 960 body <&"$br_out"
  check "$1: headless Chromium starts" True "$(py "b.get('ready')" 2>/dev/null)"
  echo "SBXD-TIME: $1 Chromium $(py "b.get('version')" 2>/dev/null) launch $(elapsed "$t") s"
}
br_send() { (trap '' PIPE; printf '%s\n' "$*" >&"$br_in") 2>/dev/null; }
br_do() { body=; br_send "$@" && IFS= read -r -t 960 body <&"$br_out"; }
# probe_end PART: ends the probe and its Chromium.
probe_end() {
  br_send quit
  wait_exit "$br_pid" 120
  check "$1: the probe and Chromium end" 0 "${st:-still running}"
  [ -z "$st" ] && kill "$br_pid" 2>/dev/null
  exec {br_in}>&- {br_out}<&-
}
