# sbxd part "shapes" (sourced by session.sh, sbxd running): what a sandbox
# is made of, through real requests (curl on sbxd's socket, and sbx piped,
# which prints JSON):
#  1. A new sandbox (from the warm template once there is one): `df /` in
#     it is its diskGib (the slim image is 2 GiB; the guest grows its file
#     system to the disk at boot, images/README.md "sbx-growfs.service"),
#     its host name is its own (its id with '-' for '_', RFC 1123), in
#     /etc/hostname and on /etc/hosts' 127.0.1.1 line; `sbx info` and
#     `sbx history` (JSON) show it and the commands `sbx exec` ran.
#  2. Admission: with --memory-budget-mib 3072 a memory fork of 3 of this
#     1024 MiB sandbox (4 × 1024 MiB with the parent) is 503
#     capacity_exceeded and changes nothing; with a budget that fits it
#     gives 3 running children with distinct ids, tokens, MACs and host
#     names, each with the parent's counting process, whose counters then
#     go their own ways (one child's stopped, the others' move on), and a
#     file written in one child is in no other.
#  3. `stop` with memory:false, then `resume`: a cold boot (another boot
#     id), memoryRestored false with resumeReason no_memory_snapshot, the
#     file still there.
#  4. `stop` (with memory), then `sbx resume --disk 12G`: memoryRestored
#     false, resumeReason resized, the file still there, and `df /` shows
#     12 GiB, and the sandbox's diskGib is 12. A diskGib below the disk is
#     400.
# Deletes every sandbox it made and restarts sbxd with its default flags
# (as limits.sh does).
# shellcheck shell=bash
# session.sh and lib.sh set w, sock, code, body, state, sbxd_pid:
# shellcheck disable=SC2154

sp_gib=$((1 << 30))
sp_ids=
# sp_x ID CMD...: CMD's stdout in sandbox ID through sbx exec (recorded in its history).
sp_x() { local id=$1; shift; sbxc exec "$id" -n -- "$@" 2>/dev/null; }
# sp_df ID: the size of the guest's root file system, in bytes.
sp_df() { sp_x "$1" df -B1 --output=size / | tail -n 1 | tr -d ' '; }
# sp_df_is ID GIB: df / is GIB GiB less ext4's overhead (its inode tables,
# journal and group descriptors, about 3 % here; at most 10 % allowed).
sp_df_is() {
  local size
  size=$(sp_df "$1")
  [ -n "$size" ] && [ "$size" -le $(($2 * sp_gib)) ] && [ "$size" -ge $(($2 * sp_gib * 90 / 100)) ]
}
sp_df_text() { awk -v b="$(sp_df "$1")" 'BEGIN { printf "%.2f GiB", b / 2^30 }'; }
sp_label() { printf '%s' "$1" | tr _ -; }
sp_boot_id() { sp_x "$1" cat /proc/sys/kernel/random/boot_id; }
sp_mac() { sp_x "$1" sh -c 'cat /sys/class/net/e*/address 2>/dev/null | head -n 1'; }
sp_limit() { api GET /v1/limits; py "b['limits']['$1']" 2>/dev/null; }
sp_budget_default=$(sp_limit memoryBudgetMib)

