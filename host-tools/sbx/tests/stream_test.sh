#!/usr/bin/env bash
# sbx's streaming paths against fake_exec_sbxd.py (the exec, process and
# file routes of /work/helpers/exec-api.md, which the built sbxd does not
# serve yet): exec's stdout, stderr, stdin and exit status through NDJSON
# cut at odd places, 128+N, 124 and 125; --attach from an offset through
# SSE; scp both ways with 24 MiB of random bytes, and a download cut
# halfway leaving nothing behind. Suite unit. Usage: stream_test.sh BUILD_ROOT
set -euo pipefail
build=$1
sbx=$build/host-tools/sbx/sbx
here=$(cd "$(dirname "$0")" && pwd)
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }

tmp=$(mktemp -d /tmp/sbx-stream-XXXXXX)
pid=
cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; fi
    rm -rf "$tmp"
}
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
mkdir "$tmp/files"
python3 "$here/fake_exec_sbxd.py" "$tmp/fake.sock" "$tmp/requests.log" "$tmp/files" &
pid=$!
disown "$pid"  # its end at cleanup is not news
for _ in $(seq 100); do [ -S "$tmp/fake.sock" ] && break; sleep 0.05; done
export SBX_HOST=unix:$tmp/fake.sock

# status NAME WANT CMD...: runs CMD, checks its exit status.
status() {
    local name=$1 want=$2 got=0
    shift 2
    "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" || got=$?
    [ "$got" = "$want" ] || fail "$name: exited $got, want $want: $(cat "$tmp/$name.err")"
}

printf 'hello\nworld\n' >"$tmp/stdin"
status exec 7 "$sbx" exec sbx_fake -e A=1 --cwd /tmp --user nobody --timeout 5s -- echo-stdin --flag <"$tmp/stdin"
printf 'hello\nworld\n\0binary\377' | cmp -s - "$tmp/exec.out" || fail "exec stdout: $(od -c "$tmp/exec.out" | head)"
[ "$(cat "$tmp/exec.err")" = err ] || fail "exec stderr: $(cat "$tmp/exec.err")"
python3 - "$tmp/requests.log" <<'PY' || fail "exec request body: $(head -1 "$tmp/requests.log")"
import json, sys
body = json.loads(open(sys.argv[1]).readline())
assert body == {"command": ["echo-stdin", "--flag"], "env": {"A": "1"}, "cwd": "/tmp", "user": "nobody",
                "timeoutMs": 5000, "stdin": "aGVsbG8Kd29ybGQK"}, body
PY
status no_stdin 7 "$sbx" exec sbx_fake --no-stdin -- echo-stdin <"$tmp/stdin"
if tail -1 "$tmp/requests.log" | grep -q '"stdin":'; then fail "--no-stdin sent stdin"; fi
status signal 137 "$sbx" exec sbx_fake -- signal </dev/null
status timeout 124 "$sbx" exec sbx_fake -- timeout </dev/null
status failed 125 "$sbx" exec sbx_fake -- fail </dev/null
grep -q '"code":"agent_lost"' "$tmp/failed.err" || fail "exec error event: $(cat "$tmp/failed.err")"
status cut 125 "$sbx" exec sbx_fake -- cut </dev/null
[ "$(cat "$tmp/cut.out")" = partial ] || fail "cut: the output before the cut: $(cat "$tmp/cut.out")"
grep -q '"code":"connection_lost"' "$tmp/cut.err" || fail "cut: $(cat "$tmp/cut.err")"
status raw 7 "$sbx" exec --json sbx_fake -- echo-stdin </dev/null
[ "$(grep -c '"type"' "$tmp/raw.out")" = 5 ] || fail "--json: not the 5 events: $(cat "$tmp/raw.out")"

status detach 0 "$sbx" exec sbx_fake --detach -- job
grep -q '"type":"process".*"id":"proc_1"' "$tmp/detach.out" || fail "detach: $(cat "$tmp/detach.out")"
status proc_status 0 "$sbx" exec sbx_fake --status proc_1
grep -q '"exitCode":3' "$tmp/proc_status.out" || fail "status: $(cat "$tmp/proc_status.out")"

