# sbxd part "lifecycle" (sourced by session.sh, sbxd running): create on
# sbxd's default image (the slim one here: lib.sh), an exec in it through
# the agent, a counting process, stop with memory, resume (memoryRestored,
# same PID, counting on), a create from the warm template the first create
# had built, fork count 2 (two
# running children with the parent's process and their own tokens and
# CIDs), kill -9 of sbxd and a restart that adopts every VMM, then delete
# (no VMM, folder or layer left).
# shellcheck shell=bash

# 1. Create: a cold boot of the (slim) default image to agent-ready.
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
# Its VMM runs in a cgroup of its own, limited to the sandbox's size:
# 1 CPU and half of one for the VMM's own threads, 1024 MiB of guest RAM
# plus 256 MiB for the VMM (twice the RAM: the state directory is level
# 1's tmpfs, where memory files are RAM too).
check "its VMM runs in its own cgroup" "/sandboxer/$id" "$(vmm_cgroup "$id")"
check "the cgroup's memory.max" $(((2 * 1024 + 256) << 20)) "$(cat "$cgroups/$id/memory.max" 2>&1)"
check "the cgroup's cpu.max" "150000 100000" "$(cat "$cgroups/$id/cpu.max" 2>&1)"
check "the cgroup's pids.max" 512 "$(cat "$cgroups/$id/pids.max" 2>&1)"
check "the cgroup counts the VMM's threads" yes \
  "$([ "$(cat "$cgroups/$id/pids.current" 2>/dev/null || echo 0)" -ge 2 ] && echo yes)"
# And jailed (docs/security.md, "sbx-vmm's jail"): as uid and gid
# 0x70000000 + its CID, every thread filtered, without capabilities or new
# privileges, in a root where its folder holds only vmm/.
vpid=$(vmm_field "$id" pid) vcid=$(vmm_field "$id" cid)
check "its VMM runs as uid and gid 0x70000000 + its CID" "$((0x70000000 + vcid)) $((0x70000000 + vcid))" \
  "$(awk '/^Uid:/ { u = $2 } /^Gid:/ { g = $2 } END { print u, g }' "/proc/$vpid/status" 2>&1)"
check "each VMM thread: Seccomp 2, NoNewPrivs 1, CapEff 0" "" \
  "$(for t in /proc/"$vpid"/task/*; do grep -E '^(Seccomp|NoNewPrivs|CapEff):' "$t/status" |
       grep -vE '^Seccomp:\s+2$|^NoNewPrivs:\s+1$|^CapEff:\s+0+$' | sed "s|^|${t##*/}: |"; done)"
check "in its root, its folder holds only vmm/" vmm "$(ls -A "/proc/$vpid/root$folder" 2>&1 | xargs)"
check "and nothing of the host's /etc" "" "$(ls -A "/proc/$vpid/root/etc" 2>/dev/null)"
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
check "a stopped sandbox's cgroup is gone" no "$([ -d "$cgroups/$id" ] && echo yes || echo no)"
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
wait_until 900 "the warm template" sh -c "ls -d '$state'/templates/slim-* 2>/dev/null | grep -v '[.]tmp-' | grep -q ."
t=$(now)
api POST /v1/sandboxes '{"cpus":1,"memoryMib":1024,"noAutoStop":true}'
check "a warm create answers 201" 201 "$code"
echo "SBXD-TIME: create (warm template) $(elapsed "$t") s"
check "a warm create does not cold-boot" 0 "$(py "sum('warm template' in w for w in b['warnings'])" 2>/dev/null)"
warm=$(py "b['sandbox']['id']" 2>/dev/null)
if [ -n "$warm" ]; then
  check "the warm sandbox runs commands" "warm $warm" "$(agent "$warm" exec -- sh -c "echo warm $warm")"
  check "the warm sandbox has its own token" yes "$([ "$(vmm_field "$warm" token)" != "$(vmm_field "$id" token)" ] && echo yes)"
  # Its boot goes on after the restore (the template is taken at
  # agent-ready): what a first command writes to /tmp survives the rest of
  # it (systemd-tmpfiles-setup empties /tmp in Debian's own config).
  agent "$warm" exec -- sh -c 'mkdir /tmp/early && echo kept >/tmp/early/file' >/dev/null
  agent "$warm" exec -- timeout 600 systemctl is-system-running --wait >/dev/null 2>&1
  check "the warm sandbox's boot finished: a file written to /tmp before it is still there" kept \
    "$(agent "$warm" exec -- sh -c 'systemctl show -p ActiveState --value systemd-tmpfiles-setup; cat /tmp/early/file' | tr '\n' ' ' | awk '{ print ($1 == "active") ? $2 : "tmpfiles-setup " $1 }')"
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
check "each in its own cgroup" "/sandboxer/$id $(for c in $children; do printf '/sandboxer/%s ' "$c"; done)" \
  "$(vmm_cgroup "$id") $(for c in $children; do printf '%s ' "$(vmm_cgroup "$c")"; done)"
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
check "their cgroups outlive sbxd too" "/sandboxer/$id" "$(vmm_cgroup "$id")"
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
check "no VMM cgroup left" 0 "$(find "$cgroups" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | grep -c .)"
