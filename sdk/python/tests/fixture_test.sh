#!/usr/bin/env bash
# The Python SDK (sdk/python) at level 0: installed into a fresh venv the
# way a user installs it (pip, no index, no build isolation: Debian's
# setuptools and wheel), then its unittest suite run against sbxd's real
# server and API over a host sbx-agent (sbxd_guest_fixture: sbx_run runs,
# sbx_off is stopped), on the Unix socket and on TCP with the fixture's
# keys; plus the suite's server-less tests (retries and the desktop's
# requests against a local http.server, tar safety).
# Usage: fixture_test.sh FIXTURE SBX_AGENT SRC
set -euo pipefail
fixture=$(realpath "$1")
agent=$(realpath "$2")
src=$(realpath "$3")
python=/usr/bin/python3
[ -x "$python" ] || { echo "SKIP: no $python"; exit 77; }
"$python" -c 'import venv, ensurepip' 2>/dev/null || { echo "SKIP: $python lacks venv/ensurepip (python3-venv)"; exit 77; }
# shellcheck source=host-tools/sbxd/tests/test_lib.sh
. "$src/host-tools/sbxd/tests/test_lib.sh"
scratch sbx-sdk-python
start_fixture "$fixture" "$agent"

# A copy of the package, so that the build leaves nothing in the source tree.
mkdir "$tmp/src"
cp -r "$src/sdk/python/pyproject.toml" "$src/sdk/python/README.md" "$src/sdk/python/sandboxer" "$tmp/src/"
find "$tmp/src" -name __pycache__ -prune -exec rm -rf {} +
"$python" -m venv --system-site-packages "$tmp/venv"
PIP_DISABLE_PIP_VERSION_CHECK=1 "$tmp/venv/bin/pip" install --quiet --no-index --no-build-isolation "$tmp/src"
rm -rf "$tmp/src"

value() { fixture_value "$1"; }
tcp=$(value tcp)

# From the temp folder, so that `import sandboxer` is the installed package.
cd "$tmp"
"$tmp/venv/bin/python" -c 'import sandboxer, sys; assert sandboxer.__file__.startswith(sys.prefix), sandboxer.__file__'
SANDBOXER_TEST_SOCKET="$tmp/sbxd.sock" SANDBOXER_TEST_TCP="${tcp#tcp:}" SANDBOXER_TEST_DIR="$tmp" \
SANDBOXER_TEST_KEY_HOST=$(value key_host) SANDBOXER_TEST_KEY_SCOPED=$(value key_scoped) \
SANDBOXER_TEST_KEY_READ=$(value key_read) \
    PYTHONDONTWRITEBYTECODE=1 timeout 600 "$tmp/venv/bin/python" -m unittest discover -v -s "$src/sdk/python/tests" -p 'test_*.py'
