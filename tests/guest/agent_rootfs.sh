#!/usr/bin/env bash
# Guest test: the agent end to end through sbx-agentctl on an image booted
# by sbx-vmm (level-1 side: agent_session.sh, one ok:/FAIL: line per check).
#   rootfs (the slim image, images/build rootfs-slim): python3 exec, failing command's status and
#     stderr, 128+signal, 200 MiB put/get with sha256 on both ends, detached
#     process attached / disconnected / reattached from the printed offset,
#     a guest http.server reached through `sbx-agentctl forward`,
#     /etc/sandboxer/env seen by a later exec, a wrong token refused,
#     `systemctl reboot` ends sbx-vmm with status 0.
#   minimal (busybox + agent initramfs): exec, failing command, 16 MiB
#     round trip, wrong token, `reboot` ends sbx-vmm with 0.
# The guest is restored from a fixture snapshotted at agent-ready (built and
# cached on first use; SBX_TEST_FIXTURES=0 boots it instead).
# Usage: agent_rootfs.sh SOURCE_ROOT BUILD_ROOT [rootfs|minimal]
set -euo pipefail
src=$1 build=$2 kind=${3:-rootfs}
# shellcheck source=SCRIPTDIR/../lib.sh
. "$src/tests/lib.sh"
# shellcheck source=SCRIPTDIR/agent_lib.sh
. "$src/tests/guest/agent_lib.sh"

[ "$kind" = rootfs ] && need_cmd curl "the port-forwarding check fetches through it"
SBX_TEST_AGENT=real agent_prepare "agent-$kind"
ctl=$build/host-tools/sbx-agentctl
[ -x "$ctl" ] || fail "no $ctl (build it first)"
if [ "$kind" = rootfs ]; then agent_image rootfs-slim; else agent_image "$kind"; fi
# The agent is the subject, not the boot: start from a guest snapshotted at
# agent-ready (tests/guest/fixture_lib.sh; SBX_TEST_FIXTURES=0 boots instead).
fixture_args=()
if [ "${SBX_TEST_FIXTURES:-1}" != 0 ]; then
  # shellcheck source=SCRIPTDIR/fixture_lib.sh
  . "$src/tests/guest/fixture_lib.sh"
  if [ "$kind" = rootfs ]; then fixture_prepare "agent-$kind" 1024 disk; else fixture_prepare "agent-$kind" 512; fi
  fixture_args=("$fixture_dir" "$fixture_new")
fi
run_nested "$work/out" --timeout 1700 -- /bin/bash "$src/tests/guest/agent_session.sh" \
  "$kind" "$kernel" "$image" "$build/host-tools/sbx-vmm/sbx-vmm" "$ctl" "$work" "${fixture_args[@]}"
printf '%s\n' "$log" | grep -E '^(ok|FAIL): |^AGENT-|^FIXTURE|^fixture|^copied' || true
[ "$status" -eq 0 ] && [ ${#fixture_args[@]} -gt 0 ] && fixture_publish
if [ "$status" -ne 0 ]; then
  printf '%s\n' "$log" | tail -n 30 >&2
  echo "console tail:" >&2
  tail -n 30 "$work/$kind-console.log" >&2 || true
  fail "agent-$kind: status $status ($(printf '%s\n' "$log" | grep -c '^FAIL: ') failed checks)"
fi
expect_contains "$log" "AGENT-SESSION-FAILURES: $kind 0" "agent-$kind: every check passed"
