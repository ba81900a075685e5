# sbxd part "full_disk" (sourced by session.sh, sbxd running): a stop with
# memory on a file system that fills up (issue 14, fault injection). The
# state directory's file system (level 1's /tmp, a tmpfs) is limited to
# what it holds plus 32 MiB while a sandbox with a counting process is
# stopped: its memory does not fit. The stop answers 507
# insufficient_storage, the sandbox is running with the same VMM, its
# counter goes on and its file systems take writes again (thawed), and no
# memory file, whole or partial, is left. With the room back, the same
# sandbox stops with memory and resumes with its counter, then goes.
# shellcheck shell=bash

# From the warm template: its VMM maps the template's memory file, whose
# holes, on this full tmpfs, would have no page to give (SIGBUS) but for
# the anonymous memory over them (snapshot/hole_overlay.hpp).
api POST /v1/sandboxes '{"cpus":1,"memoryMib":1024,"noAutoStop":true,"labels":{"test":"full_disk"}}'
check "create answers 201" 201 "$code"
fd_id=$(py "b['sandbox']['id']" 2>/dev/null)
if [ -n "$fd_id" ]; then
  fd_folder=$state/sandboxes/$fd_id
  proc=$(agent "$fd_id" exec --detach --shell 'i=0; while :; do i=$((i+1)); echo $i >/tmp/counter; sleep 0.05; done' 2>/dev/null)
  pid=; wait_until 120 "the PID of the counting process" counter_pid "$fd_id"; fd_pid=$pid
  wait_counter fd_count 120 0 counter_of "$fd_id"
  fd_vmm=$(vmm_field "$fd_id" pid)

  fd_fs=$(df -P "$fd_folder" | awk 'NR == 2 { print $6 }')
  fd_used_k=$(df -Pk "$fd_folder" | awk 'NR == 2 { print $3 }')
  fd_size_k=$(df -Pk "$fd_folder" | awk 'NR == 2 { print $2 }')
  if mount -o remount,size=$((fd_used_k + 32768))k "$fd_fs"; then
    api POST "/v1/sandboxes/$fd_id/stop" '{}'
    mount -o remount,size="${fd_size_k}k" "$fd_fs"
    check "a stop whose memory does not fit answers 507" 507 "$code"
    check "its code is insufficient_storage" insufficient_storage "$(py "b['code']" 2>/dev/null)"
    api GET "/v1/sandboxes/$fd_id"
    check "the sandbox is running" running "$(py "b['sandbox']['state']" 2>/dev/null)"
    check "with the same VMM" "$fd_vmm" "$(vmm_field "$fd_id" pid)"
    check "no memory file, whole or partial, is left" "" "$(ls -A "$fd_folder" | grep -i 'memory\|[.]tmp-')"
    check "its file systems take writes (thawed)" "after $fd_id" \
      "$(agent "$fd_id" exec -- sh -c "echo after $fd_id > /root/after-full && cat /root/after-full")"
    check "the counting process kept its PID" "$fd_pid" \
      "$(agent "$fd_id" status "$proc" | sed -n 's/.*"pid":\([0-9]*\).*/\1/p')"
    wait_counter fd_after 120 "${fd_count:-0}" counter_of "$fd_id" \
      && ok "it counts on: ${fd_count} before, ${fd_after} after" \
      || bad "the counter did not move past ${fd_count} (last '${fd_after}')"
  else
    bad "cannot limit $fd_fs to its use plus 32 MiB"
  fi

  # With the room back, the same sandbox stops with memory and resumes.
  api POST "/v1/sandboxes/$fd_id/stop" '{}'
  check "with room, the stop answers 200" 200 "$code"
  check "its memory is saved" yes "$([ -s "$fd_folder/memory.snap" ] && echo yes)"
  check "the store's room reserve is there again" yes "$([ -s "$state/sbxd.db.reserve" ] && echo yes)"
  api POST "/v1/sandboxes/$fd_id/resume" '{}'
  check "resume restores the memory" True "$(py "b['memoryRestored']" 2>/dev/null)"
  check "the written file is there" "after $fd_id" "$(agent "$fd_id" exec -- cat /root/after-full)"
  api DELETE "/v1/sandboxes/$fd_id"
  check "delete answers 200" 200 "$code"
fi
