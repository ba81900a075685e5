#!/usr/bin/env bash
# Guest test: the slim image (images/build rootfs-slim, Debian 12 + systemd +
# sbx-agent) boots under sbx-vmm and, in the same harness run, under QEMU
# -M microvm. A copy of the image gets a test-only unit (debugfs) that, once
# multi-user.target is reached, reports the boot's state on the console and
# powers off (sbx-vmm: pvpanic) or reboots (QEMU, no PCI); /etc/sandboxer/env
# gets SBX_TEST_ENV. Checked for each VMM: the VMM exits 0 after that
# (sbx-vmm: with the reason poweroff, systemd's poweroff), systemd is "running" with no failed unit,
# sbx-agent.service started before basic.target and is still running, it
# announced itself on vsock port 53 with the boot's token, the env file
# reached the agent, units and login shells, the user, sudo, host name,
# mounts, loopback, journal and free space are as documented. Prints the
# times from VMM start to the agent's start, its announcement and the end
# of the boot for both VMMs.
# Usage: rootfs_boot.sh SOURCE_ROOT BUILD_ROOT
set -euo pipefail
src=$1 build=$2
# shellcheck source=SCRIPTDIR/../lib.sh
. "$src/tests/lib.sh"
# shellcheck source=SCRIPTDIR/agent_lib.sh
. "$src/tests/guest/agent_lib.sh"

need_cmd qemu-system-x86_64 "the image boots under QEMU -M microvm too"
agent_prepare rootfs-boot
agent_image rootfs-slim
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')

t=$src/tests/guest/rootfs-test
echo "SBX_TEST_ENV=from-the-env-file" >"$work/env"
cat >"$work/debugfs" <<DEBUGFS
write $t/sbx-test-report.service /etc/systemd/system/sbx-test-report.service
symlink /etc/systemd/system/multi-user.target.wants/sbx-test-report.service /etc/systemd/system/sbx-test-report.service
write $t/sbx-test-report /usr/local/sbin/sbx-test-report
rm /etc/sandboxer/env
write $work/env /etc/sandboxer/env
DEBUGFS

if [ "$agent_kind" = real ]; then
  # The host talks to the agent (hello, health, exec); the test unit waits
  # for that exec before it reboots the VM.
  agent_run --kind rootfs --memory 512 --debugfs "$work/debugfs" --hello "$token" \
    --cmdline-extra "sbx.token=$token sbx.test.wait-exec"
else
  agent_run --kind rootfs --memory 512 --debugfs "$work/debugfs" --cmdline-extra "sbx.token=$token"
fi
expect_lacks "$log" "HOST-ERROR" "no host-side error"

