# sbxd part "examples" (sourced by session.sh, sbxd running): the examples
# (examples/run_all.sh) against the real sbxd and real VMs, each making and
# deleting its own sandboxes: a Vercel AI SDK tool() driven by the AI SDK's
# mock model, a Python agent tool keyed by conversation id (one sandbox per
# conversation, reused), and a CSV analysis whose chart comes back as PNG.
# tests/guest/sbxd.sh installs their npm packages and builds the TypeScript
# SDK at level 0.
# shellcheck shell=bash
# session.sh and lib.sh set w, sock, here:
# shellcheck disable=SC2154

t=$(now)
ex_out=$(SBX_HOST=unix:$sock PYTHON=/usr/bin/python3 timeout 1800 "$here/../../../examples/run_all.sh" "$w/examples-out" 2>&1)
ex_status=$?
printf '%s\n' "$ex_out" | grep -E '^(ok|FAIL): example' || true
printf '%s\n' "$ex_out" | tail -n 30 | sed 's/^/examples: /'
check "examples: all three against real sandboxes" 0 "$ex_status"
check "examples: none of their sandboxes left" "" \
  "$(sbxc ls --json 2>/dev/null | /usr/bin/python3 -c 'import json,sys; print(" ".join(s["id"] for s in json.load(sys.stdin)["sandboxes"]))')"
echo "SBXD-TIME: examples $(elapsed "$t") s"
