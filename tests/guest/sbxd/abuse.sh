# sbxd part "abuse" (sourced by session.sh, sbxd running): a guest that
# misbehaves hurts only itself (docs/security.md, issue 14 items 5 and 6).
# Two sandboxes: A misbehaves, B is the neighbour with a counting process,
# and B's exec is timed before and during each abuse (SBXD-TIME lines:
# reported, not asserted). sbxd runs with --console-log-max-bytes 8192.
#  1. A floods its serial console (20000 bytes: each is a port write, an
#     exit, about 1.2 ms apiece in the nested harness, so the cap is small
#     rather than the flood long): its console.log stays under 8 KiB, the
#     note on its first line says what was dropped, the newest output stays.
#  2. A's agent restarted: the new one answers with A's own token (not the
#     template's, on the kernel command line).
#  3. A memory hog in A: the guest's OOM killer ends it (exit 137) and not
#     the agent (oom_score_adj -1000, programs get 0; OOMPolicy=continue:
#     the same agent process after it); the VMM was not killed in its
#     cgroup (memory.events oom_kill 0); the template's memory file gained
#     no page (tmpfs holes overlaid, snapshot/hole_overlay.hpp).
#  4. A fork bomb in A under sbx exec --timeout: 124, no process of it
#     left, A answers.
#  5. sbx-hostile (tests/guest/tools) attacks A's rng and net: a register
#     storm, nine hostile descriptor chains (each leaves the device in
#     DEVICE_NEEDS_RESET), and a thousand of the same refused status
#     write, of which the VMM's log keeps a few lines; A's VMM and agent
#     go on. SBXD_ABUSE_ROUNDS (default 500): the storm's and the flood's
#     rounds; each is a few MMIO exits, about 2 ms apiece in the nested
#     harness, so a soak raises it and tests/run keeps it short.
#  6. Then blk and vsock (A's disk and agent, so detached and last): A's
#     VMM still runs, sbxd still reports it, and its delete is clean.
# B's counter moves through all of it.
# shellcheck shell=bash

ab_body='{"cpus":1,"memoryMib":1024,"noAutoStop":true,"labels":{"test":"abuse"}}'
# ab_create VAR: a sandbox from the warm template, its id in VAR (empty on failure).
ab_create() {
  api POST /v1/sandboxes "$ab_body"
  check "abuse: create $1" 201 "$code" && printf -v "$1" %s "$(py "b['sandbox']['id']" 2>/dev/null)"
}
# ab_neighbour WHAT: B's exec, timed; B's counter must have moved.
ab_count=0
ab_neighbour() {
  local t c
  t=$(now)
  # (the counter's writer truncates before it writes: read until not empty)
  c=$(sbxc exec "$ab_b" --timeout 10m -- sh -c 'c=; while [ -z "$c" ]; do c=$(cat /tmp/counter); done; echo "$c"' 2>&1)
  echo "SBXD-TIME: abuse: the neighbour's exec $1 $(elapsed "$t") s"
  if [[ $c =~ ^[0-9]+$ ]] && [ "$c" -gt "$ab_count" ]; then
    ok "abuse: the neighbour's counter moved $1 ($ab_count -> $c)"
    ab_count=$c
  else
    bad "abuse: the neighbour's counter $1: '$c' after $ab_count"
  fi
}
# ab_during PID WHAT: the neighbour's exec while PID (an abuse) runs.
ab_during() {
  local n=0
  while kill -0 "$1" 2>/dev/null && [ $n -lt 2 ]; do
    ab_neighbour "during $2"
    n=$((n + 1))
  done
}
ab_rounds=${SBXD_ABUSE_ROUNDS:-500}
# ab_section NAME: the time since the last section began, as SBXD-TIME.
ab_t=
ab_section() { [ -z "$ab_t" ] || echo "SBXD-TIME: abuse: section $ab_section_name $(elapsed "$ab_t") s"; ab_t=$(now) ab_section_name=$1; }
ab_a_answers() { [ "$(sbxc exec "$ab_a" --timeout 60s -- echo alive 2>/dev/null)" = alive ]; }
ab_vmm_pid() { vmm_field "$ab_a" pid; }

