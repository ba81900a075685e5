# shellcheck shell=bash
# Condition waits with a deadline, for the level-1 session scripts
# (tests/guest/*_session.sh; sourced). A guest test never waits with a fixed
# `sleep` for something to happen: it polls for the thing itself (a file, a
# counter that moved, an agent reply) until a deadline, and says what it
# waited for when the deadline passes. Deadlines are generous (the nested
# harness runs guests 10-50x slower than hardware and CI is loaded) but
# finite. CMD must itself be bounded (e.g. sbx-agentctl's --connect-timeout,
# exec --timeout-ms): a deadline is checked between attempts.
#
#   wait_until DEADLINE_S DESCRIPTION CMD...
#       runs CMD (a command or shell function, in this shell) every
#       $WAIT_INTERVAL s (default 0.2) until it succeeds. Returns 0 as soon
#       as it does; after DEADLINE_S seconds, prints
#       "wait: gave up after N s (M tries): DESCRIPTION" on stderr and
#       returns 1.
#   wait_counter VAR DEADLINE_S MIN CMD...
#       polls CMD until its output is an integer greater than MIN, and sets
#       VAR to it (MIN 0: until it is a positive integer; MIN = an earlier
#       reading: until it has moved past it). On timeout VAR holds CMD's
#       last output (maybe empty) and it returns 1.
#   wait_exit PID DEADLINE_S
#       waits for the child PID to exit; sets $st to its exit status, or to
#       the empty string if it is still running at the deadline (return 1).
#   wait_crash_dumps DIR
#       waits (up to $SBX_CRASH_DUMP_WAIT s, default 600) until no sbx-vmm
#       in DIR is still writing a crash dump (sbx-vmm-PID.mem.partial,
#       renamed to sbx-vmm-PID.mem when whole): a session that ends while a
#       dump is half written leaves tests/lib.sh a dump it cannot walk.

wait_until() {
  local deadline=$1 what=$2 end tries=0
  shift 2
  [[ $deadline =~ ^[0-9]+$ ]] || { echo "wait_until: bad deadline '$deadline' ($what)" >&2; return 2; }
  # $SECONDS, not date or awk: no process per attempt (level 1 is slow).
  end=$((SECONDS + deadline))
  while :; do
    tries=$((tries + 1))
    "$@" && return 0
    if [ "$SECONDS" -ge "$end" ]; then
      echo "wait: gave up after $deadline s ($tries tries): $what" >&2
      return 1
    fi
    sleep "${WAIT_INTERVAL:-0.2}"
  done
}

# _wait_integer_above MIN CMD... : succeeds if CMD prints an integer > MIN;
# the output (whitespace removed) is left in $wait_last either way.
_wait_integer_above() {
  local min=$1
  shift
  wait_last=$("$@" 2>/dev/null)
  wait_last=${wait_last//[[:space:]]/}
  [[ $wait_last =~ ^[0-9]+$ ]] && [ "$wait_last" -gt "$min" ]
}

wait_counter() {
  # Odd local names: VAR is the caller's variable (printf -v).
  local _wc_var=$1 _wc_deadline=$2 _wc_min=$3
  shift 3
  wait_last=
  [[ $_wc_min =~ ^[0-9]+$ ]] || { printf -v "$_wc_var" %s ""; echo "wait_counter: bad minimum '$_wc_min'" >&2; return 2; }
  if wait_until "$_wc_deadline" "'$*' to print an integer above $_wc_min" _wait_integer_above "$_wc_min" "$@"; then
    printf -v "$_wc_var" %s "$wait_last"
    return 0
  fi
  echo "wait: ... its last output: '$(printf %s "$wait_last" | head -c 200)'" >&2
  printf -v "$_wc_var" %s "$wait_last"
  return 1
}

_wait_gone() { ! kill -0 "$1" 2>/dev/null; }

wait_exit() {
  st=
  if WAIT_INTERVAL=0.5 wait_until "$2" "process $1 to exit" _wait_gone "$1"; then
    wait "$1"
    # shellcheck disable=SC2034 # for the caller
    st=$?
    return 0
  fi
  return 1
}

no_partial_dump() { ! compgen -G "$1/sbx-vmm-*.mem.partial" >/dev/null; }
wait_crash_dumps() {
  no_partial_dump "$1" && return 0
  WAIT_INTERVAL=1 wait_until "${SBX_CRASH_DUMP_WAIT:-600}" "a crash dump being written in $1" no_partial_dump "$1"
}
