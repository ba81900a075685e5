#!/usr/bin/env bash
# Level-1 side of the seccomp test (seccomp.sh runs it through tests/nested).
# Boots the minimal image with the agent, virtio-rng and the control socket
# and checks, on the running sbx-vmm: every thread is named after its class
# and shows "Seccomp: 2" and "NoNewPrivs: 1" in /proc/PID/task/TID/status;
# the agent answers an exec, a snapshot is written (the control thread's
# filter), a pause and resume restarts the device loop (its filter stacked
# on the control thread's) and the agent still answers. Then, for each
# thread class, an sbx-vmm started with --seccomp-test-violation CLASS (the
# lazy-restore classes from that snapshot) ends with status 6 and the line
# naming the thread, its class and mount(2). --seccomp off runs with no
# filter. One "ok: ..." or "FAIL: ..." line per check; exit status: the
# number of failed checks.
# Usage: seccomp_session.sh KERNEL INITRAMFS SBX_VMM AGENTCTL LOGDIR
set -uo pipefail
kernel=$1 image=$2 vmm=$3 ctl=$4 logdir=$5
here=$(cd "$(dirname "$0")" && pwd)
export SBX_VMM_CRASH_DUMP_DIR=$logdir
failures=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; failures=$((failures + 1)); }
check() { if [ "$2" = "$3" ]; then ok "$1"; else bad "$1: expected '$2', got '$(printf %s "$3" | head -c 400)'"; fi; }
control() { /usr/bin/python3 "$here/vmm_control.py" "$control_sock" "$1"; }
# shellcheck source=SCRIPTDIR/wait_lib.sh
. "$here/wait_lib.sh"  # wait_until, wait_exit

w=$(mktemp -d /tmp/seccomp-session.XXXXXX)
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
uds=$w/v.sock control_sock=$w/control.sock snap=$w/vm.snap
export SBX_AGENT_UDS=$uds SBX_AGENT_TOKEN=$token
trap 'kill -9 ${vmm_pid:-} 2>/dev/null; rm -rf "$w"' EXIT
cmdline="console=ttyS0 reboot=k panic=1 i8042.noaux i8042.nomux i8042.nopnp i8042.dumbkbd quiet sbx.token=$token"
boot_args=(--kernel "$kernel" --initrd "$image" --memory 256 --cmdline "$cmdline" --rng)

"$vmm" "${boot_args[@]}" --vsock "cid=3,uds=$uds" --control "$control_sock" --snapshot-dir "$w" \
  --console "file:$logdir/boot-console.log" </dev/null >"$logdir/boot-vmm.out" 2>&1 &
vmm_pid=$!
# Until the agent answers, or the VMM ends (a filter that traps ends it at once).
agent_or_gone() { ! kill -0 "$vmm_pid" 2>/dev/null || "$ctl" wait --timeout 5 >/dev/null 2>&1; }
wait_until 600 "the agent to answer (or sbx-vmm to end)" agent_or_gone
if kill -0 "$vmm_pid" 2>/dev/null && "$ctl" wait --timeout 5 >/dev/null 2>&1; then
  ok "the guest's agent answers under the filters"
else
  echo "FAIL: the agent never answered; vmm output:"; tail -n 20 "$logdir/boot-vmm.out"; exit 1
fi
check "an exec through the agent" "hello" "$("$ctl" exec -- echo hello 2>/dev/null)"

