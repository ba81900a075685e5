#!/usr/bin/env bash
# Guest test: sbxd end to end on the default image, in one level-1 boot
# (level-1 side: sbxd/session.sh and its parts, sbxd/*.sh): create, exec,
# stop with memory, resume with the same processes, fork, a kill -9 of sbxd
# and the restart that adopts the VMMs, delete — driven only over sbxd's
# Unix socket with curl and sbx.
# Usage: sbxd.sh SOURCE_ROOT BUILD_ROOT GROUP   (the parts of GROUP in
# sbxd/groups; SBXD_PARTS="a b": only those parts, whatever the group)
set -euo pipefail
src=$1 build=$2 group=$3
# shellcheck source=SCRIPTDIR/../lib.sh
. "$src/tests/lib.sh"
# shellcheck source=SCRIPTDIR/agent_lib.sh
. "$src/tests/guest/agent_lib.sh"

need_cmd curl "the test talks to sbxd through it"
# The group's parts; a part in no group, or in two, is a mistake of the
# tree, not something to skip.
group_parts() { sed -n "s/^$1: //p" "$src/tests/guest/sbxd/groups"; }
for f in "$src"/tests/guest/sbxd/*.sh; do
  p=$(basename "$f" .sh)
  case $p in lib | session) continue ;; esac
  n=$(grep -v '^#' "$src/tests/guest/sbxd/groups" | tr ' ' '\n' | grep -cx "$p") || true
  [ "$n" -eq 1 ] || fail "tests/guest/sbxd/groups: part $p is in $n groups, not one"
done
parts=${SBXD_PARTS:-$(group_parts "$group")}
[ -n "$parts" ] || fail "no group $group in tests/guest/sbxd/groups"
echo "sbxd-$group: parts $parts"
SBX_TEST_AGENT=real agent_prepare "sbxd-$group"
ctl=$build/host-tools/sbx-agentctl
for f in "$ctl" "$build/host-tools/sbxd/sbxd" "$build/host-tools/sbx/sbx" "$build/host-tools/sbx-vmm/sbx-vmm"; do
  [ -x "$f" ] || fail "no $f (build it first)"
done
agent_image rootfs-slim
# The full_image and desktop parts' image: the default one (images/build rootfs, with
# this build's agent), 3.6 GiB of data in a 6 GiB sparse file. Level 1
# reads it in place from the artifact cache it mounts over 9p (read-only,
# tests/nested), never a copy: sbxd's sandboxes put a qcow2 overlay on it,
# so only the blocks a guest reads cross 9p. A cold cache builds its base
# first (apt: about 25 minutes here, network).
case " $parts " in *" full_image "* | *" desktop "*)
  t0=$SECONDS
  SBX_SBXD_FULL_IMAGE=$(SBX_AGENT=$agent "$src/images/build" rootfs) || fail "images/build rootfs failed"
  export SBX_SBXD_FULL_IMAGE
  echo "full image: $SBX_SBXD_FULL_IMAGE ($((SECONDS - t0)) s)"
  need_cmd gcc "tools/build compiles the static guest tools"
  cp "$("$src/tests/guest/tools/build")/sbx-web" "$work/" ;;
esac
# The abuse part's hostile guest (tests/guest/tools/sbx-hostile.c), copied
# where level 1 finds it: the test's folder.
case " $parts " in *" abuse "*)
  need_cmd gcc "tools/build compiles the static guest tools"
  cp "$("$src/tests/guest/tools/build")/sbx-hostile" "$work/" ;;
esac
# The browser and desktop parts' playwright-core and the mcp part's MCP SDK, from the
# npm registry, which only level 0 reaches: installed here, before level 1,
# and again only when package-lock.json changed. Without them the part
# fails and says so.
case " $parts " in *" browser "* | *" desktop "*)
  "$src/tests/npm-ci" "$src/tests/browser" || echo "sbxd-$group: the browser and desktop parts will fail" >&2 ;;
esac
case " $parts " in *" mcp "*)
  "$src/tests/npm-ci" "$src/tests/mcp" || echo "sbxd-$group: the mcp part will fail" >&2 ;;
esac
case " $parts " in *" examples "*)
  "$src/tests/npm-ci" "$src/examples/ai-sdk-tool" || echo "sbxd-$group: the examples part will fail" >&2 ;;
esac
case " $parts " in *" sdk "* | *" examples "*)
  { "$src/tests/npm-ci" "$src/sdk/typescript" &&
    (cd "$src/sdk/typescript" && ./node_modules/.bin/tsc -p tsconfig.json); } ||
    echo "sbxd-$group: the TypeScript SDK is not built: the sdk and examples parts will fail" >&2 ;;
esac
# SBXD_LEVEL1_TIMEOUT: level 1's bound in seconds (scripts/soak-sbxd
# raises it with the kills it asks for; meson's own timeout must be above).
# SBXD_LEVEL1_CPUS: level 1's CPUs (default 2). With 1 (every sandbox
# here has one vCPU) a process starts about three times faster, but two
# such groups side by side on a 2-core host end no sooner than two-CPU
# ones one at a time, and a one-CPU level 1 needs tests/nested's periodic
# tick against a lost interrupt (tests/harness/README.md, "One level-1
# CPU"; not yet soaked).
# SBXD_LEVEL1_MEM: level 1's memory in MiB (default 4096; the full group's
# sandbox has 1.5 GiB and its stop writes that much to level 1's tmpfs).
mem=${SBXD_LEVEL1_MEM:-4096}
[ "$group" != full ] || mem=${SBXD_LEVEL1_MEM:-6144}
t_level1=$SECONDS
run_nested "$work/out" --cpus "${SBXD_LEVEL1_CPUS:-2}" --mem "$mem" --timeout "${SBXD_LEVEL1_TIMEOUT:-3300}" -- /bin/bash "$src/tests/guest/sbxd/session.sh" \
  "$kernel" "$image" "$build/host-tools/sbxd/sbxd" "$build/host-tools/sbx-vmm/sbx-vmm" "$ctl" \
  "$build/host-tools/sbx/sbx" "$work" \
  $parts
printf '%s\n' "$log" | grep -E '^(ok|FAIL): |^SBXD|^wait: gave up' || true
echo "SBXD-TIME: level 1 (boot, session, power-off; retries too) $((SECONDS - t_level1)) s; the test so far $SECONDS s"
if [ "$status" -ne 0 ]; then
  printf '%s\n' "$log" | tail -n 30 >&2
  for f in "$work"/sbxd.*.log; do echo "== $f" >&2; tail -n 20 "$f" >&2 || true; done
  fail "sbxd-$group: status $status"
fi
expect_contains "$log" "SBXD-SESSION-FAILURES: 0" "sbxd-$group: every check passed"
