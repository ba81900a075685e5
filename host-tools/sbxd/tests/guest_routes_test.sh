#!/usr/bin/env bash
# The exec, process and file routes end to end with curl: sbxd's server
# and API (sbxd_guest_fixture) over a real sbx-agent on the host, reached
# through a stand-in for the VMM's hybrid vsock socket. Needs no guest
# (suite unit). Usage: guest_routes_test.sh FIXTURE SBX_AGENT WS_CLIENT
set -euo pipefail
fixture=$1
agent=$2
ws_client=$3
command -v curl >/dev/null || { echo "SKIP: no curl"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }

# shellcheck source=SCRIPTDIR/test_lib.sh
. "$(dirname "$0")/test_lib.sh"
scratch sbxd-guest
start_fixture "$fixture" "$agent"

base=http://sbxd/v1/sandboxes/sbx_run
uid=$(id -u)
api() { curl -sS --unix-socket "$tmp/sbxd.sock" "$@"; }
# status NAME curl-args: the body in $tmp/NAME, the status printed
status() { local name=$1; shift; api -o "$tmp/$name" -w '%{http_code}' "$@"; }
# py NAME EXPR: EXPR over the parsed JSON body `b` of $tmp/NAME must hold
py() {
    python3 -c 'import json,sys; b=json.load(open(sys.argv[1])); sys.exit(0 if eval(sys.argv[2]) else 1)' \
        "$tmp/$1" "$2" || fail "$1: $2: $(head -c 600 "$tmp/$1")"
}

# 1. An attached exec: NDJSON with stdout, stderr, the exit code; stdin in.
api -N -X POST "$base/exec" -d "{\"shell\":\"cat; echo err >&2; exit 3\",\"user\":\"$uid\",\"stdin\":\"$(printf 'in\n' | base64)\"}" >"$tmp/exec1"
python3 - "$tmp/exec1" <<'PY' || fail "exec1: $(cat "$tmp/exec1")"
import base64, json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert lines[0]["type"] == "start" and lines[0]["pid"] > 0, lines[0]
out = b"".join(base64.b64decode(l["data"]) for l in lines if l["type"] == "stdout")
err = b"".join(base64.b64decode(l["data"]) for l in lines if l["type"] == "stderr")
assert out == b"in\n" and err == b"err\n", (out, err)
assert lines[-1] == {"type": "exit", "exitCode": 3}, lines[-1]
PY

# 2. Binary-safe output: every byte value, 3 MiB of it.
api -N -X POST "$base/exec" -d "{\"command\":[\"python3\",\"-c\",\"import sys; sys.stdout.buffer.write(bytes(range(256))*12288)\"],\"user\":\"$uid\"}" >"$tmp/exec2"
python3 - "$tmp/exec2" <<'PY' || fail "exec2 binary output"
import base64, json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
out = b"".join(base64.b64decode(l["data"]) for l in lines if l["type"] == "stdout")
assert out == bytes(range(256)) * 12288, len(out)
assert lines[-1]["exitCode"] == 0
PY

# 3. A detached process, read from offsets: every byte exactly once.
[ "$(status det -X POST "$base/exec" -d "{\"shell\":\"for i in \$(seq 1 400); do echo line\$i; done; sleep 1; echo last\",\"user\":\"$uid\",\"detach\":true}")" = 201 ] || fail "detach: $(cat "$tmp/det")"
py det 'b["process"]["id"].startswith("p") and b["process"]["pid"] > 0'
proc=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["process"]["id"])' "$tmp/det")
sleep 0.3
# The first events only (curl stops after the first few KiB), then the rest from the last id.
api -N --max-time 0.5 "$base/processes/$proc/output" >"$tmp/sse1" || true
last=$(grep '^id: ' "$tmp/sse1" | tail -1 | cut -c5-)
[ -n "$last" ] || fail "no events in the first read: $(head -c 300 "$tmp/sse1")"
api -N -H "Last-Event-ID: $last" "$base/processes/$proc/output" >"$tmp/sse2"
python3 - "$tmp/sse1" "$tmp/sse2" "$last" <<'PY' || fail "sse: $(tail -c 300 "$tmp/sse2")"
import base64, sys
def events(path):
    out = []
    for block in open(path).read().split("\n\n"):
        fields = dict(l.split(": ", 1) for l in block.split("\n") if ": " in l)
        if fields:
            out.append(fields)
    return out
