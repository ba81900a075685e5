#!/usr/bin/env bash
# Guest test: the minimal image (images/build minimal: the busybox
# initramfs + sbx-agent) under sbx-vmm and, in the same harness run, QEMU
# -M microvm. With the placeholder agent (tests/guest/fake-agent), whose
# first run exits with status 3 (sbx.test.crash-once) and whose second run
# announces itself and then runs `reboot` (sbx.test.agent-reboot): /init
# brings up lo and sets the host name, still runs an /sbx-run hook, starts
# the agent with /etc/sandboxer/env exported, restarts it after the crash,
# and on the reboot request stops it (SIGTERM) and reboots: the VMM exits 0.
# When the real agent has been built (build/guest-agent/sbx-agent), it
# boots a second image with it and checks its ready message on port 53
# (then the host stops the VM). Prints the times from VMM start to the
# agent's start and announcement.
# Usage: minimal_boot.sh SOURCE_ROOT BUILD_ROOT
set -euo pipefail
src=$1 build=$2
# shellcheck source=SCRIPTDIR/../lib.sh
. "$src/tests/lib.sh"
# shellcheck source=SCRIPTDIR/agent_lib.sh
. "$src/tests/guest/agent_lib.sh"

need_cmd qemu-system-x86_64 "the image boots under QEMU -M microvm too"
agent_prepare minimal-boot
real_agent=
if [ "$agent_kind" = real ]; then
  real_agent=$agent
  agent=$("$src/tests/guest/fake-agent/build")
  agent_kind=fake
fi
agent_image minimal
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')

# The test's additions, appended as another cpio archive: the env file and
# an /sbx-run hook.
echo "SBX_TEST_ENV=from-the-env-file" >"$work/env"
cat >"$work/hook" <<'HOOK'
#!/bin/sh
echo "SBX-HOOK: hostname=$(hostname) lo=$(cat /sys/class/net/lo/operstate) flags=$(cat /sys/class/net/lo/flags)"
HOOK
"$src/tests/guest/make-initrd" "$image" "$work/hook" "$work/minimal-test.cpio.gz" "$work/env:/etc/sandboxer/env"
image=$work/minimal-test.cpio.gz

agent_run --kind minimal --memory 256 --cmdline-extra "sbx.token=$token sbx.test.crash-once sbx.test.agent-reboot"
expect_lacks "$log" "HOST-ERROR" "no host-side error"
for vmm in sbx qemu; do
  expect_in "$vmm" "HOST-VMM-EXIT: 0 " "the VMM exited 0 after the agent's reboot"
  expect_in "$vmm" "SBX-BOOTED" "/init ran"
  # 0x9 = IFF_UP | IFF_LOOPBACK
  expect_in "$vmm" "SBX-HOOK: hostname=sandbox lo=unknown flags=0x9" "lo is up and the host name set before the hook runs"
  expect_in "$vmm" "SBX-RUN-EXIT: 0" "the /sbx-run hook still runs in agent mode"
  expect_in "$vmm" "SBX-AGENT-START: /usr/local/bin/sbx-agent" "/init starts the agent"
  expect_in "$vmm" "SBX-FAKE-AGENT-CRASH: first run of this boot exits with status 3" "the agent's first run crashed"
  expect_in "$vmm" "SBX-AGENT-EXIT: status 3, restarting" "/init saw the crash and restarts the agent"
  [ "$(grep -c 'SBX-FAKE-AGENT-START:' "$work/$vmm.log")" -eq 2 ] || fail "the agent did not run exactly twice ($vmm)"
  pass "the agent ran exactly twice ($vmm)"
  second=$(grep 'SBX-FAKE-AGENT-START:' "$work/$vmm.log" | tail -n1)
  expect_contains "$second" "ppid=1 " "the agent's parent is /init ($vmm)"
  expect_contains "$second" "token=$token " "the agent reads sbx.token= ($vmm)"
  expect_contains "$second" "env=from-the-env-file " "/etc/sandboxer/env reaches the agent ($vmm)"
  expect_in "$vmm" "HOST-ANNOUNCE: 'SBX-FAKE-AGENT-READY token=$token'" "the agent announced itself on port 53"
  expect_in "$vmm" "SBX-AGENT-STOP: reboot requested" "/init took the agent's reboot request"
  expect_in "$vmm" "SBX-FAKE-AGENT-STOP: SIGTERM" "/init stopped the agent with SIGTERM"
  expect_in "$vmm" "SBX-HALT: reboot" "/init rebooted"
done
echo "timings, placeholder agent (seconds from VMM start; agent-start = /init starts the agent, announce = its connection to port 53):"
agent_timings

if [ -n "$real_agent" ]; then
  echo "agent: real ($real_agent)"
  agent=$real_agent
  agent_image minimal
  # Keep the placeholder's logs; the real agent's go to out, sbx.log, qemu.log.
  for f in out sbx.log qemu.log; do mv "$work/$f" "$work/fake-$f"; done
  "$src/tests/guest/make-initrd" "$image" "$work/hook" "$work/minimal-test.cpio.gz" "$work/env:/etc/sandboxer/env"
  image=$work/minimal-test.cpio.gz
  agent_run --kind minimal --memory 256 --cmdline-extra "sbx.token=$token" \
    --hello "$token" --exec-user root --stop-after-announce 1
  expect_lacks "$log" "HOST-ERROR" "no host-side error (real agent)"
  for vmm in sbx qemu; do
    expect_in "$vmm" "SBX-AGENT-START: /usr/local/bin/sbx-agent" "/init starts the real agent"
    expect_in "$vmm" '"type":"ready"' "the real agent announced itself on port 53"
    expect_contains "$(line_of "$vmm" HOST-HELLO)" '"type":"hello"' "the agent accepts a hello with the boot's token ($vmm)"
    expect_contains "$(line_of "$vmm" HOST-HEALTH)" '"authenticated":true' "the agent read sbx.token= (health says authenticated) ($vmm)"
    expect_in "$vmm" "HOST-EXEC-OUT: SBX_TEST_ENV=from-the-env-file uid=0 home=/root" \
      "a command run by the agent sees the env file"
    expect_in "$vmm" 'HOST-EXEC-END: {"code": 0,' "that command succeeded"
    expect_not_in "$vmm" "SBX-AGENT-EXIT:" "the real agent keeps running"
  done
  echo "timings, real agent:"
  agent_timings
fi
