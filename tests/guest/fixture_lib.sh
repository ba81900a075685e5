# shellcheck shell=bash disable=SC2154,SC2034 # src, build, work, kernel, image: set by the test; outputs are read by the caller
# Guest fixtures: a guest snapshotted once at agent-ready, restored by every
# test that needs a booted guest but is not about booting or restoring
# (sourced by the test scripts on the host and by their level-1 sessions).
# A restore takes seconds where a boot under the harness takes a minute or
# more. The fixture lives in the artifact cache, keyed by everything that
# shapes the saved machine: the sbx-vmm build (its code and data, not its
# debug paths), the kernel, the image, the boot parameters and the CPU the
# guest runs on (the level-1 CPU model and harness kernel, or this host's
# CPU in direct mode).
#
# Host side (the test script, after agent_prepare and agent_image):
#   fixture_prepare NAME MEMORY_MIB [DISK]
#       sets $fixture_dir (the cache entry, may not exist yet) and
#       $fixture_new (a fresh directory in $work where a level-1 session
#       that finds no fixture creates one); DISK: "disk" when the image is
#       a root disk (agent_image's rootfs tar), else the initramfs.
#   fixture_publish
#       after the nested run: moves a fixture the session created into the
#       cache (atomically; a concurrent publisher's entry wins).
# Level-1 side (the session script, with SBX_AGENT_UDS set):
#   fixture_start FIXTURE_DIR FIXTURE_NEW KERNEL IMAGE VMM AGENTCTL LOGDIR NAME MEMORY_MIB [disk]
#       restores the fixture (building it first when FIXTURE_DIR has none:
#       boot, wait for the agent, snapshot, stop) with the vsock device at
#       $SBX_AGENT_UDS and a control socket at $fixture_control; sets
#       $vmm_pid, $SBX_AGENT_TOKEN (exported: the fixture's), $fixture_made
#       (1 when this run built it), $fixture_disk (the root disk in use);
#       prints FIXTURE-BOOT-SECONDS / FIXTURE-RESTORE-SECONDS lines.
#       Returns non-zero, with the reason on stdout, when it cannot.

fixture_lib_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

fixture_cache_root() {
  echo "${SBX_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sandboxer}/fixtures"
}

# The code and data sections of an ELF file: what runs, not where it was built.
fixture_elf_hash() {
  local tmp
  tmp=$(mktemp)
  objcopy -O binary --only-section=.text --only-section=.rodata --only-section=.data "$1" "$tmp" ||
    { rm -f "$tmp"; return 1; }
  sha256sum <"$tmp" | cut -c1-32
  rm -f "$tmp"
}

# The CPU the guest will run on, as far as a saved machine depends on it.
fixture_cpu_identity() {
  local mode
  mode=$("$fixture_lib_dir/../nested" --print-mode 2>/dev/null || echo nested)
  if [ "$mode" = nested ]; then
    local cache_root harness
    cache_root=$(dirname "$(fixture_cache_root)")
    harness=$(cat "$cache_root/harness/last" 2>/dev/null || echo none)
    echo "nested harness=$harness qemu=$(qemu-system-x86_64 --version 2>/dev/null | head -n1)"
    grep -o -- '-cpu [^ ]*' "$fixture_lib_dir/../nested" | head -n1
  else
    grep -m1 '^model name' /proc/cpuinfo
    grep -m1 '^flags' /proc/cpuinfo | sha256sum | cut -c1-16
  fi
}

# What the key covers, one line each (a failed hash fails the manifest).
fixture_manifest() {
  local name=$1 memory=$2 kind=$3 vmm_hash
  vmm_hash=$(fixture_elf_hash "$build/host-tools/sbx-vmm/sbx-vmm") || return 1
  echo "fixture $name memory=$memory kind=$kind format=1"
  echo "sbx-vmm $vmm_hash"
  # images/build entries are content-addressed: their paths are their keys.
  echo "kernel $kernel $(stat -c '%s %Y' "$kernel")"
  # agent_image's cache path (a rootfs image is then repacked into $work)
  echo "image ${agent_image_path:-$image} $(stat -c '%s' "${agent_image_path:-$image}")"
  sha256sum "$fixture_lib_dir/fixture_lib.sh" | cut -c1-16
  fixture_cpu_identity
}

fixture_prepare() {
  local name=$1 memory=$2 kind=${3:-initrd} manifest
  command -v objcopy >/dev/null || fail "fixtures need objcopy (binutils)"
  manifest=$(fixture_manifest "$name" "$memory" "$kind") || fail "fixture: cannot hash $build/host-tools/sbx-vmm/sbx-vmm"
  fixture_dir="$(fixture_cache_root)/$name-$(printf '%s\n' "$manifest" | sha256sum | cut -c1-24)"
  fixture_new="$work/fixture.new"
  rm -rf "$fixture_new"
  mkdir -p "$fixture_new"
  printf '%s\n' "$manifest" >"$fixture_new/manifest"
  if [ -f "$fixture_dir/snap" ]; then
    echo "fixture: $name from the cache ($fixture_dir)"
    touch "$fixture_dir"
  else
    echo "fixture: $name not cached yet; the test builds it ($fixture_dir)"
  fi
}

