# shellcheck shell=bash disable=SC2154 # src, build, log: set by the test and tests/lib.sh
# Shared steps of the guest-image tests (rootfs_boot.sh, minimal_boot.sh),
# sourced after tests/lib.sh with $src and $build set.

PATH=$PATH:/usr/sbin:/sbin

# agent_prepare NAME : sets $kernel, $agent, $agent_kind (real|fake) and
# $work (a fresh directory in the build tree, removed at exit unless the
# test failed or SBX_TEST_KEEP=1).
# The agent: the real one ($SBX_AGENT, else build/guest-agent/sbx-agent)
# when it exists, else the placeholder tests/guest/fake-agent.
# SBX_TEST_AGENT=fake or real forces one (real fails if it is missing).
agent_prepare() {
  need_harness
  [ -x /usr/bin/python3 ] || skip "no /usr/bin/python3 (the level-1 side runs with it)"
  kernel=$("$src/images/build" vmlinux)
  local real="${SBX_AGENT:-$build/guest-agent/sbx-agent}"
  case "${SBX_TEST_AGENT:-auto}" in
    fake) agent_kind=fake ;;
    real) [ -x "$real" ] || fail "SBX_TEST_AGENT=real but $real does not exist"; agent_kind=real ;;
    auto) if [ -x "$real" ]; then agent_kind=real; else agent_kind=fake; fi ;;
    *) fail "SBX_TEST_AGENT must be auto, fake or real" ;;
  esac
  if [ "$agent_kind" = real ]; then
    agent=$real
  else
    agent=$("$src/tests/guest/fake-agent/build")
  fi
  echo "agent: $agent_kind ($agent)"
  work=$(mktemp -d "$build/$1.XXXXXX")
  trap 'agent_cleanup $?' EXIT
}

agent_cleanup() {
  if [ "$1" -eq 0 ] && [ "${SBX_TEST_KEEP:-0}" != 1 ]; then
    rm -rf "$work"
  else
    echo "kept $work (logs: $work/out, $work/sbx.log, $work/qemu.log)" >&2
  fi
}

# agent_image TARGET : builds (or takes from the cache) images/build TARGET
# (rootfs-slim or minimal: never the default image, rootfs, whose cold
# build takes minutes and a gigabyte of downloads) with $agent and sets
# $image; prints how long that took. A root disk is then packed into
# $work/rootfs.tar (tar -S keeps only its ~250 MiB of
# data; level 1 reads that over 9p instead of the 2 GiB sparse file) and
# $image names the tar ($agent_image_path keeps the cache entry's path).
agent_image() {
  local t0=$SECONDS
  image=$(SBX_AGENT=$agent "$src/images/build" "$1") || fail "images/build $1 failed"
  echo "image: $image ($((SECONDS - t0)) s)"
  agent_image_path=$image
  if [ "$1" = rootfs-slim ]; then
    tar -C "$(dirname "$image")" -S -cf "$work/rootfs.tar" "$(basename "$image")"
    image=$work/rootfs.tar
  fi
}

# agent_run ARGS... : tests/guest/agent_run.py in level 1 with the kernel,
# image and log directory; sets $status and $log (the combined output).
# Every VMM must have exited 0 (or been stopped by the host): a level-1
# failure or an agent_run.py error fails the test here, before any check
# reads a log that was never written.
agent_run() {
  # A guest that triple-faults leaves its memory in $work (tests/lib.sh
  # run_nested and fail walk its page tables there).
  run_nested "$work/out" --timeout 1700 -- /usr/bin/env SBX_VMM_CRASH_DUMP_DIR="$work" \
    /usr/bin/python3 "$src/tests/guest/agent_run.py" \
    --kernel "$kernel" --image "$image" --sbx-vmm "$build/host-tools/sbx-vmm/sbx-vmm" --logdir "$work" "$@"
  [ "$status" -eq 0 ] || agent_stall_lines
  expect_status 0 "level 1 ran agent_run.py to the end, every VMM exited 0"
}

# agent_stall_lines : what a stalled guest was doing, as "DIAG: " lines
# (tests/run repeats them at the end of its log, the part CI shows): the
# timeout, sbx-vmm's vCPU, LAPIC, serial and IOAPIC state, the guest's own
# view through the agent, and each console's last lines.
agent_stall_lines() {
  printf '%s\n' "$log" |
    grep -E 'HOST-TIMEOUT|HOST-DIAG: DIAG: (VM |vCPU|  lapic|  KVM|ioapic pin 4|serial)|HOST-GUEST-DIAG' |
    sed -n 's/^\[[a-z]*\] //; s/^/DIAG: /; 1,60p'
  local vmm
  for vmm in sbx qemu; do
    [ -f "$work/$vmm.log" ] && tail -n 4 "$work/$vmm.log" | sed "s/^/DIAG: $vmm console: /"
  done
  return 0
}

# expect_in VMM NEEDLE WHAT : the guest log of VMM contains NEEDLE.
expect_in() {
  local text
  text=$(cat "$work/$1.log" 2>/dev/null) || fail "$3 ($1): no log $work/$1.log"
  expect_contains "$text" "$2" "$3 ($1)"
}

# expect_not_in VMM NEEDLE WHAT (a missing log fails: no silent pass)
expect_not_in() {
  [ -f "$work/$1.log" ] || fail "$3 ($1): no log $work/$1.log"
  if grep -F -- "$2" "$work/$1.log" >&2; then
    fail "$3 ($1): the log has '$2'"
  fi
  pass "$3 ($1)"
}

# expect_lacks HAYSTACK NEEDLE WHAT
expect_lacks() {
  case "$1" in
    *"$2"*) printf '%s\n' "$1" | grep -F -- "$2" >&2; fail "$3: output has '$2'" ;;
    *) pass "$3" ;;
  esac
}

# line_of VMM MARKER : the text after the first "MARKER: " line in VMM's log.
line_of() {
  grep -m1 -F -- "$2: " "$work/$1.log" | sed "s/^.*$2: //"
}

# agent_timings : the HOST-TIME lines, as a table.
agent_timings() {
  printf '%s\n' "$log" | grep -E '^(HOST-TIME|HOST-VMM-TIMER|HOST-COPY):' || true
}
