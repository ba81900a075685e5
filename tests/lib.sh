# Shared helpers for the shell-level tests (sourced, not run).
# Every test prints what it checked and fails with a reason.

fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok: $*"; }

# expect_contains HAYSTACK NEEDLE WHAT
expect_contains() {
  case "$1" in
    *"$2"*) pass "$3" ;;
    *) printf '%s\n' "$1" | tail -n 40 >&2; fail "$3: output lacks '$2'" ;;
  esac
}

# run_nested OUT_FILE ARGS... : runs ARGS through tests/nested with stdout and
# stderr in OUT_FILE; sets $status and $log.
run_nested() {
  local out=$1; shift
  set +e
  "$src/tests/nested" "$@" >"$out" 2>&1
  status=$?
  set -e
  log=$(cat "$out")
}

# expect_status WANT WHAT : checks $status from run_nested, showing the log's tail on failure.
expect_status() {
  [ "$status" -eq "$1" ] || { printf '%s\n' "$log" | tail -n 60 >&2; fail "$2: exit status $status, expected $1"; }
  pass "$2"
}
