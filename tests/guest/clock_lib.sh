# shellcheck shell=bash
# The guest's wall clock against the host's, for the level-1 session
# scripts (sourced; they define ok and bad).
#
#   clock_check LABEL AGENTCTL_CMD...
#       reads the guest's wall clock through the agent (AGENTCTL_CMD exec),
#       with the host's time taken just before and after, and checks that
#       the guest's time lies within 1 s of that window (the agent round
#       trip itself can take seconds under the harness, so the window, not
#       a point, is what the guest is compared with). The minimal image's
#       busybox `date` has no %N, so the guest waits for its next whole
#       second and prints it then: its time is that second plus at most one
#       `date` call (0.25 s allowed). Prints "CLOCK-SKEW: LABEL S s (round
#       trip R s)", S being the guest's time minus the window's middle.
clock_check() {
  local label=$1 before guest after verdict
  shift
  before=$(date +%s.%N)
  # shellcheck disable=SC2016  # expanded by the guest's shell
  guest=$("$@" exec --shell 's=$(date +%s); while [ "$(date +%s)" = "$s" ]; do :; done; date +%s.%N' 2>/dev/null)
  after=$(date +%s.%N)
  guest=${guest%.%N}  # busybox without FEATURE_DATE_NANO prints %N as is
  verdict=$(awk -v b="$before" -v a="$after" -v g="$guest" 'BEGIN {
      if (g !~ /^[0-9]+(\.[0-9]+)?$/) { print "bad ? ?"; exit }
      lo = g + 0; hi = (g ~ /\./) ? lo : lo + 0.25
      skew = (lo + hi) / 2 - (a + b) / 2
      printf "%s %.3f %.3f\n", (hi >= b - 1 && lo <= a + 1) ? "ok" : "bad", skew, a - b }')
  # shellcheck disable=SC2086  # three words
  set -- $verdict
  echo "CLOCK-SKEW: $label ${2:-?} s (round trip ${3:-?} s)"
  if [ "$1" = ok ]; then
    ok "$label: the guest's clock is within 1 s of the host's (skew $2 s)"
  else
    bad "$label: the guest's clock is off: guest '$guest', host $before..$after"
  fi
}
