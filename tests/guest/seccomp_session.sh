#!/usr/bin/env bash
# Level-1 side of the seccomp test (seccomp.sh runs it through tests/nested).
# Boots the minimal image with the agent, virtio-rng and the control socket,
# jailed (--jail: its uid and gid, its own mount, network, IPC and UTS
# namespaces, a root that holds only its directory: a host path does not
# open), and checks, on the running sbx-vmm: every thread is named after its class
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
# The first VMM is jailed: its directory, owned by the ids it runs as,
# holds its sockets and its snapshot.
jail=$w/jail jail_uid=4242 jail_gid=4343
mkdir "$jail" && echo inside >"$jail/inside" && chown -R "$jail_uid:$jail_gid" "$jail" && chmod 0700 "$jail"
uds=$jail/v.sock control_sock=$jail/control.sock snap=$jail/vm.snap
export SBX_AGENT_UDS=$uds SBX_AGENT_TOKEN=$token
trap 'kill -9 ${vmm_pid:-} 2>/dev/null; rm -rf "$w"' EXIT
cmdline="console=ttyS0 reboot=k panic=1 i8042.noaux i8042.nomux i8042.nopnp i8042.dumbkbd quiet sbx.token=$token"
boot_args=(--kernel "$kernel" --initrd "$image" --memory 256 --cmdline "$cmdline" --rng)

"$vmm" "${boot_args[@]}" --vsock "cid=3,uds=$uds" --control "$control_sock" --snapshot-dir "$jail" \
  --jail "$jail" --jail-user "$jail_uid:$jail_gid" --jail-test-open /etc/passwd --jail-test-open /dev/kvm \
  --jail-test-open "$jail/inside" --console "file:$logdir/boot-console.log" </dev/null >"$logdir/boot-vmm.out" 2>&1 &
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

# The jail: its ids, its own namespaces, a root holding only its directory.
check "the jailed VMM runs as its uid" "$jail_uid $jail_uid $jail_uid $jail_uid" \
  "$(awk '/^Uid:/ {print $2, $3, $4, $5}' "/proc/$vmm_pid/status")"
check "... and gid, with no supplementary group" "$jail_gid $jail_gid $jail_gid $jail_gid|" \
  "$(awk '/^Gid:/ {printf "%s %s %s %s", $2, $3, $4, $5} /^Groups:/ {printf "|%s", $2}' "/proc/$vmm_pid/status")"
for ns in mnt net ipc uts; do
  if [ "$(readlink "/proc/$vmm_pid/ns/$ns")" != "$(readlink "/proc/self/ns/$ns")" ]; then
    ok "... in its own $ns namespace"
  else
    bad "... in the host's $ns namespace"
  fi
done
check "... its root holds only its directory's path" "$(cut -d/ -f2 <<<"$jail")" "$(ls -A "/proc/$vmm_pid/root/")"
check "... and its directory is there" "$(ls -A "$jail")" "$(ls -A "/proc/$vmm_pid/root$jail")"
check "... a host path is gone for it (a test hook opens /etc/passwd)" 1 \
  "$(grep -c 'jail test: open /etc/passwd: No such file or directory' "$logdir/boot-vmm.out")"
check "... /dev/kvm too" 1 "$(grep -c 'jail test: open /dev/kvm: No such file or directory' "$logdir/boot-vmm.out")"
check "... a file in its directory opens" 1 "$(grep -c "jail test: open $jail/inside: opened" "$logdir/boot-vmm.out")"

# No capability left in any set of any thread (it ran as root until the VM
# was assembled; capabilities are per thread, so each thread is read).
no_caps="CapInh:=0000000000000000 CapPrm:=0000000000000000 CapEff:=0000000000000000 CapBnd:=0000000000000000 CapAmb:=0000000000000000"
caps_report() {
  local t
  for t in /proc/"$1"/task/*; do
    printf '%s %s\n' "$(cat "$t/comm")" \
      "$(awk '/^Cap(Inh|Prm|Eff|Bnd|Amb):/ {printf "%s%s=%s", sep, $1, $2; sep=" "}' "$t/status")"
  done | sort
}
caps=$(caps_report "$vmm_pid")
check "no capability left in the main thread once the VM runs" "sbx-run $no_caps" "$(grep '^sbx-run ' <<<"$caps")"
check "... nor in any other thread" "" "$(grep -v " $no_caps\$" <<<"$caps")"
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

# A lazy restore starts its fault and loader threads while it restores,
# before the main thread drops its capabilities and enters its jail: they
# drop their own, and take the jail's ids with it (glibc's setxid
# broadcast, which their filters allow for those ids only).
jail2=$w/jail2
mkdir "$jail2" && chown "$jail_uid:$jail_gid" "$jail2"
"$vmm" --restore "$snap" --restore-mode lazy --vsock "cid=3,uds=$jail2/v.sock" --console none \
  --jail "$jail2" --jail-user "$jail_uid:$jail_gid" </dev/null >"$w/lazy.out" 2>&1 &
vmm_pid=$!
lazy_running() { grep -q '^sbx-vcpu0 ' <<<"$(caps_report "$vmm_pid")"; }
if wait_until 120 "the lazily restored VM to run" lazy_running; then
  caps=$(caps_report "$vmm_pid")
  printf 'LAZY-THREADS: %s\n' "$(cut -d' ' -f1 <<<"$caps" | tr '\n' ' ')"
  check "a lazy restore's fault thread has no capability" "sbx-lazy-fault $no_caps" \
    "$(grep '^sbx-lazy-fault ' <<<"$caps")"
  check "... nor has any thread of the restored VMM" "" "$(grep -v " $no_caps\$" <<<"$caps")"
  uids=$(for t in /proc/"$vmm_pid"/task/*; do awk '/^Uid:/ {print $2, $3, $4, $5}' "$t/status"; done | sort -u)
  check "... every thread of the jailed, lazily restored VMM runs as the jail's uid" \
    "$jail_uid $jail_uid $jail_uid $jail_uid" "$uids"
else
  bad "the lazily restored VM never ran: $(tail -n 5 "$w/lazy.out")"
fi
kill -TERM "$vmm_pid"
wait_exit "$vmm_pid" 60
check "... and it exits 0 on SIGTERM" 0 "${st:-still running}"
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
# Not jailed, with a control server started before the main thread drops
# its capabilities: its thread drops its own.
"$vmm" "${boot_args[@]}" --seccomp off --console none --control "$w/c-off.sock" </dev/null >"$w/off.out" 2>&1 &
vmm_pid=$!
has_vcpu() { grep -q '^sbx-vcpu0 ' <<<"$(threads_report "$vmm_pid")"; }
wait_until 60 "sbx-vmm --seccomp off started its vCPU" has_vcpu
check "with --seccomp off, no thread is filtered" "" "$(threads_report "$vmm_pid" | grep -v ' 0 ')"
caps=$(caps_report "$vmm_pid")
check "... and, not jailed, its control thread has no capability" "sbx-control $no_caps" \
  "$(grep '^sbx-control ' <<<"$caps")"
check "... nor has any thread" "" "$(grep -v " $no_caps\$" <<<"$caps")"
kill -TERM "$vmm_pid"
wait_exit "$vmm_pid" 60
vmm_pid=

echo "SECCOMP-SESSION-FAILURES: $failures"
exit "$failures"
