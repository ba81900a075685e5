#!/usr/bin/env bash
# sbxd over real sockets with a real HTTP client: starts the built sbxd on
# a Unix socket and a TCP port in a temporary directory and drives it with
# curl. Checks the error format and codes, the socket's mode, keep-alive,
# bearer keys on TCP, and a restart after SIGTERM and after SIGKILL.
# Needs no guest (suite unit). Usage: http_test.sh BUILD_ROOT
set -euo pipefail
build=$1
sbxd=$build/host-tools/sbxd/sbxd
command -v curl >/dev/null || { echo "SKIP: no curl"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }

# shellcheck source=SCRIPTDIR/test_lib.sh
. "$(dirname "$0")/test_lib.sh"
scratch sbxd-http KILL
sock=$tmp/sbxd.sock
state=$tmp/state

# Each start logs to a fresh file: a restart must not find the previous
# daemon's "listening" line before its own shell truncates the log.
starts=0
start() {
    starts=$((starts + 1))
    local log=$tmp/log.$starts
    : >"$log"
    start_sbxd "$sbxd" "$log" --state-dir "$state" --images "$tmp/no-images" --listen "unix:$sock" \
        --listen tcp:127.0.0.1:0 --max-running 3 --max-starts-per-minute 5 --memory-budget-mib 65536
}

# req NAME curl-args...: status in $tmp/NAME.status, headers .h, body .json
req() {
    local name=$1
    shift
    curl -sS -o "$tmp/$name.json" -D "$tmp/$name.h" -w '%{http_code}' "$@" >"$tmp/$name.status"
}
unix() { local name=$1; shift; req "$name" --unix-socket "$sock" "$@"; }
status_is() { [ "$(cat "$tmp/$1.status")" = "$2" ] || fail "$1: status $(cat "$tmp/$1.status"), want $2: $(cat "$tmp/$1.json")"; }
# json_check NAME PYTHON-EXPR: an expression over `b` (the parsed body)
# and `h` (the headers, lowercase names) of response NAME, evaluated with
# all the others in one python3 at the end (check_all).
json_check() { printf '%s\t%s\n' "$1" "$2" >>"$tmp/checks"; }
check_all() {
    python3 - "$tmp" <<'PY' || failures=$((failures + 1))
import json, sys
tmp = sys.argv[1]
bad = 0
for line in open(tmp + "/checks"):
    name, expr = line.rstrip("\n").split("\t", 1)
    text = open(f"{tmp}/{name}.json").read()
    try:
        b = json.loads(text)
        h = {}
        for header in open(f"{tmp}/{name}.h"):
            if ":" in header:
                k, v = header.split(":", 1)
                h[k.strip().lower()] = v.strip()
        good = eval(expr)
    except Exception as e:
        good = False
        expr += f" ({e!r})"
    if not good:
        print(f"FAIL: {name}: {expr}: {text}", file=sys.stderr)
        bad += 1
sys.exit(1 if bad else 0)
PY
}
# The error format of docs/api.md, exactly these five fields.
error_is() {
    status_is "$1" "$2"
    json_check "$1" "sorted(b) == ['code','message','ok','requestId','status'] and b['ok'] is False and b['status'] == $2 and b['code'] == '$3' and b['requestId'] == h['x-request-id'] and b['message'] != '' and h['content-type'] == 'application/json'"
}

start

mode=$(stat -c %a "$sock")
[ "$mode" = 660 ] || fail "socket mode $mode, want 660"

unix health http://sbxd/v1/health
status_is health 200
json_check health "b['ok'] is True and b['requestId'] == h['x-request-id'] and b['version'] and b['host']"

unix list http://sbxd/v1/sandboxes
status_is list 200
json_check list "b['ok'] is True and b['sandboxes'] == []"
unix list_sel 'http://sbxd/v1/sandboxes?labels=owner%3Dalice,run=42&state=running,stopped'
status_is list_sel 200
unix list_bad 'http://sbxd/v1/sandboxes?state=asleep'
error_is list_bad 400 invalid_argument

unix limits http://sbxd/v1/limits
status_is limits 200
json_check limits "b['limits']['maxRunningSandboxes'] == 3 and b['limits']['maxStartsPerMinute'] == 5 and b['limits']['memoryBudgetMib'] == 65536 and b['limits']['startsLastMinute'] == 0"
json_check limits "b['limits']['hostCpus'] >= 1 and b['limits']['runningSandboxes'] == 0 and [s['name'] for s in b['limits']['sizes']] == ['small','default','large','xlarge'] and all(s['cpus'] <= b['limits']['hostCpus'] for s in b['limits']['sizes'])"

