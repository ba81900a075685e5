#!/usr/bin/env bash
# sbx forward, forward --reverse, ssh-proxy and ssh-config against sbxd's
# real server and TCP WebSocket routes over a host sbx-agent
# (sbxd_guest_fixture): a python3 echo server stands for the guest's (and
# the host's) TCP service, on 127.0.0.1 only. Checks bytes both ways, the
# half-close each way, many connections at once, a refused port, errors
# before the handshake, Ctrl-C, and the ssh config with the real
# ssh/ssh-keygen when installed. Needs no guest (suite unit).
# Usage: forward_test.sh FIXTURE SBX_AGENT SBX
set -euo pipefail
fixture=$1
agent=$2
sbx=$3
peers=$(dirname "$0")/tcp_peers.py
command -v python3 >/dev/null || { echo "no python3: skipped"; exit 77; }
# shellcheck source=SCRIPTDIR/../../sbxd/tests/test_lib.sh
. "$(dirname "$0")/../../sbxd/tests/test_lib.sh"
scratch sbx-forward
start_fixture "$fixture" "$agent"
export SBX_HOST=unix:$tmp/sbxd.sock
# Never the user's own ssh config or keys.
export HOME=$tmp/home XDG_CONFIG_HOME=$tmp/config
mkdir -p "$HOME"

helpers=()
cleanup_helpers() {
    for p in "${helpers[@]}"; do kill "$p" 2>/dev/null || true; done
    scratch_cleanup
}
trap cleanup_helpers EXIT

python3 "$peers" server "$tmp/echo.port" & helpers+=($!)
for _ in $(seq 100); do [ -e "$tmp/echo.port" ] && break; sleep 0.1; done
echo_port=$(cat "$tmp/echo.port")

