# sbxd part "timers" (sourced by session.sh, sbxd running): the lifecycle
# timers (docs/api.md, "Auto-stop and idle pause") with their time scaled
# down: sbxd is restarted with --min-ttl-seconds 1 --idle-minute-seconds 2.
#  1. A sandbox made with ttl 20 s and a counting process; `sbx ttl`
#     renews it (autoStopAt moves later); at the deadline it is stopped
#     with memory (state stopped, reason auto_stop in the events); an exec
#     on it is 409 (a stopped sandbox is not woken); a resume restores its
#     memory and the process kept its PID.
#  2. A sandbox made with idleMinutes 3 (6 s here) becomes paused (reason
#     idle); an exec on it succeeds (wake on request) and it runs again.
# Both are deleted; sbxd is restarted with its default flags.
# shellcheck shell=bash

kill "$sbxd_pid"; wait "$sbxd_pid"
start_sbxd --min-ttl-seconds 1 --idle-minute-seconds 2
tm_ids=
tm_state() { api GET "/v1/sandboxes/$1"; py "b['sandbox']['state']" 2>/dev/null; }
tm_is() { [ "$(tm_state "$1")" = "$2" ]; }
# tm_reason ID FROM TO: the reason of ID's last state change FROM -> TO
# since this part began (GET /v1/events gives 1000 at a time, oldest first).
tm_since=$(last_event)
tm_reason() {
  state_changes "$1" "$tm_since" | tr ' ' '\n' | sed -n "s/^$2>$3:\{0,1\}//p" | tail -n 1
}

# 1. The auto-stop.
t=$(now)
api POST /v1/sandboxes '{"cpus":1,"memoryMib":1024,"ttl":"20s","labels":{"test":"timers"}}'
check "timers: a create with ttl 20s answers 201" 201 "$code"
tm_a=$(py "b['sandbox']['id']" 2>/dev/null)
tm_ids="$tm_ids $tm_a"
echo "SBXD-TIME: timers create $(elapsed "$t") s"
tm_at=$(py "b['sandbox']['autoStopAt']" 2>/dev/null)
check "timers: ... with ttlSeconds 20 and a deadline" "20 yes" \
  "$(py "b['sandbox']['ttlSeconds']" 2>/dev/null) $([ -n "$tm_at" ] && [ "$tm_at" != None ] && echo yes)"
if [ -n "$tm_a" ]; then
  body=$(sbxc ttl "$tm_a" 30 2>/dev/null | tail -n 1)
  tm_renewed=$(py "b['autoStopAt']" 2>/dev/null)
  check "timers: sbx ttl renews: autoStopAt moves later" yes \
    "$([ -n "$tm_renewed" ] && [[ "$tm_renewed" > "$tm_at" ]] && echo yes)"
  check "timers: ... with the new length" 30 "$(py "b['sandbox']['ttlSeconds']" 2>/dev/null)"
  proc=$(agent "$tm_a" exec --detach --shell 'i=0; while :; do i=$((i+1)); echo $i >/tmp/counter; sleep 0.05; done' 2>/dev/null)
  pid=; wait_until 60 "the PID of the counting process" counter_pid "$tm_a"; tm_pid=$pid
  [ -n "$tm_pid" ] && ok "timers: counting process $tm_pid" || bad "timers: the counter did not start"
  t=$(now)
  WAIT_INTERVAL=0.5 wait_until 180 "the auto-stop of $tm_a" tm_is "$tm_a" stopped \
    && ok "timers: at its deadline the sandbox is stopped" || bad "timers: not stopped by its deadline ($(tm_state "$tm_a"))"
  echo "SBXD-TIME: timers auto-stop after the wait $(elapsed "$t") s"
  check "timers: ... by the auto-stop (the event's reason)" auto_stop "$(tm_reason "$tm_a" stopping stopped)"
  check "timers: ... with its memory" yes "$([ -s "$state/sandboxes/$tm_a/memory.snap" ] && echo yes)"
  api POST "/v1/sandboxes/$tm_a/exec" '{"command":["true"]}'
  check "timers: an exec on a stopped sandbox is 409, it is not woken" "409 invalid_state stopped" \
    "$code $(py "b['code']" 2>/dev/null) $(tm_state "$tm_a")"
  api POST "/v1/sandboxes/$tm_a/resume" '{}'
  check "timers: the resume restores its memory" "200 True" "$code $(py "b['memoryRestored']" 2>/dev/null)"
  check "timers: ... and starts the auto-stop again" 30 "$(py "b['sandbox']['ttlSeconds']" 2>/dev/null)"
  check "timers: the counting process kept its PID" "$tm_pid" \
    "$(agent "$tm_a" status "$proc" | sed -n 's/.*"pid":\([0-9]*\).*/\1/p')"
  body=$(sbxc ttl "$tm_a" off 2>/dev/null | tail -n 1)
  check "timers: sbx ttl off: no deadline" None "$(py "b['autoStopAt']" 2>/dev/null)"
  api DELETE "/v1/sandboxes/$tm_a"
  check "timers: delete of the auto-stopped sandbox" 200 "$code" && tm_ids=${tm_ids/ $tm_a/}
