# sbxd part "guest_api" (sourced by session.sh, sbxd running): the API
# inside a sandbox. /etc/sandboxer/env holds SANDBOXER_ID, _SUBDOMAIN,
# _API_URL and _TOKEN and the -e variables; an exec sees them; from inside
# the guest, SANDBOXER_API_URL with SANDBOXER_TOKEN answers for this
# sandbox (over vsock: the guest has no network), 401 without the token,
# 403 for another sandbox; it still answers after a stop and resume, and
# the console log (GET …/logs) holds what the guest wrote before and after.
# shellcheck shell=bash

# ga_get ID URL_PATH [TOKEN]: "STATUS BODY" of a GET from inside sandbox ID.
ga_get() {
  agent "$1" exec -- /usr/bin/python3 -c '
import os, sys, urllib.request, urllib.error
env = dict(l.split("=", 1) for l in open("/etc/sandboxer/env").read().splitlines() if "=" in l and not l.startswith("#"))
req = urllib.request.Request(env["SANDBOXER_API_URL"] + sys.argv[1])
token = sys.argv[2] if len(sys.argv) > 2 else env["SANDBOXER_TOKEN"]
if token != "-":
    req.add_header("Authorization", "Bearer " + token)
try:
    r = urllib.request.urlopen(req, timeout=60); print(r.status, r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
' "$2" ${3:+"$3"} 2>&1
}

api POST /v1/sandboxes '{"cpus":1,"memoryMib":1024,"noAutoStop":true,"env":{"GREETING":"hello there"}}'
check "guest_api: create answers 201" 201 "$code"
ga=$(py "b['sandbox']['id']" 2>/dev/null)
api POST /v1/sandboxes '{"cpus":1,"memoryMib":1024,"noAutoStop":true,"noEnv":true}'
check "guest_api: a second create answers 201" 201 "$code"
ga_other=$(py "b['sandbox']['id']" 2>/dev/null)
ga_env=$(agent "$ga" exec -- cat /etc/sandboxer/env)
check "guest_api: SANDBOXER_ID in the env file" "SANDBOXER_ID=$ga" "$(printf '%s\n' "$ga_env" | grep '^SANDBOXER_ID=')"
check "guest_api: SANDBOXER_SUBDOMAIN" "SANDBOXER_SUBDOMAIN=${ga//_/-}" "$(printf '%s\n' "$ga_env" | grep '^SANDBOXER_SUBDOMAIN=')"
check "guest_api: SANDBOXER_API_URL" "SANDBOXER_API_URL=http://127.0.0.1:7070" "$(printf '%s\n' "$ga_env" | grep '^SANDBOXER_API_URL=')"
check "guest_api: a -e variable" "GREETING=hello there" "$(printf '%s\n' "$ga_env" | grep '^GREETING=')"
check "guest_api: an exec sees them" "$ga hello there" "$(agent "$ga" exec -- sh -c 'echo "$SANDBOXER_ID $GREETING"')"
ga_reply=$(ga_get "$ga" "/v1/sandboxes/$ga")
check "guest_api: the guest reads its own sandbox" "200 $ga" \
  "$(printf '%s' "$ga_reply" | /usr/bin/python3 -c 'import json,sys; s,b=sys.stdin.read().split(" ",1); print(s, json.loads(b)["sandbox"]["id"])' 2>&1)"
check "guest_api: without the token, 401" 401 "$(ga_get "$ga" "/v1/sandboxes/$ga" - | cut -d' ' -f1)"
check "guest_api: another sandbox, 403" 403 "$(ga_get "$ga" "/v1/sandboxes/$ga_other" | cut -d' ' -f1)"
check "guest_api: the host-wide list, 403" 403 "$(ga_get "$ga" "/v1/sandboxes" | cut -d' ' -f1)"
# An exec through the guest's API comes with SANDBOXER_TOKEN: the history
# keeps that key's id beside the command (a host exec on the socket: none).
agent "$ga" exec -- /usr/bin/python3 -c '
import urllib.request
env = dict(l.split("=", 1) for l in open("/etc/sandboxer/env").read().splitlines() if "=" in l and not l.startswith("#"))
req = urllib.request.Request(env["SANDBOXER_API_URL"] + "/v1/sandboxes/" + env["SANDBOXER_ID"] + "/exec",
                             data=b"{\"command\":[\"echo\",\"from-inside\"]}", method="POST")
req.add_header("Authorization", "Bearer " + env["SANDBOXER_TOKEN"])
urllib.request.urlopen(req, timeout=120).read()
' >/dev/null 2>&1
api GET "/v1/sandboxes/$ga/history"
check "guest_api: the guest's own exec is in the history with its token's key" "True True" \
  "$(py "[(h['command'] == ['echo', 'from-inside'], (h['keyId'] or '').startswith('key_')) for h in b['history']][-1:] == [(True, True)], all(h['keyId'] is None for h in b['history'][:-1])" 2>&1 | tr -d '(),')"
check "guest_api: a noEnv sandbox has no other sandbox's variables" "" "$(agent "$ga_other" exec -- grep -c GREETING /etc/sandboxer/env | grep -v '^0$')"
# ga_logged MARK: the sandbox's console log (GET …/logs) holds MARK
ga_logged() { curl -sS --unix-socket "$sock" --max-time 300 "http://sbxd/v1/sandboxes/$ga/logs" | grep -q "$1"; }
agent "$ga" exec -- sh -c "echo sbx-before-stop-$ga >/dev/console" >/dev/null 2>&1
wait_until 120 "the first marker in the console log" ga_logged "sbx-before-stop-$ga"
api POST "/v1/sandboxes/$ga/stop" '{}'
check "guest_api: stop" 200 "$code"
api POST "/v1/sandboxes/$ga/resume" '{}'
check "guest_api: resume" 200 "$code"
check "guest_api: after the resume the guest still reaches the API" 200 "$(ga_get "$ga" "/v1/sandboxes/$ga" | cut -d' ' -f1)"
agent "$ga" exec -- sh -c "echo sbx-after-resume-$ga >/dev/console" >/dev/null 2>&1
wait_until 120 "the second marker in the console log" ga_logged "sbx-after-resume-$ga"
check "guest_api: the console log keeps the run before the stop, then the resumed one" \
  "sbx-before-stop-$ga sbx-after-resume-$ga" \
  "$(curl -sS --unix-socket "$sock" --max-time 300 "http://sbxd/v1/sandboxes/$ga/logs" | tr -d '\r' | grep -o "sbx-[a-z-]*-$ga" | xargs)"
for ga_s in "$ga" "$ga_other"; do
  api DELETE "/v1/sandboxes/$ga_s"
  check "guest_api: delete $ga_s" 200 "$code"
done
