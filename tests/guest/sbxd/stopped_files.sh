# sbxd part "stopped_files" (sourced by session.sh, sbxd running): the files
# of a stopped sandbox, read from its disk without resuming it. One
# sandbox from the warm template; a file and a directory written through
# the API, a symlink and a file written by a guest process just before
# the stop (only the freeze puts that one on the disk); stop with memory;
# stat, list and download through the API and sbx while the sandbox stays
# stopped with no VMM; a write, mkdir and remove are 409; a resume thaws
# the guest (a write there finishes); delete.
# shellcheck shell=bash

sf_files() { printf '/v1/sandboxes/%s/files%s' "$sf" "$1"; }
sf_vmms() { pgrep -f -- "--snapshot-dir $state/sandboxes/$sf" | grep -c .; }

api POST /v1/sandboxes '{"cpus":1,"memoryMib":1024,"noAutoStop":true,"labels":{"test":"stopped_files"}}'
check "stopped_files: create answers 201" 201 "$code"
sf=$(py "b['sandbox']['id']" 2>/dev/null)
check "stopped_files: from the warm template" 0 "$(py "sum('warm template' in w for w in b['warnings'])" 2>/dev/null)"

api POST "$(sf_files /mkdir)" '{"path":"/root/sf/dir","parents":true}'
check "stopped_files: mkdir through the API" 200 "$code"
check "stopped_files: upload through the API" 200 "$(printf 'written through the API\n' |
  curl -sS --unix-socket "$sock" -T - -o /dev/null -w '%{http_code}' --max-time 300 \
    "http://sbxd$(sf_files '?path=/root/sf/dir/api.txt')")"
agent "$sf" exec -- sh -c 'ln -s /root/sf/dir/api.txt /root/sf/abs-link && printf "late write\n" >/root/sf/late.txt' \
  >/dev/null 2>&1
check "stopped_files: the guest wrote late.txt" "late write" "$(agent "$sf" exec -- cat /root/sf/late.txt)"

t=$(now)
api POST "/v1/sandboxes/$sf/stop" '{}'
check "stopped_files: stop with memory" stopped "$(py "b['sandbox']['state']" 2>/dev/null)"
echo "SBXD-TIME: stopped_files stop $(elapsed "$t") s"
check "stopped_files: the memory is saved" yes "$([ -s "$state/sandboxes/$sf/memory.snap" ] && echo yes)"
check "stopped_files: no VMM while stopped" 0 "$(sf_vmms)"

t=$(now)
api GET "$(sf_files '/stat?path=/root/sf/dir/api.txt')"
check "stopped_files: stat answers 200" 200 "$code"
check "stopped_files: stat of the uploaded file" "file 24 420" \
  "$(py "' '.join(str(b['stat'][k]) for k in ('type', 'size', 'mode'))" 2>/dev/null)"
api GET "$(sf_files '/stat?path=/root/sf/abs-link')"
check "stopped_files: stat of a symlink, not followed" "symlink /root/sf/dir/api.txt" \
  "$(py "b['stat']['type'] + ' ' + b['stat']['target']" 2>/dev/null)"
api GET "$(sf_files '/list?path=/root/sf')"
check "stopped_files: list" "abs-link:symlink dir:dir late.txt:file" \
  "$(py "' '.join(e['name'] + ':' + e['type'] for e in b['entries'])" 2>/dev/null)"
check "stopped_files: download the late write (frozen before the snapshot)" "late write" \
  "$(curl -sS --unix-socket "$sock" --max-time 300 "http://sbxd$(sf_files '?path=/root/sf/late.txt')")"
check "stopped_files: download through an absolute symlink" "written through the API" \
  "$(curl -sS --unix-socket "$sock" --max-time 300 "http://sbxd$(sf_files '?path=/root/sf/abs-link')")"
check "stopped_files: sbx scp from the stopped sandbox" "written through the API" \
  "$(sbxc scp "$sf:/root/sf/dir/api.txt" - 2>/dev/null)"
api GET "$(sf_files '?path=/root/sf/dir')"
check "stopped_files: a directory is not downloaded" 400 "$code"
api GET "$(sf_files '/stat?path=/root/sf/none')"
check "stopped_files: a missing file is 404" 404 "$code"
echo "SBXD-TIME: stopped_files reads $(elapsed "$t") s"

api POST "$(sf_files /mkdir)" '{"path":"/root/sf/new"}'
check "stopped_files: mkdir on a stopped sandbox is 409" "409 invalid_state" "$code $(py "b['code']" 2>/dev/null)"
api DELETE "$(sf_files '?path=/root/sf/late.txt')"
check "stopped_files: remove on a stopped sandbox is 409" 409 "$code"
check "stopped_files: upload on a stopped sandbox is 409" 409 "$(printf x |
  curl -sS --unix-socket "$sock" -T - -o /dev/null -w '%{http_code}' --max-time 300 \
    "http://sbxd$(sf_files '?path=/root/sf/x')")"
api GET "/v1/sandboxes/$sf"
check "stopped_files: it is still stopped" stopped "$(py "b['sandbox']['state']" 2>/dev/null)"
check "stopped_files: still no VMM" 0 "$(sf_vmms)"
check "stopped_files: its memory is still there to resume" yes "$([ -s "$state/sandboxes/$sf/memory.snap" ] && echo yes)"

# The guest was saved frozen: after the resume a write must finish (a
# guest left frozen would block it; curl gives up first).
api POST "/v1/sandboxes/$sf/resume" '{}'
check "stopped_files: resume from memory" True "$(py "b['memoryRestored']" 2>/dev/null)"
after=$(curl -sS --unix-socket "$sock" --max-time 120 "http://sbxd/v1/sandboxes/$sf/exec" \
  -d '{"shell":"echo thawed >/root/sf/after.txt && cat /root/sf/after.txt"}')
check "stopped_files: the resumed guest writes (thawed)" 1 "$(printf '%s' "$after" | grep -c '"data":"dGhhd2VkCg=="')"

api DELETE "/v1/sandboxes/$sf"
check "stopped_files: delete" 200 "$code"
