# sbxd part "limits" (sourced by session.sh, sbxd running): admission and
# the bulk routes with real requests, on at most two sandboxes (each part
# leaves none behind, so only these run). sbxd is restarted with
# --max-running 2 --max-starts-per-minute 1, then: a create in flight
# makes a second create rate_limited (Retry-After in the header and the
# body); the first create's Idempotency-Key replays (no start, so no rate
# limit); a restart of sbxd empties the window (it lives in memory) and
# adopts the sandbox; a fork with an Idempotency-Key (201), its replay
# (200, replayed, the same child, no new VMM), the key with another body
# (409 idempotency_conflict); a third sandbox is limit_reached;
# DELETE /v1/sandboxes?labels= with dryRun and `sbx rm --label --dry-run`
# list both and delete nothing; without labels it is 400; the real delete
# by label leaves no VMM or folder. Last, sbxd is restarted with its
# default limits for the parts after this one.
# shellcheck shell=bash

lm_body='{"cpus":1,"memoryMib":1024,"noAutoStop":true,"labels":{"test":"limits"}}'
lm_headers=$w/limits.headers
# lm_api METHOD PATH BODY [IDEMPOTENCY_KEY]: as api, the headers in $lm_headers.
lm_api() {
  local out
  out=$(curl -sS --unix-socket "$sock" -X "$1" "http://sbxd$2" -D "$lm_headers" ${3:+--data "$3"} \
    ${4:+-H "Idempotency-Key: $4"} -w '\n%{http_code}' --max-time 1500)
  body=$(printf '%s\n' "$out" | sed '$d') code=$(printf '%s\n' "$out" | tail -n 1)
}
lm_limit() { api GET /v1/limits; py "b['limits']['$1']" 2>/dev/null; }
lm_starts_are() { [ "$(lm_limit startsLastMinute)" = "$1" ]; }

kill "$sbxd_pid"; wait "$sbxd_pid"
start_sbxd --max-running 2 --max-starts-per-minute 1
check "limits: /v1/limits reports --max-running" 2 "$(lm_limit maxRunningSandboxes)"
check "limits: /v1/limits reports --max-starts-per-minute" 1 "$(lm_limit maxStartsPerMinute)"
check "limits: nothing runs at the start" 0 "$(lm_limit runningSandboxes)"

# 1. A create in flight fills the window: a second start is rate_limited.
(
  lm_headers=$w/limits.create.headers
  lm_api POST /v1/sandboxes "$lm_body" limits-create
  printf '%s\n%s\n' "$code" "$body" >"$w/limits.create"
) &
lm_create=$!
WAIT_INTERVAL=1 wait_until 120 "the first create admitted" lm_starts_are 1
check "limits: the create in flight counts as running" 1 "$(lm_limit runningSandboxes)"
lm_api POST /v1/sandboxes "$lm_body"
check "limits: a second start within 60 s is 429" 429 "$code"
check "limits: ... rate_limited" rate_limited "$(py "b['code']" 2>/dev/null)"
lm_retry=$(py "b['retryAfterSeconds']" 2>/dev/null)
check "limits: Retry-After says the same seconds as the body" "$lm_retry" \
  "$(sed -n 's/^[Rr]etry-[Aa]fter: *\([0-9]*\).*/\1/p' "$lm_headers")"
check "limits: ... between 1 and 60" yes "$([ "${lm_retry:-0}" -ge 1 ] && [ "${lm_retry:-0}" -le 60 ] && echo yes)"
wait "$lm_create"
check "limits: the first create answers 201" 201 "$(sed -n 1p "$w/limits.create")"
lm_a=$(sed 1d "$w/limits.create" | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['sandbox']['id'])" 2>/dev/null)
lm_ids=$lm_a