# The output from an offset, to its exit: every byte after it, once.
python3 -c 'import sys; sys.stdout.buffer.write((bytes(range(256)) * 40 + b"the end\n")[3000:])' >"$tmp/want_attach"
status attach 3 "$sbx" exec sbx_fake --attach proc_1 --offset 3000
cmp -s "$tmp/want_attach" "$tmp/attach.out" || fail "attach from 3000: $(wc -c <"$tmp/attach.out") bytes, not the rest"
# Cut off (the fake ends offset 1 without an exit): 125, and where to reattach.
status attach_cut 125 "$sbx" exec sbx_fake --attach proc_1 --offset 1
grep -q -- "--offset 10248" "$tmp/attach_cut.err" || fail "attach cut: $(cat "$tmp/attach_cut.err")"

# Stopped while attached (SIGTERM; SIGINT the same): 128+N, and the
# offset it reached, which is where it started plus what it wrote.
"$sbx" exec sbx_fake --attach proc_1 --offset 2 >"$tmp/stopped.out" 2>"$tmp/stopped.err" &
reader=$!
for _ in $(seq 100); do [ -s "$tmp/stopped.out" ] && break; sleep 0.05; done
sleep 0.2
kill -TERM "$reader"
got=0
wait "$reader" || got=$?
[ "$got" = 143 ] || fail "stopped attach exited $got, want 143"
[ "$(wc -c <"$tmp/stopped.out")" = 1000 ] || fail "stopped attach wrote $(wc -c <"$tmp/stopped.out") bytes"
grep -q '^{"type":"detached","offset":1002,"id":"sbx_fake","process":"proc_1"}$' "$tmp/stopped.err" ||
    fail "stopped attach: $(cat "$tmp/stopped.err")"

# scp: 24 MiB both ways; into a directory keeps the name.
head -c $((24 * 1024 * 1024)) /dev/urandom >"$tmp/big.bin"
chmod 0640 "$tmp/big.bin"
status up 0 "$sbx" scp "$tmp/big.bin" sbx_fake:/root
grep -q '"to":"sbx_fake:/root/big.bin","bytes":25165824' "$tmp/up.out" || fail "upload: $(cat "$tmp/up.out")"
grep -q '"path": "/root/big.bin", "mode": "0640"' "$tmp/requests.log" || fail "upload query: $(tail -1 "$tmp/requests.log")"
mkdir "$tmp/down"
status down 0 "$sbx" scp sbx_fake:/root/big.bin "$tmp/down"
cmp -s "$tmp/big.bin" "$tmp/down/big.bin" || fail "the download differs from the upload"
status down_stdout 0 "$sbx" scp sbx_fake:/root/big.bin -
cmp -s "$tmp/big.bin" "$tmp/down_stdout.out" || fail "the download to stdout differs"
status missing 1 "$sbx" scp sbx_fake:/root/nothing "$tmp/down/nothing"
grep -q '"code":"not_found"' "$tmp/missing.err" || fail "missing: $(cat "$tmp/missing.err")"
# A download cut halfway: exit 3, and neither the file nor a partial one.
status up_cut 0 "$sbx" scp "$tmp/big.bin" sbx_fake:/root/cut
status down_cut 3 "$sbx" scp sbx_fake:/root/cut "$tmp/down/cut"
[ -z "$(ls "$tmp/down" | grep cut)" ] || fail "a cut download left $(ls "$tmp/down")"
status no_local 4 "$sbx" scp "$tmp/does-not-exist" sbx_fake:/root/x
grep -q '"code":"local"' "$tmp/no_local.err" || fail "no local file: $(cat "$tmp/no_local.err")"

if [ "$failures" -ne 0 ]; then
    echo "$failures check(s) failed" >&2
    exit 1
fi
echo "sbx streams: all checks passed"
