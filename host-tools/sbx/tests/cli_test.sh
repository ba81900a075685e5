#!/usr/bin/env bash
# sbx against the real built sbxd, on a Unix socket and a TCP port in a
# temporary directory: JSON when piped, the error event and exit codes
# (docs/sbx.md), SBX_HOST over TCP without and with a key, API keys made,
# listed and revoked through sbx, an unreachable daemon. This sbxd answers sandbox-changing routes with 501 and has no
# exec routes yet, so these are the answers checked.
# Needs no guest (suite unit). Usage: cli_test.sh BUILD_ROOT
set -euo pipefail
build=$1
sbxd=$build/host-tools/sbxd/sbxd
sbx=$build/host-tools/sbx/sbx
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }

# shellcheck source=SCRIPTDIR/../../sbxd/tests/test_lib.sh
. "$(dirname "$0")/../../sbxd/tests/test_lib.sh"
scratch sbx-cli KILL
sock=$tmp/sbxd.sock
state=$tmp/state

# No images: a create is refused whether or not this sbxd has its VMM
# driver (501 not_implemented without it, 404 not_found with it), and
# never boots anything.
mkdir "$tmp/no-images"
start_sbxd "$sbxd" "$tmp/sbxd.log" --state-dir "$state" --listen "unix:$sock" --listen tcp:127.0.0.1:0 \
    --images "$tmp/no-images"

# run NAME WANT-EXIT sbx-args...: stdout in $tmp/NAME.out, stderr .err.
# stdout is a file here, so sbx speaks JSON.
run() {
    local name=$1 want=$2 got=0
    shift 2
    SBX_HOST=${SBX_HOST:-unix:$sock} "$sbx" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" </dev/null || got=$?
    [ "$got" = "$want" ] || fail "$name: sbx $* exited $got, want $want; stderr: $(cat "$tmp/$name.err")"
}
# check NAME STREAM PYTHON-EXPR: an expression over `lines` (the JSON
# objects of $tmp/NAME.STREAM, one a line) and `last` (the last one).
check() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$tmp/checks"; }
check_all() {
    python3 - "$tmp" <<'PY' || failures=$((failures + 1))
import json, sys
tmp = sys.argv[1]
bad = 0
for line in open(tmp + "/checks"):
    name, stream, expr = line.rstrip("\n").split("\t", 2)
    text = open(f"{tmp}/{name}.{stream}").read()
    try:
        lines = [json.loads(l) for l in text.splitlines()]
        last = lines[-1]
        good = eval(expr)
    except Exception as e:
        good = False
        expr += f" ({e!r})"
    if not good:
        print(f"FAIL: {name}.{stream}: {expr}: {text!r}", file=sys.stderr)
        bad += 1
sys.exit(1 if bad else 0)
PY
}
# The error event of docs/sbx.md, alone on stderr.
error_is() {
    check "$1" err "len(lines) == 1 and sorted(last) == ['code','message','requestId','status','type'] and last['type'] == 'error' and last['status'] == $2 and last['code'] == '$3' and last['message'] != ''"
}
empty() { [ ! -s "$tmp/$1.$2" ] || fail "$1: $2 is not empty: $(cat "$tmp/$1.$2")"; }

run ls 0 ls
check ls out "lines == [{'type': 'sandboxes', 'sandboxes': []}]"
empty ls err
run ls_sel 0 ls --label owner=alice --label run=42 --state running,stopped --state paused
check ls_sel out "last == {'type': 'sandboxes', 'sandboxes': []}"
run ls_bad_state 1 ls --state asleep
error_is ls_bad_state 400 invalid_argument
check ls_bad_state err "last['requestId'].startswith('req_')"

run new 1 new --size small --label owner=alice -e FOO=bar --ttl 2h --idle 15 --idempotency-key k1
check new err "len(lines) == 1 and last['type'] == 'error' and (last['status'], last['code']) in [(501, 'not_implemented'), (404, 'not_found')] and last['requestId'].startswith('req_')"
check new out "lines == [{'type': 'creating', 'request': {'size': 'small', 'labels': {'owner': 'alice'}, 'env': {'FOO': 'bar'}, 'idleMinutes': 15, 'ttl': '2h'}}]"
run new_bad_size 1 new --size huge
error_is new_bad_size 400 invalid_argument
run new_ttl_and_never 2 new --ttl 1h --no-auto-stop
error_is new_ttl_and_never None usage