for vmm in sbx qemu; do
  expect_in "$vmm" "HOST-VMM-EXIT: 0 " "the VMM exited 0 after the guest's systemctl poweroff or reboot"
  if [ "$vmm" = sbx ]; then
    expect_in sbx "SBX-ROOTFS-DONE: powering off" "the guest powers off through pvpanic"
    expect_in sbx "exit: poweroff" "systemd's poweroff ends sbx-vmm with the reason poweroff"
  fi
  expect_in "$vmm" "SBX-ROOTFS-STATE: running" "systemd finished booting, no unit failed"
  expect_not_in "$vmm" "SBX-ROOTFS-FAILED-UNIT" "no failed unit listed"
  expect_in "$vmm" "SBX-ROOTFS-TARGET: multi-user.target active" "multi-user.target reached"
  expect_in "$vmm" "SBX-ROOTFS-AGENT: ActiveState=active SubState=running NRestarts=0" \
    "sbx-agent.service is running and was never restarted"
  times=$(line_of "$vmm" SBX-ROOTFS-TIMES)
  agent_us=$(sed -n 's/.* agent=\([0-9]*\).*/\1/p' <<<"$times")
  basic_us=$(sed -n 's/.* basic=\([0-9]*\).*/\1/p' <<<"$times")
  if ! { [ -n "$agent_us" ] && [ -n "$basic_us" ] && [ "$agent_us" -gt 0 ] && [ "$agent_us" -lt "$basic_us" ]; }; then
    fail "sbx-agent.service did not start before basic.target ($vmm): $times"
  fi
  pass "sbx-agent.service started before basic.target ($vmm: agent at $((agent_us / 1000)) ms, basic.target at $((basic_us / 1000)) ms of guest uptime)"
  if [ "$agent_kind" = fake ]; then
    expect_in "$vmm" "HOST-ANNOUNCE: 'SBX-FAKE-AGENT-READY token=$token'" "the agent announced itself on port 53 with the boot's token"
    start=$(line_of "$vmm" SBX-FAKE-AGENT-START)
    expect_contains "$start" "ppid=1 " "the agent is started by systemd ($vmm)"
    expect_contains "$start" "token=$token " "the agent reads sbx.token= ($vmm)"
    expect_contains "$start" "stdout=socket" "the agent's output goes to the journal ($vmm)"
    expect_not_in "$vmm" "SBX-FAKE-AGENT-CRASH" "the agent ran once"
  else
    expect_in "$vmm" "HOST-ANNOUNCE: " "the agent announced itself on port 53"
    expect_in "$vmm" '"type":"ready"' "the announcement is the agent's ready message"
    expect_contains "$(line_of "$vmm" HOST-HELLO)" '"type":"hello"' "the agent accepts a hello with the boot's token ($vmm)"
    expect_contains "$(line_of "$vmm" HOST-HEALTH)" '"authenticated":true' "the agent read sbx.token= (health says authenticated) ($vmm)"
    expect_in "$vmm" "HOST-EXEC-OUT: SBX_TEST_ENV=from-the-env-file uid=1000 home=/home/user" \
      "a command run by the agent as user sees the env file"
    expect_in "$vmm" 'HOST-EXEC-END: {"code": 0,' "that command (with sudo) succeeded"
    expect_in "$vmm" "SBX-ROOTFS-EXEC-DONE: yes" "the guest saw the command's file"
  fi
  expect_in "$vmm" "SBX-ROOTFS-AGENT-ENV: SBX_TEST_ENV=from-the-env-file" "the env file reaches the agent"
  expect_in "$vmm" "SBX-ROOTFS-UNIT-ENV: SBX_TEST_ENV=from-the-env-file" "the env file reaches units with EnvironmentFile="
  expect_in "$vmm" "SBX-ROOTFS-LOGIN-ENV: SBX_TEST_ENV=from-the-env-file" "the env file reaches login shells"
  expect_in "$vmm" "SBX-ROOTFS-USER: uid=1000(user) gid=1000(user) groups=1000(user),27(sudo)" "user 1000 exists, in group sudo"
  expect_in "$vmm" "SBX-ROOTFS-USER-ENTRY: user:x:1000:1000:Sandbox user:/home/user:/bin/bash" "its home is /home/user, its shell bash"
  expect_in "$vmm" "SBX-ROOTFS-SUDO: 0" "user runs sudo without a password"
  expect_in "$vmm" "SBX-ROOTFS-HOSTNAME: sandbox" "the host name is sandbox"
  mnt=$(line_of "$vmm" SBX-ROOTFS-ROOT-MOUNT)
  expect_contains "$mnt" "/dev/vda ext4 rw," "/ is /dev/vda, ext4, read-write ($vmm)"
  expect_contains "$mnt" "discard" "/ has the fstab options ($vmm)"
  expect_in "$vmm" "SBX-ROOTFS-LO: lo UNKNOWN 127.0.0.1/8 ::1/128" "loopback is up"
  grep -qE 'SBX-ROOTFS-MACHINE-ID: [0-9a-f]{32}$' "$work/$vmm.log" || fail "no machine-id generated at boot ($vmm)"
  pass "a machine-id was generated at boot ($vmm)"
  expect_in "$vmm" "SBX-ROOTFS-JOURNAL: run=1 var=0" "the journal is in memory only"
  expect_in "$vmm" "SBX-ROOTFS-LOGIND: inactive" "systemd-logind is masked"
  expect_in "$vmm" "SBX-ROOTFS-GETTYS: 0" "no getty runs"
  expect_in "$vmm" "SBX-ROOTFS-FALLOCATE: 2 x 200 MiB ok" "two 200 MiB files fit"
  expect_in "$vmm" "SBX-ROOTFS-TOOLS: Python 3" "python3, git, curl, sudo run"
done

# Both VMMs booted a fresh copy of the same image: their machine-ids differ.
[ "$(line_of sbx SBX-ROOTFS-MACHINE-ID)" != "$(line_of qemu SBX-ROOTFS-MACHINE-ID)" ] ||
  fail "both boots have the same machine-id"
pass "each boot makes its own machine-id"

echo "timings (seconds from VMM start; agent-start = the agent's first line, announce = its connection to port 53, report = boot finished):"
agent_timings
for vmm in sbx qemu; do
  echo "$vmm guest: $(line_of "$vmm" SBX-ROOTFS-ANALYZE)"
  echo "$vmm guest: $(line_of "$vmm" SBX-ROOTFS-TIMES) (us since kernel start)"
done