# Every thread of the running VMM: its name, Seccomp and NoNewPrivs.
threads_report() {
  local t
  for t in /proc/"$1"/task/*; do
    printf '%s %s %s\n' "$(cat "$t/comm")" "$(awk '/^Seccomp:/ {print $2}' "$t/status")" \
      "$(awk '/^NoNewPrivs:/ {print $2}' "$t/status")"
  done | sort
}
report=$(threads_report "$vmm_pid")
printf 'THREADS: %s\n' "$(tr '\n' ';' <<<"$report")"
for name in sbx-run sbx-vcpu0 sbx-devices sbx-control sbx-signals; do
  check "a thread named $name" 1 "$(grep -c "^$name " <<<"$report")"
done
check "every thread runs under a seccomp filter with no_new_privs (Seccomp: 2, NoNewPrivs: 1)" "" \
  "$(grep -v ' 2 1$' <<<"$report")"

# The process as a whole: no capability left in any set (it ran as root
# until the VM was assembled), no core dump.
caps=$(awk '/^Cap(Inh|Prm|Eff|Bnd|Amb):/ {printf "%s%s=%s", sep, $1, $2; sep=" "}' "/proc/$vmm_pid/status")
check "no capability left once the VM runs" \
  "CapInh:=0000000000000000 CapPrm:=0000000000000000 CapEff:=0000000000000000 CapBnd:=0000000000000000 CapAmb:=0000000000000000" \
  "$caps"
check "no core dump (RLIMIT_CORE 0)" "0 0" "$(awk '/^Max core file size/ {print $5, $6}' "/proc/$vmm_pid/limits")"

reply=$(control "{\"op\":\"snapshot\",\"path\":\"$snap\",\"mode\":\"compressed\"}"); st=$?
check "a snapshot through the control socket (the control thread's filter)" 0 "$st"
[ -s "$snap" ] && ok "... written ($(du -k "$snap" | cut -f1) KiB)" || bad "... no snapshot file: $reply"
# The snapshot op leaves the VM paused; resume restarts the device loop
# from the control thread, under both filters.
control '{"op":"resume"}' >/dev/null
answers_again() { [ "$("$ctl" exec -- echo again 2>/dev/null)" = again ]; }
if wait_until 120 "an exec after resume" answers_again; then
  ok "after resume, an exec through the agent (devices restarted)"
else
  bad "no exec through the agent after resume"
fi
report=$(threads_report "$vmm_pid")
check "... and the restarted device thread is filtered too" "sbx-devices 2 1" "$(grep '^sbx-devices ' <<<"$report")"
control '{"op":"stop"}' >/dev/null
wait_exit "$vmm_pid" 120
check "the VMM exits 0 on stop" 0 "${st:-still running}"
vmm_pid=

# One forbidden call per class: status 6 and the reporter's line.
violate() {  # CLASS THREAD ARGS...
  local class=$1 thread=$2 out=$w/violate-$1.out
  shift 2
  timeout 120 "$vmm" "$@" --console none --seccomp-test-violation "$class" </dev/null >"$out" 2>&1; st=$?
  check "a forbidden call on the $class thread ends sbx-vmm with status 6" 6 "$st"
  if grep -q "seccomp: thread $thread ($class) made system call [0-9]* (mount), which its filter forbids" "$out"; then
    ok "... saying so: $(grep 'seccomp:' "$out")"
  else
    bad "... output: $(tail -n 5 "$out")"
  fi
}
for class in run vcpu devices control signals; do
  thread=sbx-$class
  [ "$class" = vcpu ] && thread=sbx-vcpu0
  violate "$class" "$thread" "${boot_args[@]}" --vsock "cid=3,uds=$w/v-$class.sock" --control "$w/c-$class.sock"
done
violate lazy-fault sbx-lazy-fault --restore "$snap" --restore-mode lazy --vsock "cid=3,uds=$w/v-lf.sock"
violate lazy-load sbx-lazy-load --restore "$snap" --restore-mode lazy --vsock "cid=3,uds=$w/v-ll.sock"

# --seccomp off: no filter (for debugging only; sbxd never passes it).
"$vmm" "${boot_args[@]}" --seccomp off --console none </dev/null >"$w/off.out" 2>&1 &
vmm_pid=$!
has_vcpu() { grep -q '^sbx-vcpu0 ' <<<"$(threads_report "$vmm_pid")"; }
wait_until 60 "sbx-vmm --seccomp off started its vCPU" has_vcpu
check "with --seccomp off, no thread is filtered" "" "$(threads_report "$vmm_pid" | grep -v ' 0 ')"
kill -TERM "$vmm_pid"
wait_exit "$vmm_pid" 60
vmm_pid=

echo "SECCOMP-SESSION-FAILURES: $failures"
exit "$failures"
