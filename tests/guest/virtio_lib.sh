# shellcheck shell=bash disable=SC2154 # src, build, log: set by the test and tests/lib.sh
# Shared steps of the virtio device tests (tests/guest/virtio_*.sh), sourced
# after tests/lib.sh with $src (source root) and $build (build root) set.
# Each test: virtio_prepare, make its inputs in $work, virtio_initrd,
# virtio_run, then
# expect_* on $log: the guest's SBX-* marker lines and the host side's HOST-*
# lines (tests/guest/vmrun.py), both in one log.

# Some tools (mkfs.ext4, debugfs) live in sbin, not on every user's PATH.
PATH=$PATH:/usr/sbin:/sbin

# virtio_prepare NAME sbx|qemu : skips the test (exit 77) if it cannot run
# here (no harness, no QEMU for the qemu variant, no gcc for the tools);
# sets $kernel, $tools (the static guest tools) and $work (a fresh directory
# in the build tree: level 1 sees the project tree, not the host's /tmp;
# removed at exit unless the test failed or SBX_TEST_KEEP=1).
virtio_prepare() {
  need_harness
  [ -x /usr/bin/python3 ] || skip "no /usr/bin/python3 (vmrun.py runs with it)"
  need_cmd gcc "tools/build compiles the static guest tools"
  [ "$2" = qemu ] && need_cmd qemu-system-x86_64 "the QEMU -M microvm reference"
  kernel=$("$src/images/build" vmlinux)
  tools=$("$src/tests/guest/tools/build")
  work=$(mktemp -d "$build/$1.XXXXXX")
  trap 'virtio_cleanup $?' EXIT
}

# virtio_initrd PAYLOAD [SRC[:DEST]]... : sets $initrd, the base initramfs +
# tests/guest/payload/PAYLOAD as /sbx-run + the static tools + the SRCs.
virtio_initrd() {
  local payload=$1
  shift
  initrd=$work/initrd.cpio.gz
  "$src/tests/guest/make-initrd" "$("$src/images/build" initramfs)" \
    "$src/tests/guest/payload/$payload" "$initrd" "$tools/sbx-vsock" "$tools/sbx-blkbench" "$@"
}

# SBX_TEST_KEEP=1 keeps $work (images, initrd, the log in $work/out) even
# after a pass.
virtio_cleanup() {
  if [ "$1" -eq 0 ] && [ "${SBX_TEST_KEEP:-0}" != 1 ]; then
    rm -rf "$work"
  else
    echo "kept $work (log: $work/out)" >&2
  fi
}

# virtio_run sbx|qemu [vmrun.py ARGS]... : boots the guest under that VMM
# through tests/nested with the host side of vmrun.py; sets $status, $log.
virtio_run() {
  local vmm=$1
  shift
  local vmm_args=(--vmm "$vmm")
  [ "$vmm" = sbx ] && vmm_args+=(--sbx-vmm "$build/host-tools/sbx-vmm/sbx-vmm")
  # /usr/bin/python3 directly: a pyenv shim costs seconds under the harness.
  # A guest that triple-faults leaves its memory in $work (run_nested, fail).
  run_nested "$work/out" --timeout 900 -- /usr/bin/env SBX_VMM_CRASH_DUMP_DIR="$work" \
    /usr/bin/python3 "$src/tests/guest/vmrun.py" \
    "${vmm_args[@]}" --kernel "$kernel" --initrd "$initrd" --tools "$tools" --timeout 700 "$@"
}

# expect_lacks HAYSTACK NEEDLE WHAT
expect_lacks() {
  case "$1" in
    *"$2"*) printf '%s\n' "$1" | grep -F -- "$2" >&2; fail "$3: output has '$2'" ;;
    *) pass "$3" ;;
  esac
}

# virtio_expect_clean_run WHAT : the VMM exited 0 after the guest's reboot,
# /sbx-run reported no failed step and the host side no error.
virtio_expect_clean_run() {
  expect_status 0 "$1: the VMM exited 0 after the guest rebooted"
  expect_contains "$log" "SBX-RUN-EXIT: 0" "$1: every guest-side step passed"
  expect_lacks "$log" "HOST-ERROR" "$1: no host-side error"
}