first = [e for e in events(sys.argv[1]) if e.get("event") == "output" and int(e["id"]) <= int(sys.argv[3])]
second = events(sys.argv[2])
data = b"".join(base64.b64decode(e["data"]) for e in first + second if e.get("event") == "output")
want = "".join(f"line{i}\n" for i in range(1, 401)).encode() + b"last\n"
assert data == want, (len(data), len(want))
assert second[-1]["event"] == "exit" and second[-1]["data"] == '{"exitCode":0,"signal":null}', second[-1]
PY
# follow=false from an offset inside the output of the ended process: the rest, then exit.
api --max-time 5 "$base/processes/$proc/output?offset=3090&follow=false" >"$tmp/sse_rest"
python3 - "$tmp/sse_rest" <<'PY' || fail "follow=false after the exit: $(cat "$tmp/sse_rest")"
import base64, sys
blocks = [dict(l.split(": ", 1) for l in b.split("\n") if ": " in l) for b in open(sys.argv[1]).read().split("\n\n")]
blocks = [b for b in blocks if b]
data = b"".join(base64.b64decode(b["data"]) for b in blocks if b.get("event") == "output")
assert data == b"0\nlast\n", data
assert blocks[-1]["event"] == "exit" and blocks[-1]["data"] == '{"exitCode":0,"signal":null}', blocks[-1]
PY
[ "$(status st "$base/processes/$proc")" = 200 ] || fail "status: $(cat "$tmp/st")"
py st 'not b["process"]["running"] and b["process"]["exitCode"] == 0 and b["process"]["outputBytes"] == 3097'
py st '__import__("base64").b64decode(b["process"]["tail"]).endswith(b"line400\nlast\n") and len(__import__("base64").b64decode(b["process"]["tail"])) == 3097'
status pl "$base/processes" >/dev/null
py pl 'any(p["id"] == "'"$proc"'" and p["exitCode"] == 0 for p in b["processes"])'

# 4. A signal to a detached process.
status det2 -X POST "$base/exec" -d "{\"command\":[\"sleep\",\"600\"],\"user\":\"$uid\",\"detach\":true}" >/dev/null
proc2=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["process"]["id"])' "$tmp/det2")
# follow=false: what is there now (nothing from a silent sleep), then `running` at once.
api --max-time 5 "$base/processes/$proc2/output?follow=false" >"$tmp/sse_now" || fail "follow=false did not end"
grep -q '^event: running' "$tmp/sse_now" && ! grep -q '^event: output' "$tmp/sse_now" ||
  fail "follow=false while running: $(cat "$tmp/sse_now")"
[ "$(status follow_bad "$base/processes/$proc2/output?follow=maybe")" = 400 ] || fail "follow=maybe"
[ "$(status sig -X POST "$base/processes/$proc2/signal" -d '{"signal":"TERM"}')" = 200 ] || fail "signal: $(cat "$tmp/sig")"
api -N --max-time 20 "$base/processes/$proc2/output" >"$tmp/sse3" || true
grep -q '^data: {"exitCode":null,"signal":15}' "$tmp/sse3" || fail "signal exit: $(cat "$tmp/sse3")"
[ "$(status sigbad -X POST "$base/processes/$proc2/signal" -d '{"signal":"NOPE"}')" = 400 ] || fail "bad signal"

