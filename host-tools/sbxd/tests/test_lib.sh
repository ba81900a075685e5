# shellcheck shell=bash
# Shared parts of sbxd's and sbx's shell unit tests (sourced): a scratch
# directory removed at exit (kept with KEEP=1) with whatever daemon the
# test started in $pid stopped first, a failure counter, and the start of
# sbxd and of sbxd_guest_fixture.

# scratch PREFIX [SIGNAL]: $tmp, a fresh directory /tmp/PREFIX-XXXXXX;
# $pid, the test's daemon, sent SIGNAL (default TERM) at exit; fail
# MESSAGE counts into $failures.
scratch() {
    tmp=$(mktemp -d "/tmp/$1-XXXXXX")
    scratch_signal=${2:-TERM}
    pid=
    failures=0
    trap scratch_cleanup EXIT
}
scratch_cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -"$scratch_signal" "$pid"
        wait "$pid" 2>/dev/null || true
    fi
    [ -n "${KEEP:-}" ] && { echo "kept $tmp" >&2; return; }
    rm -rf "$tmp"
}
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# start_sbxd SBXD LOG ARGS...: starts SBXD ARGS (which listen on
# tcp:127.0.0.1:0) with stderr in LOG, $pid; waits for its "listening on
# tcp:" line and sets $port, the port it chose.
start_sbxd() {
    local sbxd=$1 log=$2
    shift 2
    # --network off: a unit test never touches the host's own network;
    # --proxy-listen off: nor its port 8443, which tests run side by side would share
    "$sbxd" --network off --proxy-listen off "$@" 2>"$log" &
    pid=$!
    for _ in $(seq 100); do
        if grep -q 'listening on tcp:' "$log"; then break; fi
        kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; echo "sbxd exited at start" >&2; exit 1; }
        sleep 0.1
    done
    port=$(grep -o 'listening on tcp:127.0.0.1:[0-9]*' "$log" | tail -1 | sed 's/.*://') || true
    [ -n "$port" ] || { cat "$log" >&2; echo "sbxd did not listen" >&2; exit 1; }
}

# start_fixture FIXTURE AGENT: sbxd's server and API over a host sbx-agent
# (sbxd_guest_fixture), its socket $tmp/sbxd.sock; waits until it listens.
start_fixture() {
    "$1" "$2" "$tmp" >"$tmp/fixture.out" 2>"$tmp/fixture.log" &
    pid=$!
    for _ in $(seq 100); do
        grep -q listening "$tmp/fixture.out" && return 0
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    cat "$tmp/fixture.log" >&2
    echo "sbxd_guest_fixture did not start" >&2
    exit 1
}
# fixture_value KEY: one of the fixture's "KEY VALUE" lines (tcp, key_host,
# key_scoped, key_read: its TCP listener and API keys).
fixture_value() { awk -v k="$1" '$1 == k { print $2 }' "$tmp/fixture.out"; }
