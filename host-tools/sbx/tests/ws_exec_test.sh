#!/usr/bin/env bash
# sbx exec over exec's WebSocket against sbxd's real server and API over a
# host sbx-agent (sbxd_guest_fixture, as guest_routes_test.sh): piped
# stdin streamed byte for byte, exit codes, --tty with the terminal's size
# (under script(1)), SIGWINCH as a resize, errors as exit 125. Needs no
# guest (suite unit). Usage: ws_exec_test.sh FIXTURE SBX_AGENT SBX
set -euo pipefail
fixture=$1
agent=$2
sbx=$3
# shellcheck source=SCRIPTDIR/../../sbxd/tests/test_lib.sh
. "$(dirname "$0")/../../sbxd/tests/test_lib.sh"
scratch sbx-ws
start_fixture "$fixture" "$agent"
export SBX_HOST=unix:$tmp/sbxd.sock
uid=$(id -u)

head -c 3000000 /dev/urandom >"$tmp/blob"
printf 'x\0y' >>"$tmp/blob"
cat "$tmp/blob" | timeout 60 "$sbx" exec sbx_run --user "$uid" -- cat >"$tmp/back" || fail "cat over a pipe: exit $?"
cmp -s "$tmp/blob" "$tmp/back" || fail "piped stdin came back as $(wc -c <"$tmp/back") bytes, not 3000003"
rc=0; echo in | timeout 30 "$sbx" exec sbx_run --user "$uid" -- sh -c 'cat >/dev/null; echo err >&2; exit 9' 2>"$tmp/err" || rc=$?
[ "$rc" = 9 ] || fail "exit code over the WebSocket: $rc"
[ "$(cat "$tmp/err")" = err ] || fail "stderr over the WebSocket: $(cat "$tmp/err")"
rc=0; echo x | timeout 30 "$sbx" exec sbx_nope -- true 2>"$tmp/nope" || rc=$?
[ "$rc" = 125 ] || fail "an unknown sandbox: exit $rc"
grep -q '"code":"not_found"' "$tmp/nope" || fail "an unknown sandbox: $(cat "$tmp/nope")"

if command -v script >/dev/null; then
    rc=0
    timeout 30 script -qec "stty rows 30 cols 90; $sbx exec sbx_run --tty --user $uid -- sh -c 'tty; stty size; exit 3'" \
        /dev/null >"$tmp/tty.out" || rc=$?
    [ "$rc" = 3 ] || fail "--tty exit code: $rc"
    grep -q '^/dev/pts/[0-9]' "$tmp/tty.out" || fail "--tty: no pty: $(cat -A "$tmp/tty.out")"
    grep -q '^30 90' "$tmp/tty.out" || fail "--tty: not the terminal's size: $(cat -A "$tmp/tty.out")"
    timeout 30 script -qec "sh -c '$sbx exec sbx_run --tty --user $uid -- sh -c \"stty size; sleep 2; stty size\" & p=\$!; sleep 1; stty rows 44 cols 77; kill -WINCH \$p; wait \$p'" \
        /dev/null >"$tmp/winch.out" || true
    grep -q '^44 77' "$tmp/winch.out" || fail "SIGWINCH did not resize: $(cat -A "$tmp/winch.out")"
else
    echo "no script(1): --tty not checked"
fi

if [ "$failures" -ne 0 ]; then
    echo "$failures failures" >&2
    exit 1
fi
echo "all sbx WebSocket exec checks passed"