run info_missing 1 info sbx_missing
error_is info_missing 404 not_found
empty info_missing out
run stop_missing 1 stop sbx_missing --disk-only
error_is stop_missing 404 not_found
run resume_missing 1 resume sbx_missing --type large
error_is resume_missing 404 not_found
run fork_missing 1 fork sbx_missing --count 3
error_is fork_missing 404 not_found
run history_missing 1 history sbx_missing
error_is history_missing 404 not_found
run snapshot_missing 1 snapshot sbx_missing py-ready
error_is snapshot_missing 404 not_found
run snapshot_ls 0 snapshot ls
check snapshot_ls out "lines == [{'type': 'snapshots', 'snapshots': []}]"
run snapshot_rm_missing 1 snapshot rm py-ready
error_is snapshot_rm_missing 404 not_found
run new_cold_missing 1 new --cold --from py-ready
error_is new_cold_missing 404 not_found
run events 0 events --after 0
check events out "lines == [{'type': 'events', 'events': []}]"
run ttl_missing 1 ttl sbx_missing 2h
error_is ttl_missing 404 not_found
run ttl_off_missing 1 ttl sbx_missing off
error_is ttl_off_missing 404 not_found
run idle_missing 1 idle sbx_missing 15
error_is idle_missing 404 not_found
run ttl_bad 2 ttl sbx_1 soon
error_is ttl_bad None usage
run idle_bad 2 idle sbx_1 15m
error_is idle_bad None usage
run idle_no_value 2 idle sbx_1
error_is idle_no_value None usage
run rm_missing 1 rm sbx_missing
error_is rm_missing 404 not_found
check rm_missing out "last == {'type': 'deleted', 'dryRun': False, 'deleted': []}"
run rm_label_dry 0 rm --label owner=nobody --dry-run
check rm_label_dry out "last == {'type': 'deleted', 'dryRun': True, 'deleted': []}"
# This sbxd has no exec routes: a command never ran, so sbx's own 125.
run exec_missing 125 exec sbx_missing -- echo hi
error_is exec_missing 404 not_found
run exec_status_missing 1 exec sbx_missing --status proc_1
error_is exec_status_missing 404 not_found

# Usage: exit 2 and the error event, before anything is sent.
run bad_flag 2 ls --bogus
error_is bad_flag None usage
run no_command 2
error_is no_command None usage
run exec_no_cmd 2 exec sbx_1
error_is exec_no_cmd None usage
run exec_two_modes 2 exec sbx_1 --detach --status proc_1
error_is exec_two_modes None usage
run bad_label 2 new --label owner
error_is bad_label None usage
run scp_two_local 2 scp a b
error_is scp_two_local None usage
run scp_relative 2 scp a sbx_1:relative/path
error_is scp_relative None usage
run dashes_not_exec 2 ls -- x
error_is dashes_not_exec None usage
SBX_HOST=tcp:127.0.0.1:1 run bad_host 2 ls
error_is bad_host None usage
run help 0 --help
grep -q 'exec' "$tmp/help.out" || fail "--help does not list exec"

# TCP: 401 without a key (with a hint), the list with one.
SBX_HOST=http://127.0.0.1:$port run tcp_nokey 1 ls
error_is tcp_nokey 401 unauthorized
check tcp_nokey err "'SBX_API_KEY' in last['message']"
key=$("$sbxd" --state-dir "$state" keys create --name cli-test 2>/dev/null)
SBX_HOST=http://127.0.0.1:$port SBX_API_KEY=sbxk_$(printf '%064d' 0) run tcp_wrongkey 1 ls
error_is tcp_wrongkey 401 unauthorized
SBX_HOST=http://127.0.0.1:$port SBX_API_KEY=$key run tcp_key 0 ls
check tcp_key out "lines == [{'type': 'sandboxes', 'sandboxes': []}]"
SBX_HOST=http://127.0.0.1:$port SBX_API_KEY=$key run tcp_info 1 info sbx_missing
error_is tcp_info 404 not_found

