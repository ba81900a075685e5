#!/usr/bin/env bash
# sbx scp -r and sbx logs against sbxd's real server and API over a host
# sbx-agent (sbxd_guest_fixture, as guest_routes_test.sh: the "guest" is
# this host, its console logs DIR/ID-console.log). scp -r: a tree both
# ways byte for byte, into existing and new directories, set-id bits
# dropped and a link out refused on the way back, the JSON summary, a
# progress line on a terminal, errors. logs: the raw bytes, --tail,
# --json, --follow until the sandbox stops, errors. Needs no guest (suite
# unit).
# Usage: files_test.sh FIXTURE SBX_AGENT SBX
set -euo pipefail
fixture=$1
agent=$2
sbx=$3
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
# shellcheck source=host-tools/sbxd/tests/test_lib.sh
. "$(dirname "$0")/../../sbxd/tests/test_lib.sh"
scratch sbx-files
start_fixture "$fixture" "$agent"
export SBX_HOST=unix:$tmp/sbxd.sock

# 1. scp -r up and back: nested directories, a few MiB of random bytes, an
# empty file and directory, symlinks; into a directory that exists (it
# keeps its name) and to a new name.
src=$tmp/src
mkdir -p "$src/a/b/c" "$src/empty"
head -c $((3 * 1024 * 1024 + 17)) /dev/urandom >"$src/a/b/blob.bin"
printf 'hello\n' >"$src/a/hello.txt"
: >"$src/a/b/c/zero"
ln -s a/hello.txt "$src/link"
ln -s ../hello.txt "$src/a/b/up"
chmod 0750 "$src/a/b"
g=$tmp/guest
mkdir "$g"
timeout 60 "$sbx" scp -r "$src" "sbx_run:$g" >"$tmp/up1" || fail "scp -r up: exit $?"
diff -r "$src" "$g/src" >/dev/null || fail "scp -r up: the trees differ"
[ "$(readlink "$g/src/a/b/up")" = ../hello.txt ] || fail "scp -r up: a symlink"
[ "$(stat -c %a "$g/src/a/b")" = 750 ] || fail "scp -r up: a directory's mode"
python3 - "$tmp/up1" <<'PY' || fail "scp -r up: $(cat "$tmp/up1")"
import json, os, sys
e = json.loads(open(sys.argv[1]).read())
assert e["type"] == "copied" and e["to"].endswith("/guest/src") and e["entries"] == 9, e
assert e["bytes"] > 3 * 1024 * 1024 and e["skipped"] == 0, e
PY
timeout 60 "$sbx" scp -r "$src/" "sbx_run:$g/renamed" >/dev/null || fail "scp -r up to a new name: exit $?"
diff -r "$src" "$g/renamed" >/dev/null || fail "scp -r up to a new name: the trees differ"
timeout 60 "$sbx" scp -r "sbx_run:$g/src" "$tmp/back" >"$tmp/down1" || fail "scp -r down: exit $?"
diff -r "$src" "$tmp/back" >/dev/null || fail "scp -r down: the trees differ"
mkdir "$tmp/into"
timeout 60 "$sbx" scp -r "sbx_run:$g/src" "$tmp/into" >/dev/null || fail "scp -r down into a directory: exit $?"
diff -r "$src" "$tmp/into/src" >/dev/null || fail "scp -r down into a directory: the trees differ"
# A file with -r is copied as a file.
timeout 30 "$sbx" scp -r "sbx_run:$g/src/a/hello.txt" "$tmp/one.txt" >/dev/null || fail "scp -r of a file: exit $?"
[ "$(cat "$tmp/one.txt")" = hello ] || fail "scp -r of a file"

# 2. What the guest sends is checked here: set-id bits are dropped, a
# link out of the target refuses the copy and leaves nothing behind.
mkdir -p "$g/odd"
printf '#!/bin/sh\n' >"$g/odd/tool"
chmod 4755 "$g/odd/tool"
timeout 30 "$sbx" scp -r "sbx_run:$g/odd" "$tmp/odd" >/dev/null || fail "scp -r of a set-id file: exit $?"
[ "$(stat -c %a "$tmp/odd/tool")" = 755 ] || fail "the set-id bit came along: $(stat -c %a "$tmp/odd/tool")"
ln -s ../../../../../etc "$g/odd/out"
rc=0; timeout 30 "$sbx" scp -r "sbx_run:$g/odd" "$tmp/evil" >/dev/null 2>"$tmp/evil.err" || rc=$?
[ "$rc" = 4 ] || fail "a link out: exit $rc: $(cat "$tmp/evil.err")"
if [ -e "$tmp/evil" ] || compgen -G "$tmp/evil.sbx-partial-*" >/dev/null; then fail "a refused tree left files behind"; fi

# expect WANT-RC GOT-RC FILE PATTERN WHAT: the exit code and a line of stderr.
expect() {
    if [ "$2" != "$1" ] || ! grep -q "$4" "$3"; then fail "$5: exit $2: $(cat "$3")"; fi
}

# 3. Errors: a directory without -r (either way), an upload to a stopped
# sandbox, a missing path; on a terminal, a progress line.
rc=0; timeout 30 "$sbx" scp "$src" "sbx_run:$g/x" >/dev/null 2>"$tmp/e1" || rc=$?
expect 4 "$rc" "$tmp/e1" 'scp -r' "a directory without -r"
rc=0; timeout 30 "$sbx" scp "sbx_run:$g/src" "$tmp/x" >/dev/null 2>"$tmp/e2" || rc=$?
expect 1 "$rc" "$tmp/e2" 'scp -r' "a remote directory without -r"
rc=0; timeout 30 "$sbx" scp -r "$src" sbx_off:/root/x >/dev/null 2>"$tmp/e3" || rc=$?
expect 1 "$rc" "$tmp/e3" '"code":"invalid_state"' "scp -r to a stopped sandbox"
rc=0; timeout 30 "$sbx" scp -r "sbx_run:$g/none" "$tmp/none" >/dev/null 2>"$tmp/e4" || rc=$?
expect 1 "$rc" "$tmp/e4" '"code":"not_found"' "scp -r of nothing"
[ ! -e "$tmp/none" ] || fail "scp -r of nothing made $tmp/none"
if command -v script >/dev/null; then
    timeout 60 script -qec "$sbx scp -r sbx_run:$g/src $tmp/tty-back" /dev/null >"$tmp/tty.out" 2>&1 || fail "scp -r on a terminal"
    grep -q 'MiB' "$tmp/tty.out" || fail "scp -r on a terminal: no progress: $(cat -A "$tmp/tty.out" | head -5)"
    grep -q '9 entries' "$tmp/tty.out" || fail "scp -r on a terminal: no summary: $(cat -A "$tmp/tty.out" | head -5)"
fi

# 4. logs: the whole log as raw bytes (piped: no JSON), --tail, --json.
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

# 5. --follow: what the console gets meanwhile, a restart of the file,
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

# 6. logs errors: an unknown sandbox (exit 1, not_found), a bad --tail (usage).
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