# 1. A new sandbox, its disk and its name.
t=$(now)
api POST /v1/sandboxes '{"cpus":1,"memoryMib":1024,"noAutoStop":true,"labels":{"test":"shapes"}}'
check "shapes: create answers 201" 201 "$code"
sp_a=$(py "b['sandbox']['id']" 2>/dev/null)
sp_ids="$sp_ids $sp_a"
echo "SBXD-TIME: shapes create $(elapsed "$t") s; warnings: $(py "b['warnings']" 2>/dev/null)"
sp_disk=$(py "b['sandbox']['diskGib']" 2>/dev/null)
check "shapes: it has the default disk" 8 "$sp_disk"
if [ -n "$sp_a" ]; then
  # A cold boot grows the file system beside the agent: it may still be at it.
  WAIT_INTERVAL=1 wait_until 600 "df / of $sp_a at its ${sp_disk:-8} GiB" sp_df_is "$sp_a" "${sp_disk:-8}" &&
    ok "shapes: df / in the new sandbox is its disk: $(sp_df_text "$sp_a") of ${sp_disk:-8} GiB" ||
    bad "shapes: df / in the new sandbox is $(sp_df_text "$sp_a"), not its ${sp_disk:-8} GiB"
  check "shapes: the growth was sbx-growfs.service's, done" active "$(sp_x "$sp_a" systemctl is-active sbx-growfs.service)"
  sp_name=$(sp_label "$sp_a")
  check "shapes: its host name is its own (its id, RFC 1123)" "$sp_name" "$(sp_x "$sp_a" hostname)"
  check "shapes: ... in /etc/hostname" "$sp_name" "$(sp_x "$sp_a" cat /etc/hostname)"
  check "shapes: ... and resolving to 127.0.1.1 (/etc/hosts)" "127.0.1.1 $sp_name" \
    "$(sp_x "$sp_a" getent hosts "$sp_name" | xargs)"
  check "shapes: a file written in it" kept "$(sp_x "$sp_a" sh -c 'echo kept >/root/shapes-file && sync && cat /root/shapes-file')"
  body=$(sbxc info "$sp_a" 2>/dev/null)
  check "shapes: sbx info (JSON) shows it running with its disk and host name" "sandbox $sp_a running 8 $sp_name" \
    "$(py "b['type'] + ' ' + b['sandbox']['id'] + ' ' + b['sandbox']['state'] + ' ' + str(b['sandbox']['diskGib']) + ' ' + b['sandbox']['hostname']" 2>/dev/null)"
  body=$(sbxc history "$sp_a" 2>/dev/null)
  check "shapes: sbx history (JSON) has the commands sbx exec ran, with their exit codes" "history yes" \
    "$(py "b['type'] + ' ' + ('yes' if any('shapes-file' in str(h['command']) and h['exitCode'] == 0 for h in b['history']) and any('hostname' in str(h['command']) for h in b['history']) else 'no: ' + str(b['history'])[:300])" 2>/dev/null)"
fi

# Nothing else boots beside what follows (a second guest booting at once
# under the nested harness once hung one of them).
wait_until 900 "the warm template" sh -c "ls -d '$state'/templates/slim-* 2>/dev/null | grep -v '[.]tmp-' | grep -q ."