unix bad_json -X POST -H 'Content-Type: application/json' --data '{"size":' http://sbxd/v1/sandboxes
error_is bad_json 400 bad_request
unix not_object -X POST --data '[1]' http://sbxd/v1/sandboxes
error_is not_object 400 bad_request
unix bad_field -X POST --data '{"size":"huge"}' http://sbxd/v1/sandboxes
error_is bad_field 400 invalid_argument
json_check bad_field "'size' in b['message']"
unix unknown_field -X POST --data '{"memoryMB":512}' http://sbxd/v1/sandboxes
error_is unknown_field 400 invalid_argument
json_check unknown_field "'memoryMB' in b['message']"
unix create -X POST --data '{"size":"small","labels":{"owner":"alice"},"ttl":"2h"}' http://sbxd/v1/sandboxes
# No image to boot: refused before a row or a folder is made.
error_is create 404 not_found
json_check create "'images/build' in b['message']"

unix no_route http://sbxd/v1/nothing/here
error_is no_route 404 not_found
unix no_sandbox http://sbxd/v1/sandboxes/sbx_missing
error_is no_sandbox 404 not_found
unix stop_missing -X POST http://sbxd/v1/sandboxes/sbx_missing/stop
error_is stop_missing 404 not_found
unix wrong_method -X PUT http://sbxd/v1/sandboxes
error_is wrong_method 405 method_not_allowed
json_check wrong_method "h['allow'] == 'GET, POST, DELETE'"
unix delete_everything -X DELETE http://sbxd/v1/sandboxes
error_is delete_everything 400 invalid_argument
unix delete_dry_run -X DELETE 'http://sbxd/v1/sandboxes?labels=owner%3Dnobody&dryRun=true'
status_is delete_dry_run 200
json_check delete_dry_run "b['deleted'] == [] and b['dryRun'] is True"

head -c $((1024 * 1024 + 1)) /dev/zero | tr '\0' ' ' >"$tmp/big"
unix too_big -X POST --data-binary @"$tmp/big" http://sbxd/v1/sandboxes
error_is too_big 413 payload_too_large
unix too_big_chunked -X POST -H 'Transfer-Encoding: chunked' --data-binary @"$tmp/big" http://sbxd/v1/sandboxes
error_is too_big_chunked 413 payload_too_large
# A body just under the limit is read and judged on its content.
{ printf '{"size":"small"}'; head -c $((1024 * 1024 - 20)) /dev/zero | tr '\0' ' '; } >"$tmp/fits"
unix fits -X POST --data-binary @"$tmp/fits" http://sbxd/v1/sandboxes
error_is fits 404 not_found

# Keep-alive: two requests on one connection.
curl -sv --unix-socket "$sock" http://sbxd/v1/health http://sbxd/v1/sandboxes -o /dev/null -o /dev/null 2>"$tmp/keepalive" || true
grep -q 'Re-using existing connection' "$tmp/keepalive" || fail "the second request did not reuse the connection"
[ "$(grep -c '^< HTTP/1.1 200' "$tmp/keepalive")" = 2 ] || fail "keep-alive: not two 200s"

# TCP needs a bearer key; keys are made beside the running daemon.
tcp=http://127.0.0.1:$port
req tcp_none "$tcp/v1/health"
error_is tcp_none 401 unauthorized
json_check tcp_none "h['www-authenticate'] == 'Bearer'"
req tcp_wrong -H "Authorization: Bearer sbxk_$(printf '%064d' 0)" "$tcp/v1/health"
error_is tcp_wrong 401 unauthorized
req tcp_basic -H 'Authorization: Basic dXNlcjpwYXNz' "$tcp/v1/sandboxes"
error_is tcp_basic 401 unauthorized
key=$("$sbxd" --state-dir "$state" keys create --name test 2>/dev/null)
case $key in sbxk_*) ;; *) fail "keys create printed '$key'" ;; esac
req tcp_right -H "Authorization: Bearer $key" "$tcp/v1/health"
status_is tcp_right 200
req tcp_list -H "Authorization: Bearer $key" "$tcp/v1/sandboxes"
status_is tcp_list 200
json_check tcp_list "b['sandboxes'] == []"
"$sbxd" --state-dir "$state" keys ls >"$tmp/keys"
grep -q '"name":"test"' "$tmp/keys" || fail "keys ls does not list the key"
if grep -q "${key#sbxk_}" "$tmp/keys" "$state"/sbxd.db*; then fail "the key's secret is stored or listed"; fi
key_id=$(grep -o '"id":"key_[0-9a-f]*"' "$tmp/keys" | head -1 | cut -d'"' -f4)
"$sbxd" --state-dir "$state" keys rm "$key_id"
req tcp_revoked -H "Authorization: Bearer $key" "$tcp/v1/health"
error_is tcp_revoked 401 unauthorized