# 4a. Stdin for a detached process (stdinOpen): written in pieces, then EOF.
[ "$(status det3 -X POST "$base/exec" -d "{\"command\":[\"cat\"],\"user\":\"$uid\",\"detach\":true,\"stdinOpen\":true}")" = 201 ] ||
  fail "detach with stdinOpen: $(cat "$tmp/det3")"
proc3=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["process"]["id"])' "$tmp/det3")
[ "$(status in1 -X POST "$base/processes/$proc3/stdin" -d "{\"data\":\"$(printf 'hello\n' | base64)\"}")" = 200 ] || fail "stdin: $(cat "$tmp/in1")"
py in1 'b["written"] == 6 and b["open"]'
[ "$(status in2 -X POST "$base/processes/$proc3/stdin" -d "{\"data\":\"$(printf 'bye\n' | base64)\",\"eof\":true}")" = 200 ] || fail "stdin eof: $(cat "$tmp/in2")"
py in2 'b["written"] == 4 and not b["open"]'
api -N --max-time 20 "$base/processes/$proc3/output" >"$tmp/sse4" || true
python3 - "$tmp/sse4" <<'PY' || fail "stdin's output: $(cat "$tmp/sse4")"
import base64, sys
blocks = [dict(l.split(": ", 1) for l in b.split("\n") if ": " in l) for b in open(sys.argv[1]).read().split("\n\n")]
data = b"".join(base64.b64decode(b["data"]) for b in blocks if b.get("event") == "output")
assert data == b"hello\nbye\n", data
assert blocks[-2]["event"] == "exit" and blocks[-2]["data"] == '{"exitCode":0,"signal":null}', blocks[-2:]
PY
[ "$(status in_bad -X POST "$base/exec" -d "{\"command\":[\"cat\"],\"user\":\"$uid\",\"stdinOpen\":true}")" = 400 ] || fail "stdinOpen attached"
[ "$(status in_none -X POST "$base/processes/$proc2/stdin" -d '{"data":"eA=="}')" = 400 ] || fail "stdin to a process without: $(cat "$tmp/in_none")"
[ "$(status in_b64 -X POST "$base/processes/$proc3/stdin" -d '{"data":"!!"}')" = 400 ] || fail "stdin not base64"
[ "$(status in_unknown -X POST "$base/processes/p0000000000000000/stdin" -d '{"data":""}')" = 404 ] || fail "stdin unknown process"

# 4b. A client that leaves an attached exec ends its process.
api -N --max-time 1 -X POST "$base/exec" -d "{\"command\":[\"sleep\",\"301.25\"],\"user\":\"$uid\"}" >/dev/null 2>&1 || true
for _ in $(seq 50); do pgrep -f 'sleep 301.25' >/dev/null || break; sleep 0.1; done
if pgrep -f 'sleep 301.25' >/dev/null; then fail "the exec outlived its client"; pkill -f 'sleep 301.25' || true; fi

# 5. History: every exec with its exit code (the killed one as 128 + 15).
status hist "$base/history" >/dev/null
py hist '[h["exitCode"] for h in b["history"]] == [3, 0, 0, 143, 0, None]'
py hist 'b["history"][0]["command"] == ["/bin/sh", "-c", "cat; echo err >&2; exit 3"]'

# 6. Files: a multi-MiB put and get with matching sha256, stat, list, mkdir, remove.
g=$tmp/guest
head -c $((9 * 1024 * 1024 + 123)) /dev/urandom >"$tmp/big"
[ "$(status mk0 -X POST "$base/files/mkdir" -d "{\"path\":\"$g\"}")" = 200 ] || fail "mkdir: $(cat "$tmp/mk0")"
[ "$(status put -X PUT -T "$tmp/big" "$base/files?path=$g/big.bin&mode=0600")" = 200 ] || fail "put: $(cat "$tmp/put")"
py put 'b["bytes"] == 9 * 1024 * 1024 + 123'
api -o "$tmp/big.back" "$base/files?path=$g/big.bin"
[ "$(sha256sum <"$tmp/big")" = "$(sha256sum <"$tmp/big.back")" ] || fail "get: sha256 differs"
[ "$(sha256sum <"$tmp/big")" = "$(sha256sum <"$g/big.bin")" ] || fail "put: the file differs"
status stat "$base/files/stat?path=$g/big.bin" >/dev/null
py stat 'b["stat"]["type"] == "file" and b["stat"]["size"] == 9 * 1024 * 1024 + 123 and b["stat"]["mode"] == 0o600'
[ "$(status mk -X POST "$base/files/mkdir" -d "{\"path\":\"$g/d/e\",\"parents\":true}")" = 200 ] || fail "mkdir: $(cat "$tmp/mk")"
status ls "$base/files/list?path=$g" >/dev/null
py ls '[(e["name"], e["type"]) for e in b["entries"]] == [("big.bin", "file"), ("d", "dir")]'
[ "$(status rm1 -X DELETE "$base/files?path=$g/d")" = 400 ] || fail "remove of a non-empty dir: $(cat "$tmp/rm1")"
[ "$(status rm2 -X DELETE "$base/files?path=$g/d&recursive=true")" = 200 ] || fail "remove: $(cat "$tmp/rm2")"
[ ! -e "$g/d" ] || fail "d is still there"

# 7. Errors.
[ "$(status e1 "$base/files?path=$g/missing")" = 404 ] || fail "missing file: $(cat "$tmp/e1")"
py e1 'b["code"] == "not_found"'
[ "$(status e2 "$base/files?path=$g")" = 400 ] || fail "a directory: $(cat "$tmp/e2")"
[ "$(status e3 -X POST http://sbxd/v1/sandboxes/sbx_off/exec -d '{"command":["true"]}')" = 409 ] || fail "stopped: $(cat "$tmp/e3")"
py e3 'b["code"] == "invalid_state"'
[ "$(status e4 -X POST http://sbxd/v1/sandboxes/sbx_nope/exec -d '{"command":["true"]}')" = 404 ] || fail "unknown sandbox"
[ "$(status e5 -X POST "$base/exec" -d '{"command":["true"],"shell":"true"}')" = 400 ] || fail "both command and shell"
[ "$(status e6 "$base/processes/pnope")" = 404 ] || fail "unknown process: $(cat "$tmp/e6")"
[ "$(status e7 -X PUT --data-binary x "$base/files?path=$g/no/such/dir/f")" = 404 ] || fail "put without a parent: $(cat "$tmp/e7")"
[ "$(status e8 -X POST "$base/exec" -d "{\"command\":[\"true\"],\"cwd\":\"/nonexistent-dir\",\"user\":\"$uid\"}")" = 404 ] || fail "missing cwd: $(cat "$tmp/e8")"

# 8. Exec over a WebSocket: stdin round trip of binary bytes, a pty with
# its size and a resize, signals, and the close codes.
ws() { "$ws_client" --unix "$tmp/sbxd.sock" "$@"; }
# wspy NAME EXPR: EXPR over the client's summary line `b` in $tmp/NAME
wspy() {
    python3 -c 'import json,sys; b=json.loads(open(sys.argv[1]).read()); sys.exit(0 if eval(sys.argv[2]) else 1)' \
        "$tmp/$1" "$2" || fail "$1: $2: $(head -c 600 "$tmp/$1")"
}
wsbase=/v1/sandboxes/sbx_run/exec/ws
head -c 3000000 /dev/urandom >"$tmp/blob"
printf 'a\0b\0' >>"$tmp/blob"
ws --out "$tmp/ws1.out" "$wsbase" "{\"command\":[\"cat\"],\"user\":\"$uid\"}" "file:$tmp/blob" eof >"$tmp/ws1"
wspy ws1 'b["exit"]["exitCode"] == 0 and b["close"]["code"] == 1000 and b["messages"][0]["type"] == "start"'
cmp -s "$tmp/blob" "$tmp/ws1.out" || fail "ws stdin round trip: $(wc -c <"$tmp/ws1.out") bytes back"
ws --out "$tmp/ws2.out" "$wsbase" "{\"shell\":\"tty; stty size; read x; stty size; exit 7\",\"user\":\"$uid\",\"tty\":{\"rows\":33,\"cols\":101}}" \
    'wait:33 101' 'text:{"type":"resize","rows":50,"cols":132}' 'bytes:go
' >"$tmp/ws2"
wspy ws2 'b["exit"]["exitCode"] == 7 and b["close"]["code"] == 1000'
python3 - "$tmp/ws2.out" <<'PY' || fail "ws tty: $(cat -A "$tmp/ws2.out")"
import re, sys
lines = open(sys.argv[1], "rb").read().decode().split("\r\n")
assert re.fullmatch(r"/dev/pts/\d+", lines[0]), lines
assert [l for l in lines if re.fullmatch(r"\d+ \d+", l)] == ["33 101", "50 132"], lines
PY
ws "$wsbase" "{\"shell\":\"sleep 30\",\"user\":\"$uid\"}" 'text:{"type":"signal","signal":"TERM"}' >"$tmp/ws3"
wspy ws3 'b["exit"]["signal"] == 15 and b["exit"]["exitCode"] is None'
ws "$wsbase" '{"shell":' >"$tmp/ws4"
wspy ws4 'b["close"]["code"] == 1007 and b["error"]["code"] == "bad_request"'
ws "$wsbase" 'binary:{"shell":"true"}' >"$tmp/ws5"
wspy ws5 'b["close"]["code"] == 1003'
ws /v1/sandboxes/sbx_nope/exec/ws '{"shell":"true"}' >"$tmp/ws6"
wspy ws6 'b["close"] == {"code": 4404, "reason": "not_found"} and b["error"]["status"] == 404'
ws /v1/sandboxes/sbx_off/exec/ws '{"shell":"true"}' >"$tmp/ws7"
wspy ws7 'b["close"]["code"] == 4409 and b["error"]["code"] == "invalid_state"'
ws "$wsbase" '{"shell":"true","stdin":"eA=="}' >"$tmp/ws8"
wspy ws8 'b["close"]["code"] == 4400 and b["error"]["code"] == "invalid_argument"'
ws "$wsbase" "{\"shell\":\"cat\",\"user\":\"$uid\"}" 'text:{"type":"dance"}' >"$tmp/ws9"
wspy ws9 'b["close"]["code"] == 1003 and b["exit"] is None'
ws /v1/sandboxes/sbx_run/exec '{}' >"$tmp/ws10"
wspy ws10 'b["httpStatus"] == 405'
[ "$(status ws11 "$base/exec/ws")" = 400 ] || fail "a plain GET of exec/ws: $(cat "$tmp/ws11")"

# 9. The console log (the fixture's is $tmp/ID-console.log): ranges, the
# size header, a stopped sandbox's, errors.
printf 'Linux version 6.12\nline two\n' >"$tmp/sbx_run-console.log"
api -D "$tmp/log1.h" -o "$tmp/log1" "$base/logs"
[ "$(cat "$tmp/log1")" = "$(printf 'Linux version 6.12\nline two')" ] || fail "logs: $(cat "$tmp/log1")"
grep -qi '^Sandbox-Log-Size: 28' "$tmp/log1.h" || fail "logs: no size header: $(cat "$tmp/log1.h")"
[ "$(api "$base/logs?tail=9")" = "line two" ] || fail "logs tail"
[ "$(api "$base/logs?offset=19")" = "line two" ] || fail "logs offset"
head -c 3000000 /dev/urandom >"$tmp/sbx_off-console.log"
api -o "$tmp/log2" http://sbxd/v1/sandboxes/sbx_off/logs
cmp -s "$tmp/log2" "$tmp/sbx_off-console.log" || fail "the streamed log of a stopped sandbox differs"
[ "$(status log3 "$base/logs?offset=1&tail=2")" = 400 ] || fail "logs offset and tail: $(cat "$tmp/log3")"
py log3 'b["code"] == "invalid_argument"'
[ "$(status log4 http://sbxd/v1/sandboxes/sbx_nope/logs)" = 404 ] || fail "logs of an unknown sandbox"
py log4 'b["code"] == "not_found"'

# 10. Trees as tar: a GET lists what GNU tar sees, a PUT of GNU tar's
# archive makes the directory and lands byte for byte; errors.
if command -v tar >/dev/null; then
    src=$tmp/tree-src
    mkdir -p "$src/a/b" "$src/empty"
    head -c 2000000 /dev/urandom >"$src/a/b/blob"
    printf 'x\n' >"$src/a/x.txt"
    : >"$src/zero"
    ln -s a/x.txt "$src/link"
    api -o "$tmp/tree.tar" "$base/files/tar?path=$src"
    tar -tf "$tmp/tree.tar" | sort >"$tmp/tree.names"
    [ "$(tr '\n' ' ' <"$tmp/tree.names")" = "a/ a/b/ a/b/blob a/x.txt empty/ link zero " ] ||
        fail "tar GET names: $(cat "$tmp/tree.names")"
    tar -C "$src" -cf "$tmp/up.tar" .
    [ "$(status tput -X PUT -T "$tmp/up.tar" "$base/files/tar?path=$tmp/tree-dst/new")" = 200 ] ||
        fail "tar PUT: $(cat "$tmp/tput")"
    py tput 'b["entries"] == 8 and b["bytes"] == '"$(wc -c <"$tmp/up.tar")"' and b["skipped"] == 0'
    diff -r "$src" "$tmp/tree-dst/new" >/dev/null || fail "tar PUT: the trees differ"
    [ "$(readlink "$tmp/tree-dst/new/link")" = a/x.txt ] || fail "tar PUT: the symlink"
    [ "$(status tget2 "$base/files/tar?path=$tmp/none")" = 404 ] || fail "tar GET of nothing: $(cat "$tmp/tget2")"
    printf 'not a tar' >"$tmp/bad.tar"
    [ "$(status tput2 -X PUT -T "$tmp/bad.tar" "$base/files/tar?path=$tmp/tree-dst/bad")" = 400 ] ||
        fail "tar PUT of junk: $(cat "$tmp/tput2")"
    py tput2 'b["code"] == "invalid_argument"'
    [ "$(status tput3 -X PUT -T "$tmp/up.tar" http://sbxd/v1/sandboxes/sbx_off/files/tar?path=/x)" = 409 ] ||
        fail "tar PUT to a stopped sandbox: $(cat "$tmp/tput3")"
fi

if [ "$failures" -ne 0 ]; then
    echo "$failures failures" >&2
    exit 1
fi
echo "all guest route checks passed"