kill "$sbxd_pid"; wait "$sbxd_pid"
start_sbxd --console-log-max-bytes 8192
ab_a= ab_b=
ab_create ab_a
ab_create ab_b
if [ -n "$ab_a" ] && [ -n "$ab_b" ]; then
  agent "$ab_b" exec --detach --shell 'i=0; while :; do i=$((i+1)); echo $i >/tmp/counter; sleep 0.05; done' >/dev/null 2>&1
  wait_counter ab_count 120 0 counter_of "$ab_b" || bad "abuse: the neighbour's counter did not start"
  ab_neighbour "with A quiet"
  ab_pid=$(ab_vmm_pid)

  ab_section "flood"
  # 1. A console flood.
  ab_end=flood-end-$RANDOM
  sbxc exec "$ab_a" --timeout 20m -- sh -c \
    "{ echo flood-begin; head -c 20000 /dev/zero | tr '\\0' x; echo; echo $ab_end; } >/dev/ttyS0" &
  ab_job=$!
  ab_during $ab_job "a console flood"
  wait $ab_job
  check "abuse: the console flood ran" 0 "$?"
  ab_log=$state/sandboxes/$ab_a/console.log
  wait_until 60 "the flood's end in A's console log" grep -q "$ab_end" "$ab_log"
  check "abuse: A's console log stays under 8192 bytes" yes "$([ "$(stat -c %s "$ab_log")" -le 8192 ] && echo yes)"
  check "abuse: ... its first line says what was dropped" 1 \
    "$(head -n 1 "$ab_log" | grep -c '^\[sbx-vmm: the console log is kept under 8192 bytes: [0-9]* older bytes were dropped\]$')"
  check "abuse: ... the oldest output is what went" 0 "$(grep -c flood-begin "$ab_log")"
  check "abuse: sbx logs serves it" 1 "$(sbxc logs "$ab_a" 2>/dev/null | grep -c "$ab_end")"

  ab_section "agent restart"
  # 2. An agent that restarts (systemd's Restart=always) in a sandbox restored
  # from the template keeps the token sbxd gave it, not the command line's.
  ab_agent_pid() { sbxc exec "$ab_a" --timeout 60s -- pgrep -o -x sbx-agent 2>/dev/null; }
  ab_agent=$(ab_agent_pid)
  sbxc exec "$ab_a" --timeout 60s -- systemctl --no-block restart sbx-agent >/dev/null 2>&1
  ab_new_agent() { local p; p=$(ab_agent_pid) && [[ $p =~ ^[0-9]+$ ]] && [ "$p" != "$ab_agent" ] && ab_agent=$p; }
  wait_until 300 "a new agent in A that takes A's token" ab_new_agent &&
    ok "abuse: a restarted agent keeps the sandbox's token (agent $ab_agent)" ||
    bad "abuse: a restarted agent in A does not answer with A's token"

  ab_section "memory hog"
  # 3. A memory hog. A is restored from the warm template: what it touches
  # of the template's memory file's holes (level 1's /tmp is a tmpfs) must
  # not become the file's pages (snapshot/hole_overlay.hpp).
  ab_template_kib() { du -sk "$state"/templates/slim-* 2>/dev/null | awk '{ s += $1 } END { print s + 0 }'; }
  ab_template_before=$(ab_template_kib)
  sbxc exec "$ab_a" --timeout 20m -- python3 -c '