# A read-only key reads and changes nothing; an expiring key is refused
# from its expiry on. Every request is in sbxd's log with its key's id.
ro=$("$sbxd" --state-dir "$state" keys create --name viewer --read-only 2>/dev/null)
req ro_list -H "Authorization: Bearer $ro" "$tcp/v1/sandboxes"
status_is ro_list 200
req ro_create -H "Authorization: Bearer $ro" -X POST --data '{"size":"small"}' "$tcp/v1/sandboxes"
error_is ro_create 403 forbidden
json_check ro_create "'read-only' in b['message']"
req ro_delete -H "Authorization: Bearer $ro" -X DELETE "$tcp/v1/sandboxes/sbx_missing"
error_is ro_delete 403 forbidden
# The expiry leaves a margin for a slow host (an ASan sbxd under load took
# over 2 s to make the key and list the keys); then the refusal is waited
# for, and must not come before the expiry.
made=$SECONDS
brief=$("$sbxd" --state-dir "$state" keys create --name brief --expires 10s 2>/dev/null)
req brief_now -H "Authorization: Bearer $brief" "$tcp/v1/health"
[ $((SECONDS - made)) -lt 10 ] || fail "brief_now: the key was made and used more than its 10 s apart"
status_is brief_now 200
"$sbxd" --state-dir "$state" keys ls >"$tmp/keys"
grep '"name":"viewer"' "$tmp/keys" | grep -q '"readOnly":true' || fail "keys ls: viewer is not read-only"
grep '"name":"brief"' "$tmp/keys" | grep -q '"expiresAt":"' || fail "keys ls: brief has no expiry"
for _ in $(seq 1 120); do
    req brief_later -H "Authorization: Bearer $brief" "$tcp/v1/health"
    [ "$(cat "$tmp/brief_later.status")" = 200 ] || break
    sleep 0.5
done
[ $((SECONDS - made)) -ge 9 ] || fail "brief_later: refused after $((SECONDS - made)) s, before its 10 s expiry"
error_is brief_later 401 unauthorized
json_check brief_later "'expired' in b['message']"
ro_id=$(grep '"name":"viewer"' "$tmp/keys" | grep -o '"id":"key_[0-9a-f]*"' | cut -d'"' -f4)
grep -q "POST /v1/sandboxes key=$ro_id 403" "$tmp/log.$starts" || fail "the refused request is not logged with its key: $(tail -n 5 "$tmp/log.$starts")"
grep -q "GET /v1/health key=unix 200" "$tmp/log.$starts" || fail "a socket request is not logged"

# A second sbxd cannot take a live socket.
if "$sbxd" --network off --proxy-listen off --state-dir "$tmp/other" --listen "unix:$sock" 2>"$tmp/second.log"; then
    fail "a second sbxd started on a live socket"
fi
grep -q 'in use' "$tmp/second.log" || fail "second sbxd: $(cat "$tmp/second.log")"

# SIGTERM: exit 0 and the socket is gone; SIGKILL: the stale socket is
# replaced by the next start.
kill -TERM "$pid"
wait "$pid" || fail "sbxd exited $? after SIGTERM"
pid=
[ ! -e "$sock" ] || fail "the socket outlived sbxd"
start
kill -KILL "$pid"
wait "$pid" 2>/dev/null || true
pid=
[ -S "$sock" ] || fail "no stale socket after SIGKILL"
start
unix after_restart http://sbxd/v1/health
status_is after_restart 200

check_all
if [ "$failures" -ne 0 ]; then
    echo "$failures check(s) failed" >&2
    exit 1
fi
echo "sbxd http: all checks passed"
