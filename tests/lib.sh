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