# 2. Admission, then a memory fork of 3.
if [ -n "$sp_a" ]; then
  proc=$(agent "$sp_a" exec --detach --shell 'i=0; while :; do i=$((i+1)); echo $i >/tmp/counter; sleep 0.05; done' 2>/dev/null)
  pid=; wait_until 120 "the PID of the counting process" counter_pid "$sp_a"; sp_pid=$pid
  wait_counter sp_count 120 0 counter_of "$sp_a"
  [ -n "$sp_pid" ] && ok "shapes: counting process $sp_pid at ${sp_count:-?}" || bad "shapes: the counter did not start"

  kill "$sbxd_pid"; wait "$sbxd_pid"
  start_sbxd --memory-budget-mib 3072
  check "shapes: /v1/limits reports the budget" 3072 "$(sp_limit memoryBudgetMib)"
  api POST "/v1/sandboxes/$sp_a/fork" '{"count":3}'
  check "shapes: a fork of 3 past the memory budget is 503 capacity_exceeded" "503 capacity_exceeded False" \
    "$code $(py "b['code'] + ' ' + str(b['ok'])" 2>/dev/null)"
  check "shapes: ... saying so" 1 "$(py "int('budget' in b['message'].lower())" 2>/dev/null)"
  check "shapes: ... and nothing started: the parent runs on alone" "1 running" \
    "$(vmm_count) $(api GET "/v1/sandboxes/$sp_a"; py "b['sandbox']['state']" 2>/dev/null)"

  kill "$sbxd_pid"; wait "$sbxd_pid"
  start_sbxd --memory-budget-mib 8192
  t=$(now)
  api POST "/v1/sandboxes/$sp_a/fork" '{"count":3}'
  check "shapes: with room, the memory fork of 3 answers 201" 201 "$code"
  echo "SBXD-TIME: shapes fork of 3 $(elapsed "$t") s"
  sp_kids=$(py "' '.join(s['id'] for s in b['sandboxes'])" 2>/dev/null)
  sp_ids="$sp_ids $sp_kids"
  check "shapes: three running children with distinct ids" "3 3 running" \
    "$(py "'%d %d %s' % (len(b['sandboxes']), len({s['id'] for s in b['sandboxes']}), ' '.join(sorted({s['state'] for s in b['sandboxes']})))" 2>/dev/null)"
  sp_tokens=$(vmm_field "$sp_a" token) sp_macs=$(sp_mac "$sp_a") sp_names=$(sp_x "$sp_a" hostname)
  for c in $sp_kids; do
    sp_tokens="$sp_tokens $(vmm_field "$c" token)" sp_macs="$sp_macs $(sp_mac "$c")"
    sp_names="$sp_names $(sp_x "$c" hostname)"
    check "shapes: child $c has the parent's counting process" "$sp_pid" \
      "$(agent "$c" status "$proc" | sed -n 's/.*"pid":\([0-9]*\).*/\1/p')"
    check "shapes: child $c is named after itself" "$(sp_label "$c")" "$(sp_x "$c" hostname)"
  done
  check "shapes: four distinct tokens (parent and children)" 4 "$(printf '%s\n' $sp_tokens | sort -u | grep -c .)"
  check "shapes: four distinct MACs" 4 "$(printf '%s\n' $sp_macs | grep '^[0-9a-f:]\{17\}$' | sort -u | grep -c .)"
  check "shapes: ... each the one the sandbox view names" "$(printf '%s\n' $sp_macs | sed 1d | xargs)" \
    "$(for c in $sp_kids; do api GET "/v1/sandboxes/$c"; py "b['sandbox']['network']['mac']" 2>/dev/null; done | xargs)"
  check "shapes: four distinct host names" 4 "$(printf '%s\n' $sp_names | sort -u | grep -c .)"

  # The counters go their own ways: stopped in the first child, moving
  # on in the others (each from its own copy of the parent's memory).
  set -- $sp_kids
  sp_c1=${1:-} sp_c2=${2:-} sp_c3=${3:-}
  if [ -n "$sp_c3" ]; then
    agent "$sp_c1" exec -- kill "$sp_pid" >/dev/null 2>&1
    sp_stopped() { ! agent "$sp_c1" exec -- kill -0 "$sp_pid" >/dev/null 2>&1; }
    wait_until 60 "the counter of $sp_c1 to end" sp_stopped
    sp_c1_at=$(counter_of "$sp_c1")
    for c in "$sp_c2" "$sp_c3" "$sp_a"; do
      sp_from=$(counter_of "$c")
      wait_counter sp_to 120 "${sp_from:-0}" counter_of "$c" &&
        ok "shapes: the counter in $c moves on by itself (${sp_from} then ${sp_to})" ||
        bad "shapes: the counter in $c did not move past ${sp_from} (last '${sp_to}')"
    done
    check "shapes: ... while the one stopped in $sp_c1 stays" "$sp_c1_at" "$(counter_of "$sp_c1")"
    agent "$sp_c1" exec -- sh -c "echo $sp_c1 >/root/only-here" >/dev/null
    check "shapes: a file written in one child is there" "$sp_c1" "$(agent "$sp_c1" exec -- cat /root/only-here)"
    check "shapes: ... and in no other sandbox of the fork" "absent absent absent" \
      "$(for c in "$sp_c2" "$sp_c3" "$sp_a"; do agent "$c" exec -- sh -c 'test -e /root/only-here && echo present || echo absent'; done | xargs)"
  fi
  for c in $sp_kids; do
    api DELETE "/v1/sandboxes/$c"
    check "shapes: delete child $c" 200 "$code"
  done
  kill "$sbxd_pid"; wait "$sbxd_pid"
  start_sbxd
  check "shapes: sbxd is back to its default budget" "$sp_budget_default" "$(sp_limit memoryBudgetMib)"
fi

