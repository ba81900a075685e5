#!/usr/bin/env bash
# Bad input gets one clear error line and a non-zero exit, never a crash.
# Needs no guest: every case is refused before a vCPU runs.
# Usage: bad_input.sh SOURCE_ROOT BUILD_ROOT CASE
set -euo pipefail
src=$1 build=$2 case=$3
. "$src/tests/lib.sh"
vmm="$build/host-tools/sbx-vmm/sbx-vmm"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

real_kernel() { "$src/images/build" kernel; }
real_initrd() { "$src/images/build" initramfs; }

# expect_refusal EXPECTED_TEXT ARGS... : sbx-vmm must exit 1 (configuration
# error, not a signal or crash) and say EXPECTED_TEXT on stderr.
expect_refusal() {
  local want=$1; shift
  set +e
  "$vmm" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
  local status=$?
  set -e
  [ "$status" -eq 1 ] || { cat "$tmp/err" >&2; fail "$case: exit status $status, expected 1"; }
  [ "$(wc -l <"$tmp/err")" -le 2 ] || { cat "$tmp/err" >&2; fail "$case: more than a short error"; }
  expect_contains "$(cat "$tmp/err")" "$want" "$case: refused with '$want'"
}

case "$case" in
  missing-kernel)
    expect_refusal "cannot open /nonexistent/bzImage" --kernel /nonexistent/bzImage ;;
  kernel-is-directory)
    expect_refusal "not a regular file" --kernel /tmp ;;
  empty-kernel)
    : >"$tmp/empty"
    expect_refusal "is empty" --kernel "$tmp/empty" ;;
  truncated-kernel)
    head -c 4096 "$(real_kernel)" >"$tmp/truncated"
    expect_refusal "kernel:" --kernel "$tmp/truncated" ;;
  not-a-kernel)
    head -c 65536 /dev/urandom >"$tmp/random"
    expect_refusal "not a bzImage or ELF" --kernel "$tmp/random" ;;
  initrd-too-big)
    truncate -s 200M "$tmp/huge-initrd"
    expect_refusal "does not fit in guest memory" --kernel "$(real_kernel)" --initrd "$tmp/huge-initrd" --memory 128 ;;
  initrd-fills-memory)
    # Smaller than memory, but not with the kernel beside it.
    truncate -s 127M "$tmp/big-initrd"
    expect_refusal "does not fit" --kernel "$(real_kernel)" --initrd "$tmp/big-initrd" --memory 128 ;;
  cmdline-too-long)
    long=$(head -c 5000 /dev/zero | tr '\0' 'a')
    expect_refusal "command line" --kernel "$(real_kernel)" --cmdline "$long" ;;
  zero-vcpus)
    expect_refusal "0 vCPUs requested" --kernel "$(real_kernel)" --cpus 0 ;;
  too-many-vcpus)
    expect_refusal "vCPUs requested" --kernel "$(real_kernel)" --cpus 1000 ;;
  memory-too-small)
    expect_refusal "the minimum is" --kernel "$(real_kernel)" --memory 16 ;;
  kvm-missing)
    expect_refusal "does not exist" --kernel "$(real_kernel)" --initrd "$(real_initrd)" --kvm-device "$tmp/no-kvm" ;;
  kvm-not-accessible)
    # An unprivileged user cannot open a root-only device node.
    cp "$(real_kernel)" "$tmp/bzImage"
    chmod 755 "$tmp"; chmod 644 "$tmp/bzImage"
    mknod "$tmp/kvm" c 10 232 2>/dev/null || cp -a /dev/kvm "$tmp/kvm"
    chmod 600 "$tmp/kvm"
    if [ "$(id -u)" -eq 0 ]; then
      set +e
      setpriv --reuid=65534 --regid=65534 --clear-groups "$vmm" --kernel "$tmp/bzImage" \
        --kvm-device "$tmp/kvm" >"$tmp/out" 2>"$tmp/err" </dev/null
      status=$?
      set -e
      [ "$status" -eq 1 ] || { cat "$tmp/err" >&2; fail "$case: exit status $status"; }
      expect_contains "$(cat "$tmp/err")" "not accessible" "$case: refused as not accessible"
    else
      expect_refusal "not accessible" --kernel "$tmp/bzImage" --kvm-device "$tmp/kvm"
    fi ;;
  bad-config)
    printf '[machine]\ncpus = "two"\n' >"$tmp/typed.toml"
    expect_refusal "machine.cpus must be an integer" --config "$tmp/typed.toml" --kernel /x
    printf '[machin]\ncpus = 2\n' >"$tmp/typo.toml"
    expect_refusal "unknown setting machin.cpus" --config "$tmp/typo.toml" --kernel /x ;;
  bad-console)
    expect_refusal "console 'tty'" --kernel /x --console tty ;;
  bad-snapshot)
    # Refused before KVM is opened, and the file is left as it was.
    head -c 65536 /dev/urandom >"$tmp/random.snap"
    sum=$(sha256sum <"$tmp/random.snap")
    expect_refusal "bad_magic:" --restore "$tmp/random.snap"
    [ "$(sha256sum <"$tmp/random.snap")" = "$sum" ] || fail "$case: the snapshot file changed"
    printf 'SBXSNAP\0' >"$tmp/short.snap"
    expect_refusal "truncated:" --restore "$tmp/short.snap"
    expect_refusal "do not apply to --restore" --restore "$tmp/random.snap" --kernel /x
    expect_refusal "--restore-mode is eager, lazy or private" --restore "$tmp/random.snap" --restore-mode fast ;;
  *) fail "unknown case $case" ;;
esac