if [ -n "$lm_a" ]; then
  # 2. A replay is no start: answered while the window is still full.
  lm_api POST /v1/sandboxes "$lm_body" limits-create
  check "limits: the create's key replays (200), no start, even with the window full" "200 True $lm_a" \
    "$code $(py "str(b['replayed']) + ' ' + b['sandbox']['id']" 2>/dev/null)"

  # 3. The window lives in sbxd's memory: a restart empties it (and
  # adopts the sandbox), then an idempotent fork.
  kill "$sbxd_pid"; wait "$sbxd_pid"
  start_sbxd --max-running 2 --max-starts-per-minute 1
  check "limits: a restarted sbxd starts with an empty window" "0 1" \
    "$(lm_limit startsLastMinute) $(lm_limit runningSandboxes)"
  # (a build the restart cut off is not started again until a create
  # needs it: then no template boots at all)
  # (a function, not sh -c: pgrep would find that shell's own command line)
  lm_template_settled() {
    ls -d "$state"/templates/slim-* 2>/dev/null | grep -v '[.]tmp-' | grep -q . ||
      ! pgrep -f -- "--snapshot-dir $state/templates/" >/dev/null
  }
  wait_until 900 "the warm template, or no build of it (no guest boots beside the fork)" lm_template_settled
  t=$(now)
  lm_api POST "/v1/sandboxes/$lm_a/fork" '{"count":1}' limits-fork
  check "limits: a fork with an Idempotency-Key answers 201" "201 False" \
    "$code $(py "b['replayed']" 2>/dev/null)"
  echo "SBXD-TIME: limits fork $(elapsed "$t") s"
  lm_c=$(py "b['sandboxes'][0]['id']" 2>/dev/null)
  lm_ids="$lm_ids $lm_c"
  lm_api POST "/v1/sandboxes/$lm_a/fork" '{ "count": 1 }' limits-fork
  check "limits: the same key and body replay the same child" "200 True $lm_c" \
    "$code $(py "str(b['replayed']) + ' ' + b['sandboxes'][0]['id']" 2>/dev/null)"
  check "limits: a replay starts no VMM" 2 "$(vmm_count)"
  lm_api POST "/v1/sandboxes/$lm_a/fork" '{"count":2}' limits-fork
  check "limits: the key with another body is 409 idempotency_conflict" "409 idempotency_conflict" \
    "$code $(py "b['code']" 2>/dev/null)"

  # 4. Two running: a third is limit_reached, whatever the window says.
  check "limits: /v1/limits counts both" 2 "$(lm_limit runningSandboxes)"
  lm_api POST /v1/sandboxes "$lm_body"
  check "limits: a third sandbox is 429 limit_reached" "429 limit_reached" "$code $(py "b['code']" 2>/dev/null)"
  check "limits: ... naming the limit" 1 "$(py "int('limit is 2' in b['message'])" 2>/dev/null)"
fi

# 5. Delete by label: dry runs list, delete nothing; labels are required.
api DELETE "/v1/sandboxes?labels=test%3Dlimits&dryRun=true"
check "limits: a dry run lists both" "200 True $(printf '%s\n' $lm_ids | sort | xargs)" \
  "$code $(py "str(b['dryRun']) + ' ' + ' '.join(sorted(b['deleted']))" 2>/dev/null)"
check "limits: ... and deletes nothing" 2 "$(vmm_count)"
api DELETE /v1/sandboxes
check "limits: DELETE /v1/sandboxes without labels is 400" "400 invalid_argument" "$code $(py "b['code']" 2>/dev/null)"
body=$(sbxc rm --label test=limits --dry-run 2>/dev/null | tail -n 1)
check "limits: sbx rm --label --dry-run lists both" "True 2" "$(py "str(b['dryRun']) + ' ' + str(len(b['deleted']))" 2>/dev/null)"
api GET "/v1/sandboxes?labels=test%3Dlimits"
check "limits: both still there" 2 "$(py "len(b['sandboxes'])" 2>/dev/null)"
api DELETE "/v1/sandboxes?labels=test%3Dlimits"
check "limits: the delete by label deletes both" "200 False 2" \
  "$code $(py "str(b['dryRun']) + ' ' + str(len(b['deleted']))" 2>/dev/null)"
for s in $lm_ids; do  # whatever the delete by label left
  api DELETE "/v1/sandboxes/$s"
done
check "limits: no VMM left" 0 "$(vmm_count)"
check "limits: no sandbox folder left" 0 "$(ls "$state/sandboxes" | grep -c .)"

kill "$sbxd_pid"; wait "$sbxd_pid"
start_sbxd
check "limits: sbxd is back to its default limits" 64 "$(lm_limit maxRunningSandboxes)"
