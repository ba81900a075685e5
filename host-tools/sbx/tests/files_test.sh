#!/usr/bin/env bash
# sbx logs against sbxd's real server and API over a host sbx-agent
# (sbxd_guest_fixture, as guest_routes_test.sh; its console logs are
# DIR/ID-console.log): the raw bytes, --tail, --json, --follow until the
# sandbox stops, errors. Needs no guest (suite unit).
# Usage: files_test.sh FIXTURE SBX_AGENT SBX
set -euo pipefail
fixture=$1
agent=$2
sbx=$3
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
tmp=$(mktemp -d /tmp/sbx-files-XXXXXX)
pid=
cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid"; wait "$pid" || true; fi
    [ -n "${KEEP:-}" ] && return
    rm -rf "$tmp"
}
trap cleanup EXIT
"$fixture" "$agent" "$tmp" >"$tmp/fixture.out" 2>"$tmp/fixture.log" &
pid=$!
for _ in $(seq 100); do
    grep -q listening "$tmp/fixture.out" && break
    kill -0 "$pid" 2>/dev/null || { cat "$tmp/fixture.log" >&2; exit 1; }
    sleep 0.1
done
grep -q listening "$tmp/fixture.out" || { cat "$tmp/fixture.log" >&2; exit 1; }
export SBX_HOST=unix:$tmp/sbxd.sock
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# 1. logs: the whole log as raw bytes (piped: no JSON), --tail, --json.
head -c 200000 /dev/urandom >"$tmp/sbx_run-console.log"
printf 'Linux version 6.12\nthe end\n' >>"$tmp/sbx_run-console.log"
timeout 30 "$sbx" logs sbx_run >"$tmp/logs1" || fail "logs: exit $?"
cmp -s "$tmp/logs1" "$tmp/sbx_run-console.log" || fail "logs: $(wc -c <"$tmp/logs1") bytes, not the file's"
[ "$(timeout 30 "$sbx" logs sbx_run --tail 8)" = "the end" ] || fail "logs --tail 8"
timeout 30 "$sbx" logs sbx_run --tail 8 --json >"$tmp/logs2" || fail "logs --json: exit $?"
python3 - "$tmp/logs2" <<'PY' || fail "logs --json: $(cat "$tmp/logs2")"
import base64, json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert lines[0]["type"] == "log" and lines[0]["id"] == "sbx_run", lines
assert b"".join(base64.b64decode(l["data"]) for l in lines) == b"the end\n", lines
assert lines[0]["offset"] == 200000 + 19, lines
PY

# 2. --follow: what the console gets meanwhile, a restart of the file,
# and the end once the sandbox (sbx_off, stopped) is stopped.
printf 'first\n' >"$tmp/sbx_off-console.log"
timeout 30 "$sbx" logs sbx_off --follow >"$tmp/follow1" || fail "follow of a stopped sandbox: exit $?"
[ "$(cat "$tmp/follow1")" = first ] || fail "follow of a stopped sandbox: $(cat "$tmp/follow1")"
printf 'one\n' >"$tmp/sbx_run-console.log"
timeout 60 "$sbx" logs sbx_run -f >"$tmp/follow2" 2>"$tmp/follow2.err" &
follower=$!
sleep 1.5
printf 'two\n' >>"$tmp/sbx_run-console.log"
sleep 1.5
printf 'new\n' >"$tmp/sbx_run-console.log"  # a new VMM: the file starts again
sleep 1.5
kill -INT "$follower" 2>/dev/null || true
wait "$follower" || true
[ "$(cat "$tmp/follow2")" = "$(printf 'one\ntwo\nnew')" ] || fail "follow: $(cat -A "$tmp/follow2")"
grep -q 'began again' "$tmp/follow2.err" || fail "follow: no note of the restart: $(cat "$tmp/follow2.err")"

# 3. Errors: an unknown sandbox (exit 1, not_found), a bad --tail (usage).
rc=0; timeout 30 "$sbx" logs sbx_nope >/dev/null 2>"$tmp/nope" || rc=$?
[ "$rc" = 1 ] || fail "logs of an unknown sandbox: exit $rc"
grep -q '"code":"not_found"' "$tmp/nope" || fail "logs of an unknown sandbox: $(cat "$tmp/nope")"
rc=0; timeout 30 "$sbx" logs sbx_run --tail -3 >/dev/null 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "logs --tail -3: exit $rc"

if [ "$failures" -ne 0 ]; then
    echo "$failures failures" >&2
    exit 1
fi
echo "all sbx file and log checks passed"