b = []
while True:
    b.append(b"x" * (16 << 20))' >/dev/null 2>"$w/hog.err" &
  ab_job=$!
  ab_during $ab_job "a memory hog"
  wait $ab_job
  check "abuse: the memory hog is killed by the guest's OOM killer (137)" 137 "$?" ||
    sed 's/^/SBXD-DIAG: the hog: /' "$w/hog.err"
  check "abuse: ... and not the agent" "$ab_agent" "$(ab_agent_pid)" ||
    sbxc exec "$ab_a" --timeout 5m -- journalctl -u sbx-agent --no-pager -n 40 2>&1 | sed 's/^/SBXD-DIAG: agent: /'
  check "abuse: ... in A's kernel log" yes \
    "$(sbxc exec "$ab_a" --timeout 5m -- dmesg 2>/dev/null | grep -q 'Killed process [0-9]* (python3)' && echo yes)"
  check "abuse: A's agent is shielded from the OOM killer" -1000 \
    "$(sbxc exec "$ab_a" --timeout 5m -- sh -c 'cat /proc/$(pgrep -o -x sbx-agent)/oom_score_adj' 2>&1)"
  check "abuse: ... and gives programs 0" 0 "$(sbxc exec "$ab_a" --timeout 5m -- cat /proc/self/oom_score_adj 2>&1)"
  check "abuse: A's VMM is the same process" "$ab_pid" "$(ab_vmm_pid)"
  ab_template_after=$(ab_template_kib)
  check "abuse: the template's memory file took no page for it (within 64 MiB)" yes \
    "$([ "$ab_template_after" -le $((ab_template_before + 65536)) ] && echo yes)"
  echo "SBXD-MEM: abuse: the templates hold $ab_template_before KiB before the hog, $ab_template_after after"
  ab_cg=$cgroups/$ab_a
  check "abuse: ... never OOM-killed in its cgroup" "oom_kill 0" "$(grep '^oom_kill ' "$ab_cg/memory.events" 2>&1)"
  echo "SBXD-MEM: abuse: A's VMM cgroup after the hog: $(($(cat "$ab_cg/memory.current") >> 20)) MiB," \
    "peak $(($(cat "$ab_cg/memory.peak" 2>/dev/null || echo 0) >> 20)) MiB of $(($(cat "$ab_cg/memory.max") >> 20))"

  ab_section "fork bomb"
  # 4. A fork bomb.
  sbxc exec "$ab_a" --timeout 20s -- bash -c 'b() { b | b & }; b; sleep 1000' >/dev/null 2>&1 &
  ab_job=$!
  ab_during $ab_job "a fork bomb"
  wait $ab_job
  check "abuse: the fork bomb ends at its timeout (124)" 124 "$?"
  wait_until 600 "A answers after the fork bomb" ab_a_answers
  ab_left() { [ "$(sbxc exec "$ab_a" --timeout 60s -- sh -c 'pgrep -c -x bash || true' 2>/dev/null)" = 0 ]; }
  wait_until 300 "no process of the fork bomb left in A" ab_left || bad "abuse: the fork bomb left processes"
  check "abuse: A's VMM is still the same process" "$ab_pid" "$(ab_vmm_pid)"

  ab_section "hostile rng and net"
  # 5. Hostile devices: rng and net.
  sbxc scp "$logdir/sbx-hostile" "$ab_a:/root/sbx-hostile" >/dev/null 2>&1
  sbxc exec "$ab_a" -- chmod 755 /root/sbx-hostile
  ab_vmm_log=$state/sandboxes/$ab_a/vmm.log
  ab_lines_before=$(wc -l <"$ab_vmm_log")
  sbxc exec "$ab_a" --timeout 20m -- /root/sbx-hostile --rounds "$ab_rounds" rng net >"$w/hostile.out" 2>&1 &
  ab_job=$!
  ab_during $ab_job "hostile rng and net"
  wait $ab_job
  check "abuse: sbx-hostile attacked rng and net to the end" 0 "$?"
  sed 's/^/SBXD-HOSTILE: /' "$w/hostile.out"
  for dev in rng net; do
    for kase in loop too-long outside-memory huge-length nested-indirect odd-indirect head-past-queue \
      avail-ahead rings-outside-memory; do
      check "abuse: $dev, $kase: the device needs reset" 1 \
        "$(grep -cE "^SBX-HOSTILE: $dev $kase status=0x[0-9a-f]*[4-7cdef][0-9a-f]\$" "$w/hostile.out")"
    done
  done
  check "abuse: A's VMM outlived the attack" "$ab_pid" "$(pgrep -f -- "--snapshot-dir $state/sandboxes/$ab_a/" | head -n 1)"
  check "abuse: A's agent still answers" alive "$(sbxc exec "$ab_a" --timeout 5m -- echo alive 2>&1)"
  # Each device: 18 failures and $ab_rounds refused status writes, of
  # which its log budget (base/log_budget.hpp) lets 8 lines through a minute.
  ab_lines=$(($(wc -l <"$ab_vmm_log") - ab_lines_before))
  check "abuse: $((2 * (ab_rounds + 18))) mistakes on two devices, at most 20 lines in the VMM's log" yes \
    "$([ "$ab_lines" -ge 1 ] && [ "$ab_lines" -le 20 ] && echo yes)"
  echo "SBXD-HOSTILE: $ab_lines lines logged; the VMM's log is $(stat -c %s "$ab_vmm_log") bytes"

  ab_section "hostile blk and vsock"
  # 6. blk and vsock: A's disk and A's agent go, so the attack is detached
  # and the VMM's log says when it reached its end (vsock's flood).
  sbxc exec "$ab_a" --detach -- /root/sbx-hostile --rounds "$ab_rounds" --done-to /dev/ttyS0 blk vsock >/dev/null 2>&1
  ab_hostile_done() { grep -q '^SBX-HOSTILE: done' "$ab_log"; }
  wait_until 900 "sbx-hostile's end on A's console" ab_hostile_done ||
    bad "abuse: sbx-hostile did not finish with blk and vsock"
  grep -a 'virtio-blk\|virtio-vsock' "$ab_vmm_log" | tail -n 4 | sed 's/^/SBXD-HOSTILE: vmm.log: /'
  ab_neighbour "after hostile blk and vsock"
  check "abuse: A's VMM outlived blk and vsock too" "$ab_pid" \
    "$(pgrep -f -- "--snapshot-dir $state/sandboxes/$ab_a/" | head -n 1)"
  ab_section end
  api GET "/v1/sandboxes/$ab_a"
  check "abuse: sbxd still reports A running" running "$(py "b['sandbox']['state']" 2>/dev/null)"
fi
for s in $ab_a $ab_b; do
  api DELETE "/v1/sandboxes/$s"
  check "abuse: delete $s" 200 "$code"
done
check "abuse: no VMM left" 0 "$(vmm_count)"
kill "$sbxd_pid"; wait "$sbxd_pid"
start_sbxd
