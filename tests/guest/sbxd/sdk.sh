# sbxd part "sdk" (sourced by session.sh, sbxd running): both SDKs against
# the real sbxd and real VMs, every method once (sdk/python/tests/
# live_test.py with unittest, sdk/typescript/test/live.test.mjs with node
# --test): create, a retried create with the same idempotency key giving
# one sandbox, exec (whole and streamed), files and trees, a detached
# counter and its output from offsets, stop with memory, resume with the
# counter going on, fork, a named snapshot, a hosted port, find by labels,
# typed errors, the delete-on-exit helpers. Each deletes what it made.
# tests/guest/sbxd.sh builds the TypeScript SDK's dist/ at level 0 (npm).
# shellcheck shell=bash
# session.sh and lib.sh set w, sock, here:
# shellcheck disable=SC2154

sdk_root=$here/../../../sdk
t=$(now)
sdk_out=$(cd "$sdk_root/python" && SBX_HOST=unix:$sock PYTHONDONTWRITEBYTECODE=1 \
  timeout 1800 /usr/bin/python3 -m unittest -v tests/live_test.py 2>&1)
sdk_status=$?
printf '%s\n' "$sdk_out" | tail -n 40 | sed 's/^/sdk python: /'
check "sdk: the Python SDK's live test" 0 "$sdk_status"
# unittest passes when everything skipped: it must have run, none skipped.
check "sdk: python: every live test ran" "ran, none skipped" \
  "$(printf '%s\n' "$sdk_out" | grep -qE '^Ran [1-9][0-9]* tests?' && ! printf '%s\n' "$sdk_out" | grep -q 'skipped' &&
     echo 'ran, none skipped')"
echo "SBXD-TIME: sdk python $(elapsed "$t") s"

t=$(now)
if [ ! -f "$sdk_root/typescript/dist/index.js" ] || [ ! -x /usr/bin/node ]; then
  bad "sdk: no sdk/typescript/dist or no node (tests/guest/sbxd.sh builds it at level 0)"
else
  sdk_out=$(cd "$sdk_root/typescript" && SBX_HOST=unix:$sock \
    timeout 1800 /usr/bin/node --test --test-reporter=spec test/live.test.mjs 2>&1)
  sdk_status=$?
  printf '%s\n' "$sdk_out" | tail -n 40 | sed 's/^/sdk typescript: /'
  check "sdk: the TypeScript SDK's live test" 0 "$sdk_status"
  check "sdk: typescript: every live test ran" "ran, none skipped" \
    "$(printf '%s\n' "$sdk_out" | grep -qE '^ℹ pass [1-9]' && printf '%s\n' "$sdk_out" | grep -qE '^ℹ skipped 0$' &&
       echo 'ran, none skipped')"
fi
echo "SBXD-TIME: sdk typescript $(elapsed "$t") s"
