#!/usr/bin/env bash
# Runs the three examples in order against the sbxd that SBX_HOST (and
# SBX_API_KEY) name, printing "ok: example NAME" or "FAIL: example NAME"
# for each; exits non-zero if any failed.
# SANDBOXER_EXAMPLE_SANDBOX=<id> (use that existing sandbox instead of
# creating ones) and SANDBOXER_EXAMPLE_USER=<user> (run the code as that
# user) reach the examples as they are. Installs the ai-sdk-tool folder's
# npm packages when its lock changed (tests/npm-ci, needs the network) and
# builds sdk/typescript/dist when it is missing.
# Usage: examples/run_all.sh [OUT_DIR]   (csv-analysis writes its chart there)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(dirname "$here")
out=${1:-$here/csv-analysis/out}
python=${PYTHON:-python3}
export PYTHONDONTWRITEBYTECODE=1  # no __pycache__ in sdk/python

failed=0
result() { # NAME STATUS
    if [ "$2" -eq 0 ]; then echo "ok: example $1"; else echo "FAIL: example $1 (exit $2)"; failed=1; fi
}

# ai-sdk-tool: node, its packages, and the SDK's dist/ it links to.
prepare_node() {
    command -v node >/dev/null && command -v npm >/dev/null || { echo "no node/npm" >&2; return 1; }
    if [ ! -f "$src/sdk/typescript/dist/index.js" ]; then
        "$src/tests/npm-ci" "$src/sdk/typescript"
        (cd "$src/sdk/typescript" && ./node_modules/.bin/tsc -p tsconfig.json)
    fi
    "$src/tests/npm-ci" "$here/ai-sdk-tool"
}
echo "== ai-sdk-tool"
st=0
if prepare_node; then
    (cd "$here/ai-sdk-tool" && node index.mjs) || st=$?
else
    st=$?
fi
result ai-sdk-tool "$st"

echo "== python-agent-tool"
st=0
"$python" "$here/python-agent-tool/agent_tool.py" || st=$?
result python-agent-tool "$st"

echo "== csv-analysis"
st=0
"$python" "$here/csv-analysis/analyze.py" "$out" || st=$?
result csv-analysis "$st"

exit "$failed"
