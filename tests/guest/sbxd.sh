#!/usr/bin/env bash
# Guest test: sbxd end to end on the default image, in one level-1 boot
# (level-1 side: sbxd/session.sh and its parts, sbxd/*.sh): create, exec,
# stop with memory, resume with the same processes, fork, a kill -9 of sbxd
# and the restart that adopts the VMMs, delete — driven only over sbxd's
# Unix socket with curl and sbx.
# Usage: sbxd.sh SOURCE_ROOT BUILD_ROOT   (SBXD_PARTS="a b": only those parts)
set -euo pipefail
src=$1 build=$2
# shellcheck source=SCRIPTDIR/../lib.sh
. "$src/tests/lib.sh"
# shellcheck source=SCRIPTDIR/agent_lib.sh
. "$src/tests/guest/agent_lib.sh"

need_cmd curl "the test talks to sbxd through it"
SBX_TEST_AGENT=real agent_prepare "sbxd-lifecycle"
ctl=$build/host-tools/sbx-agentctl
for f in "$ctl" "$build/host-tools/sbxd/sbxd" "$build/host-tools/sbx/sbx" "$build/host-tools/sbx-vmm/sbx-vmm"; do
  [ -x "$f" ] || fail "no $f (build it first)"
done
agent_image rootfs
# The abuse part's hostile guest (tests/guest/tools/sbx-hostile.c), copied
# where level 1 finds it: the test's folder.
case " ${SBXD_PARTS:-abuse} " in *" abuse "*)
  need_cmd gcc "tools/build compiles the static guest tools"
  cp "$("$src/tests/guest/tools/build")/sbx-hostile" "$work/" ;;
esac
# The browser part's playwright-core and the mcp part's MCP SDK, from the
# npm registry, which only level 0 reaches: installed here, before level 1,
# and again only when package-lock.json changed. Without them the part
# fails and says so.
case " ${SBXD_PARTS:-browser} " in *" browser "*)
  "$src/tests/npm-ci" "$src/tests/browser" || echo "sbxd-lifecycle: the browser part will fail" >&2 ;;
esac
case " ${SBXD_PARTS:-mcp} " in *" mcp "*)
  "$src/tests/npm-ci" "$src/tests/mcp" || echo "sbxd-lifecycle: the mcp part will fail" >&2 ;;
esac
case " ${SBXD_PARTS:-examples} " in *" examples "*)
  "$src/tests/npm-ci" "$src/examples/ai-sdk-tool" || echo "sbxd-lifecycle: the examples part will fail" >&2 ;;
esac
case " ${SBXD_PARTS:-sdk} ${SBXD_PARTS:-examples} " in *" sdk "* | *" examples "*)
  { "$src/tests/npm-ci" "$src/sdk/typescript" &&
    (cd "$src/sdk/typescript" && ./node_modules/.bin/tsc -p tsconfig.json); } ||
    echo "sbxd-lifecycle: the TypeScript SDK is not built: the sdk and examples parts will fail" >&2 ;;
esac
run_nested "$work/out" --cpus 2 --timeout 3000 -- /bin/bash "$src/tests/guest/sbxd/session.sh" \
  "$kernel" "$image" "$build/host-tools/sbxd/sbxd" "$build/host-tools/sbx-vmm/sbx-vmm" "$ctl" \
  "$build/host-tools/sbx/sbx" "$work" \
  ${SBXD_PARTS:-}
printf '%s\n' "$log" | grep -E '^(ok|FAIL): |^SBXD' || true
if [ "$status" -ne 0 ]; then
  printf '%s\n' "$log" | tail -n 30 >&2
  for f in "$work"/sbxd.*.log; do echo "== $f" >&2; tail -n 20 "$f" >&2 || true; done
  fail "sbxd-lifecycle: status $status"
fi
expect_contains "$log" "SBXD-SESSION-FAILURES: 0" "sbxd-lifecycle: every check passed"