# wait_json FILE KEY: the value of KEY in FILE's first JSON line that has it.
wait_json() {
    for _ in $(seq 100); do
        v=$(python3 -c 'import json,sys
for l in open(sys.argv[1]):
    try: d=json.loads(l)
    except ValueError: continue
    if sys.argv[2] in d: print(d[sys.argv[2]]); break' "$1" "$2" 2>/dev/null || true)
        [ -n "$v" ] && { echo "$v"; return 0; }
        sleep 0.1
    done
    return 1
}

# interrupt PID: Ctrl-C to a background sbx; $rc its exit status
# (SIGKILL and 137 when it has not ended 30 s later).
interrupt() {
    kill -INT "$1"
    for _ in $(seq 300); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$1" 2>/dev/null || true
    rc=0
    wait "$1" || rc=$?
}

# --- ssh-proxy: stdin/stdout over GET .../tcp/ws, both half-closes.
head -c 3000000 /dev/urandom >"$tmp/blob"
timeout 60 "$sbx" ssh-proxy sbx_run.sbx --port "$echo_port" --no-authorize <"$tmp/blob" >"$tmp/back" ||
    fail "ssh-proxy to the echo server: exit $?"
{ cat "$tmp/blob"; echo BYE; } | cmp -s - "$tmp/back" ||
    fail "ssh-proxy: $(wc -c <"$tmp/back") bytes back, not 3000000 + BYE"

# A guest port nothing listens on: closed with 4502 after the handshake.
closed_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
rc=0; timeout 30 "$sbx" ssh-proxy sbx_run --port "$closed_port" --no-authorize </dev/null 2>"$tmp/refused" || rc=$?
[ "$rc" != 0 ] || fail "a refused port: exit 0"
grep -q 'refused' "$tmp/refused" || fail "a refused port: $(cat "$tmp/refused")"
grep -q '4502' "$tmp/refused" || grep -q 'agent_unavailable' "$tmp/refused" || fail "a refused port is not 4502: $(cat "$tmp/refused")"

# Refused before the handshake, as the API's JSON errors.
rc=0; "$sbx" ssh-proxy sbx_nope --port 22 --no-authorize </dev/null 2>"$tmp/nope" || rc=$?
[ "$rc" != 0 ] && grep -q '"code":"not_found"' "$tmp/nope" || fail "an unknown sandbox: exit $rc, $(cat "$tmp/nope")"
rc=0; "$sbx" ssh-proxy sbx_off --port 22 --no-authorize </dev/null 2>"$tmp/off" || rc=$?
[ "$rc" != 0 ] && grep -q '"code":"invalid_state"' "$tmp/off" || fail "a stopped sandbox: exit $rc, $(cat "$tmp/off")"
rc=0; "$sbx" ssh-proxy sbx_run --port 0 --no-authorize </dev/null 2>"$tmp/zero" || rc=$?
[ "$rc" != 0 ] && grep -q '"code":"invalid_argument"' "$tmp/zero" || fail "port 0: exit $rc, $(cat "$tmp/zero")"
code=$(curl -s -o "$tmp/plain" -w '%{http_code}' --unix-socket "$tmp/sbxd.sock" \
    "http://sbxd/v1/sandboxes/sbx_run/tcp/ws?port=$echo_port&host=example.com" \
    -H 'Connection: Upgrade' -H 'Upgrade: websocket' -H 'Sec-WebSocket-Version: 13' \
    -H 'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==')
[ "$code" = 400 ] && grep -q 'numeric' "$tmp/plain" || fail "a host name: $code $(cat "$tmp/plain")"

# --- forward: a host listener, each connection its own WebSocket, 32 at once.
"$sbx" forward sbx_run "0:$echo_port" >"$tmp/fwd.out" 2>"$tmp/fwd.err" & fwd=$!
helpers+=("$fwd")
local_port=$(wait_json "$tmp/fwd.out" localPort) || fail "forward printed no localPort: $(cat "$tmp/fwd.out" "$tmp/fwd.err")"
if [ -n "${local_port:-}" ]; then
    timeout 120 python3 "$peers" clients "$local_port" 32 200000 || fail "32 forwarded connections at once"
    timeout 60 python3 "$peers" clients "$local_port" 1 5000000 || fail "5 MB through one forwarded connection"
fi
interrupt "$fwd"
[ "$rc" = 0 ] || fail "forward after Ctrl-C: exit $rc ($(cat "$tmp/fwd.err"))"
grep -q '"type":"stopped"' "$tmp/fwd.out" || fail "forward did not say it stopped: $(cat "$tmp/fwd.out")"

# A forward to a closed guest port: the local connection is reset, the forward goes on.
"$sbx" forward sbx_run "0:$closed_port" >"$tmp/fwd2.out" 2>"$tmp/fwd2.err" & fwd2=$!
helpers+=("$fwd2")
p2=$(wait_json "$tmp/fwd2.out" localPort) || fail "forward (closed port) printed no localPort"
if [ -n "${p2:-}" ]; then
    python3 "$peers" clients "$p2" 1 10 2>/dev/null && fail "a forward to a closed port carried bytes"
    kill -0 "$fwd2" 2>/dev/null || fail "forward ended after one failed connection"
fi
interrupt "$fwd2"
grep -q 'connection_failed' "$tmp/fwd2.out" || fail "no connection_failed event: $(cat "$tmp/fwd2.out")"

# --- forward --reverse: the agent listens (here on the host, as the fixture's
# "guest"), each connection comes through DIR/vsock.sock_P and its own WebSocket.
"$sbx" forward --reverse sbx_run "0:$echo_port" >"$tmp/rev.out" 2>"$tmp/rev.err" & rev=$!
helpers+=("$rev")
guest_port=$(wait_json "$tmp/rev.out" remotePort) || fail "reverse printed no remotePort: $(cat "$tmp/rev.out" "$tmp/rev.err")"
if [ -n "${guest_port:-}" ]; then
    timeout 120 python3 "$peers" clients "$guest_port" 16 200000 || fail "16 reverse connections at once"
    ls "$tmp"/vsock.sock_* >/dev/null 2>&1 || fail "no vsock listener socket while reversing"
fi
interrupt "$rev"
[ "$rc" = 0 ] || fail "reverse after Ctrl-C: exit $rc ($(cat "$tmp/rev.err"))"
if [ -n "${guest_port:-}" ]; then
    sleep 0.5
    python3 "$peers" clients "$guest_port" 1 10 2>/dev/null && fail "the guest listener outlived the reverse forward"
    ! ls "$tmp"/vsock.sock_* >/dev/null 2>&1 || fail "the vsock listener socket was left behind"
fi
# A reverse forward to a host port nothing listens on: the guest's connection is closed.
"$sbx" forward --reverse sbx_run "0:$closed_port" >"$tmp/rev2.out" 2>"$tmp/rev2.err" & rev2=$!
helpers+=("$rev2")
g2=$(wait_json "$tmp/rev2.out" remotePort) || fail "reverse (closed port) printed no remotePort"
if [ -n "${g2:-}" ]; then
    timeout 30 python3 "$peers" clients "$g2" 1 10 2>/dev/null && fail "a reverse forward to nothing carried bytes"
fi
interrupt "$rev2"
grep -q 'connection_failed' "$tmp/rev2.out" || fail "reverse: no connection_failed event: $(cat "$tmp/rev2.out")"

# --- ssh-config: a per-user key under XDG_CONFIG_HOME, the stanza once.
if command -v ssh-keygen >/dev/null && command -v ssh >/dev/null; then
    "$sbx" ssh-config >"$tmp/stanza.json" || fail "ssh-config: exit $?"
    [ -f "$XDG_CONFIG_HOME/sandboxer/ssh/id_ed25519" ] || fail "ssh-config made no key"
    [ "$(stat -c %a "$XDG_CONFIG_HOME/sandboxer/ssh")" = 700 ] || fail "the key's folder is not 0700"
    "$sbx" ssh-config --install >/dev/null || fail "ssh-config --install: exit $?"
    "$sbx" ssh-config --install >"$tmp/again.json" || fail "ssh-config --install again: exit $?"
    grep -q '"installed":false' "$tmp/again.json" || fail "a second --install: $(cat "$tmp/again.json")"
    [ "$(grep -c '^Host \*\.sbx$' "$HOME/.ssh/config")" = 1 ] || fail "the stanza is not there once"
    # The real OpenSSH reads it so: user, key, proxy command with %h expanded.
    ssh -G -F "$HOME/.ssh/config" sbx_run.sbx >"$tmp/ssh-G" || fail "ssh -G: exit $?"
    grep -qx 'user root' "$tmp/ssh-G" || fail "ssh -G: user: $(grep ^user "$tmp/ssh-G")"
    # (ssh -G leaves %h as it is)
    grep -qx "proxycommand /.*/sbx ssh-proxy %h" "$tmp/ssh-G" || fail "ssh -G: $(grep ^proxycommand "$tmp/ssh-G")"
    grep -q "^identityfile $XDG_CONFIG_HOME/sandboxer/ssh/id_ed25519$" "$tmp/ssh-G" ||
        fail "ssh -G: $(grep ^identityfile "$tmp/ssh-G")"
else
    echo "no ssh/ssh-keygen: ssh-config not checked"
fi

if [ "$failures" -ne 0 ]; then
    echo "$failures failures" >&2
    exit 1
fi
echo "all sbx forward checks passed"