fi

# 2. The idle pause, and the wake on request. After the warm template: no
# two guests boot at once under the nested harness.
wait_until 900 "the warm template" sh -c "ls -d '$state'/templates/slim-* 2>/dev/null | grep -v '[.]tmp-' | grep -q ."
t=$(now)
api POST /v1/sandboxes '{"cpus":1,"memoryMib":1024,"noAutoStop":true,"idleMinutes":3,"labels":{"test":"timers"}}'
check "timers: a create with idleMinutes 3 answers 201" 201 "$code"
tm_b=$(py "b['sandbox']['id']" 2>/dev/null)
tm_ids="$tm_ids $tm_b"
echo "SBXD-TIME: timers create (idle) $(elapsed "$t") s"
if [ -n "$tm_b" ]; then
  t=$(now)
  WAIT_INTERVAL=0.5 wait_until 180 "the idle pause of $tm_b" tm_is "$tm_b" paused \
    && ok "timers: after 3 idle minutes (6 s) it is paused" || bad "timers: not paused ($(tm_state "$tm_b"))"
  echo "SBXD-TIME: timers idle pause after $(elapsed "$t") s"
  check "timers: ... by the idle timer (the event's reason)" idle "$(tm_reason "$tm_b" stopping paused)"
  check "timers: no VMM runs while it is paused" 0 "$(pgrep -f -- "--snapshot-dir $state/sandboxes/$tm_b" | grep -c .)"
  api GET "/v1/sandboxes/$tm_b"
  tm_activity=$(py "b['sandbox']['lastActivityAt']" 2>/dev/null)
  tm_paused_at=$(last_event)
  t=$(now)
  check "timers: an exec on the paused sandbox wakes it and runs" "woken $tm_b" \
    "$(sbxc exec "$tm_b" -n -- sh -c "echo woken $tm_b" 2>"$w/timers.exec.err")"
  echo "SBXD-TIME: timers exec with a wake $(elapsed "$t") s"
  # Its events, not its state now: 6 s after the exec a new idle pause
  # may have begun (hosted.sh).
  check "timers: woken (the event's reason), it runs again" "paused>creating:wake creating>running" \
    "$(state_changes "$tm_b" "$tm_paused_at" | cut -d' ' -f1-2)"
  api GET "/v1/sandboxes/$tm_b"
  check "timers: lastActivityAt moved" yes \
    "$([[ "$(py "b['sandbox']['lastActivityAt']" 2>/dev/null)" > "$tm_activity" ]] && echo yes)"
  body=$(sbxc idle "$tm_b" off 2>/dev/null | tail -n 1)
  check "timers: sbx idle off" None "$(py "b['idleMinutes']" 2>/dev/null)"
fi

# A delete while an idle pause is under way would be 409 (docs/api.md:
# one operation at a time): wait out one that began before idle off.
tm_settled() { case $(tm_state "$1") in running | paused | stopped) ;; *) false ;; esac; }
for s in $tm_ids; do
  WAIT_INTERVAL=0.5 wait_until 180 "$s to be running, paused or stopped" tm_settled "$s" ||
    bad "timers: $s is still '$(tm_state "$s")'"
  api DELETE "/v1/sandboxes/$s"
done
api GET "/v1/sandboxes?labels=test%3Dtimers"
check "timers: no sandbox left" 0 "$(py "len(b['sandboxes'])" 2>/dev/null)"
check "timers: no VMM left" 0 "$(vmm_count)"

kill "$sbxd_pid"; wait "$sbxd_pid"
start_sbxd