fixture_publish() {
  [ -f "$fixture_new/snap" ] || return 0
  local root
  root=$(fixture_cache_root)
  mkdir -p "$root" || return 0
  local tmp="$root/.tmp-$$-${fixture_dir##*/}"
  rm -rf "$tmp"
  if cp -r --sparse=always "$fixture_new" "$tmp" && mv -T "$tmp" "$fixture_dir" 2>/dev/null; then
    echo "fixture: published $fixture_dir ($(du -sk "$fixture_dir" | cut -f1) KiB)"
  else
    rm -rf "$tmp"
  fi
  # Entries no run has used for a week go.
  find "$root" -mindepth 1 -maxdepth 1 -type d -mtime +7 -exec rm -rf {} + 2>/dev/null || true
}

# --- level-1 side -------------------------------------------------------------

fixture_start() {
  local dir=$1 new=$2 kernel=$3 image=$4 vmm=$5 ctl=$6 logdir=$7 name=$8 memory=$9 kind=${10:-initrd}
  local here_w t0 base boot=() source=$dir
  here_w=$(mktemp -d /tmp/fixture.XXXXXX)
  fixture_control=$here_w/control.sock
  fixture_made=0
  fixture_disk=
  base="console=ttyS0 reboot=k panic=1 i8042.noaux i8042.nomux i8042.nopnp i8042.dumbkbd quiet"
  if [ ! -f "$dir/snap" ]; then
    source=$new
    SBX_AGENT_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
    export SBX_AGENT_TOKEN
    if [ "$kind" = disk ]; then
      tar -C "$here_w" -xSf "$image" || { echo "fixture: cannot unpack $image"; return 1; }
      fixture_disk=$here_w/rootfs.ext4
      boot=(--disk "$fixture_disk"
        --cmdline "$base root=/dev/vda rw rootfstype=ext4 init=/lib/systemd/systemd sbx.token=$SBX_AGENT_TOKEN")
    else
      boot=(--initrd "$image" --cmdline "$base sbx.token=$SBX_AGENT_TOKEN")
    fi
    t0=$SECONDS
    "$vmm" --kernel "$kernel" "${boot[@]}" --memory "$memory" --vsock "cid=3,uds=$SBX_AGENT_UDS" \
      --control "$fixture_control" --snapshot-dir "$new" --console "file:$logdir/$name-fixture-boot-console.log" \
      </dev/null \
      >"$logdir/$name-fixture-boot-vmm.out" 2>&1 &
    vmm_pid=$!
    if ! "$ctl" wait --timeout 900 >/dev/null; then
      echo "fixture: the agent never answered while building $name; console tail:"
      tail -n 30 "$logdir/$name-fixture-boot-console.log"
      return 1
    fi
    echo "FIXTURE-BOOT-SECONDS: $name $((SECONDS - t0))"
    if ! /usr/bin/python3 "$fixture_lib_dir/vmm_control.py" "$fixture_control" \
        "{\"op\":\"snapshot\",\"path\":\"$new/snap\"}" >"$here_w/snap.reply"; then
      echo "fixture: snapshot failed: $(cat "$here_w/snap.reply")"
      return 1
    fi
    /usr/bin/python3 "$fixture_lib_dir/vmm_control.py" "$fixture_control" '{"op":"stop"}' >/dev/null
    wait "$vmm_pid"
    printf '%s\n' "$SBX_AGENT_TOKEN" >"$new/token"
    if [ "$kind" = disk ]; then
      # The disk as the snapshot saw it: every restore starts from a copy.
      tar -C "$here_w" -S -cf "$new/disk.tar" rootfs.ext4 || { echo "fixture: cannot save the disk"; return 1; }
    fi
    fixture_made=1
  fi
  SBX_AGENT_TOKEN=$(cat "$source/token")
  export SBX_AGENT_TOKEN
  local restore=(--restore "$source/snap")
  if [ "$kind" = disk ]; then
    rm -f "$here_w/rootfs.ext4"
    tar -C "$here_w" -xSf "$source/disk.tar" || { echo "fixture: cannot unpack the fixture's disk"; return 1; }
    fixture_disk=$here_w/rootfs.ext4
    restore+=(--disk "$fixture_disk")
  fi
  t0=$SECONDS
  "$vmm" "${restore[@]}" --vsock "cid=3,uds=$SBX_AGENT_UDS" --control "$fixture_control" \
    --console "file:$logdir/$name-console.log" </dev/null >"$logdir/$name-vmm.out" 2>&1 &
  vmm_pid=$!
  if ! "$ctl" wait --timeout 300 >/dev/null; then
    echo "fixture: the restored $name guest's agent never answered; vmm output:"
    tail -n 20 "$logdir/$name-vmm.out"
    return 1
  fi
  echo "FIXTURE-RESTORE-SECONDS: $name $((SECONDS - t0))"
}