# API keys through the API: one made by sbx works over TCP within its
# scope; listed without its secret; revoked, it is 401.
run keys_missing_sandbox 1 keys create --sandbox sbx_missing
error_is keys_missing_sandbox 404 not_found
run keys_bad_expiry 2 keys create --expires soon
error_is keys_bad_expiry None usage
run keys_create 0 keys create --name reader --read-only --expires 30d
check keys_create out "last['type'] == 'key' and last['secret'].startswith('sbxk_') and last['key']['readOnly'] and last['key']['name'] == 'reader' and last['key']['expiresAt'] is not None"
made_key=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["secret"])' "$tmp/keys_create.out")
made_id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["key"]["id"])' "$tmp/keys_create.out")
SBX_HOST=http://127.0.0.1:$port SBX_API_KEY=$made_key run keys_reads 0 ls
SBX_HOST=http://127.0.0.1:$port SBX_API_KEY=$made_key run keys_read_only 1 keys create
error_is keys_read_only 403 forbidden
run keys_ls 0 keys ls
check keys_ls out "last['type'] == 'keys' and '$made_id' in [k['id'] for k in last['keys']] and '${made_key#sbxk_}' not in json.dumps(last)"
run keys_rm 0 keys rm "$made_id"
check keys_rm out "last == {'type': 'key_deleted', 'id': '$made_id'}"
SBX_HOST=http://127.0.0.1:$port SBX_API_KEY=$made_key run keys_revoked 1 ls
error_is keys_revoked 401 unauthorized
run keys_rm_again 1 keys rm "$made_id"
error_is keys_rm_again 404 not_found
run keys_alone 2 keys
error_is keys_alone None usage

# A terminal gets people's text, not JSON (script(1) gives sbx a tty).
if command -v script >/dev/null; then
    SBX_HOST=unix:$sock script -qec "$sbx info sbx_missing" /dev/null >"$tmp/tty.out" 2>&1 || true
    grep -q '^sbx: .*(not_found, HTTP 404, req_' "$tmp/tty.out" || fail "tty error: $(cat "$tmp/tty.out")"
    SBX_HOST=unix:$sock script -qec "$sbx --json info sbx_missing" /dev/null >"$tmp/tty_json.out" 2>&1 || true
    grep -q '"code":"not_found"' "$tmp/tty_json.out" || fail "--json on a tty: $(cat "$tmp/tty_json.out")"
fi

# Bash completion: commands, flags and values (ids come from `sbx ls`).
complete_words() {
    SBX_HOST=unix:$sock PATH=$build/host-tools/sbx:$PATH bash -c '
        source "$1"; shift
        COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _sbx; echo "${COMPREPLY[*]}"' _ \
        "$(dirname "$0")/../sbx.bash-completion" "$@"
}
[ "$(complete_words sbx ne)" = new ] || fail "completion of 'ne': $(complete_words sbx ne)"
[ "$(complete_words sbx new --si)" = --size ] || fail "completion of new --si"
[ "$(complete_words sbx resume sbx_1 --type l)" = large ] || fail "completion of --type l"
[ "$(complete_words sbx --json ls --st)" = --state ] || fail "completion of ls --st after --json"
[ -z "$(complete_words sbx exec sbx_1 -- ne)" ] || fail "completion after -- is not ours"
[ "$(complete_words sbx tt)" = ttl ] || fail "completion of 'tt': $(complete_words sbx tt)"
[ "$(complete_words sbx idle sbx_1 o)" = off ] || fail "completion of idle ID o"
[ "$(complete_words sbx ttl sbx_1 o)" = off ] || fail "completion of ttl ID o"
[ "$(complete_words sbx keys cr)" = create ] || fail "completion of keys cr: $(complete_words sbx keys cr)"
[ "$(complete_words sbx keys create --re)" = --read-only ] || fail "completion of keys create --re"

# The daemon gone: exit 3 and a message naming where sbx looked.
kill -TERM "$pid"
wait "$pid" || true
pid=
run gone 3 ls
error_is gone None unreachable
check gone err "'unix:$sock' in last['message'] and 'sbxd running' in last['message']"
SBX_HOST=http://127.0.0.1:$port SBX_API_KEY=$key run gone_tcp 3 info sbx_1
error_is gone_tcp None unreachable
run gone_exec 125 exec sbx_1 -- true
error_is gone_exec None unreachable

check_all
if [ "$failures" -ne 0 ]; then
    echo "$failures check(s) failed" >&2
    exit 1
fi
echo "sbx cli: all checks passed"