# 3. Stop without memory, then resume: a cold boot from the disk.
if [ -n "$sp_a" ]; then
  sp_boot=$(sp_boot_id "$sp_a")
  t=$(now)
  api POST "/v1/sandboxes/$sp_a/stop" '{"memory":false}'
  check "shapes: stop with memory:false answers 200, stopped" "200 stopped" "$code $(py "b['sandbox']['state']" 2>/dev/null)"
  echo "SBXD-TIME: shapes disk-only stop $(elapsed "$t") s"
  check "shapes: ... and keeps no memory" no "$([ -e "$state/sandboxes/$sp_a/memory.snap" ] && echo yes || echo no)"
  t=$(now)
  api POST "/v1/sandboxes/$sp_a/resume" '{}'
  check "shapes: its resume is a cold boot: memoryRestored false, no_memory_snapshot" "200 False no_memory_snapshot" \
    "$code $(py "str(b['memoryRestored']) + ' ' + str(b.get('resumeReason'))" 2>/dev/null)"
  echo "SBXD-TIME: shapes resume (cold) $(elapsed "$t") s"
  check "shapes: ... another boot (a new boot id)" yes \
    "$(b2=$(sp_boot_id "$sp_a"); [ -n "$b2" ] && [ "$b2" != "$sp_boot" ] && echo yes)"
  check "shapes: ... the file is there" kept "$(sp_x "$sp_a" cat /root/shapes-file)"
  check "shapes: ... the host name is the sandbox's again" "$sp_name" "$(sp_x "$sp_a" hostname)"
fi

# 4. Stop with memory, resume on a bigger disk: resized, a cold boot, and
# the file system grows to the new disk.
if [ -n "$sp_a" ]; then
  api POST "/v1/sandboxes/$sp_a/stop" '{}'
  check "shapes: stop (with memory) answers 200" "200 yes" \
    "$code $([ -s "$state/sandboxes/$sp_a/memory.snap" ] && echo yes)"
  api POST "/v1/sandboxes/$sp_a/resume" '{"diskGib":4}'
  check "shapes: a resume may not shrink the disk: 400 invalid_argument" "400 invalid_argument" \
    "$code $(py "b['code']" 2>/dev/null)"
  t=$(now)
  # (through sbx: its last JSON line is the ready event, with the sandbox)
  body=$(sbxc --json resume "$sp_a" --disk 12G 2>&1 | tail -n 1)
  check "shapes: sbx resume --disk 12G is resized: memoryRestored false" "ready False resized" \
    "$(py "b['type'] + ' ' + str(b['memoryRestored']) + ' ' + str(b.get('resumeReason'))" 2>/dev/null)"
  echo "SBXD-TIME: shapes resume (resized disk) $(elapsed "$t") s"
  check "shapes: ... the file is intact" kept "$(sp_x "$sp_a" cat /root/shapes-file)"
  check "shapes: ... the sandbox's diskGib is 12 now" 12 "$(py "b['sandbox']['diskGib']" 2>/dev/null)"
  api GET "/v1/sandboxes/$sp_a"
  check "shapes: ... and stays 12 in its view" "200 12" "$code $(py "b['sandbox']['diskGib']" 2>/dev/null)"
  WAIT_INTERVAL=1 wait_until 600 "df / of $sp_a at 12 GiB" sp_df_is "$sp_a" 12 &&
    ok "shapes: ... and df / shows the bigger disk: $(sp_df_text "$sp_a") of 12 GiB" ||
    bad "shapes: df / after the resized resume is $(sp_df_text "$sp_a"), not 12 GiB"
  check "shapes: ... with room to write past the old size" ok \
    "$(sp_x "$sp_a" sh -c 'fallocate -l 9G /root/big && rm /root/big && echo ok')"
fi

for s in $sp_ids; do
  api DELETE "/v1/sandboxes/$s"
done
api GET "/v1/sandboxes?labels=test%3Dshapes"
check "shapes: no sandbox left" 0 "$(py "len(b['sandboxes'])" 2>/dev/null)"
check "shapes: no VMM left" 0 "$(vmm_count)"
check "shapes: no sandbox folder left" 0 "$(ls "$state/sandboxes" | grep -c .)"
