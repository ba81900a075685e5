# images/minimal/build.sh: the minimal recipe for images/build (sourced).
# shellcheck shell=bash
#
# The smallest image the agent lives in: the initramfs of images/initramfs
# (busybox-static and its /init, taken from the cache) followed by a second
# cpio archive with the agent and its configuration:
#   /usr/local/bin/sbx-agent          the agent ($SBX_AGENT, images/rootfs/agent.sh)
#   /etc/sandboxer/env, README        empty env file and its format (as in rootfs)
#   /etc/profile.d/sandboxer.sh       the env file reader (as in rootfs)
#   /etc/hostname                     sandbox
# The kernel unpacks concatenated archives in order. /init sees the agent
# and switches to agent mode (images/initramfs/init, images/README.md),
# printing `SBX-TS: agent_start MS` (the guest's clock) as it starts it.
#
# Cache entry: minimal.cpio.gz.

load_recipe initramfs
# shellcheck source=images/rootfs/agent.sh
source "$IMAGES_DIR/rootfs/agent.sh"

# Files of the default image that the minimal one shares (source:dest).
MINIMAL_FILES=(
    rootfs/files/etc/sandboxer/env:etc/sandboxer/env
    rootfs/files/etc/sandboxer/README:etc/sandboxer/README
    rootfs/files/etc/profile.d/sandboxer.sh:etc/profile.d/sandboxer.sh
    rootfs/files/etc/hostname:etc/hostname
)

minimal_inputs() {
    echo "initramfs: $(recipe_key initramfs)"
    agent_inputs
    hash_files "$IMAGES_DIR/minimal/build.sh"
    local spec
    for spec in "${MINIMAL_FILES[@]}"; do
        hash_files "$IMAGES_DIR/${spec%%:*}"
    done
}

minimal_artifact() { echo minimal.cpio.gz; }

minimal_build() {
    local out=$1 work=$2
    local stage="$work/stage" agent base spec
    agent=$(agent_check)
    if agent_is_dynamic "$agent"; then
        die "minimal: $agent is dynamically linked; the initramfs has no shared libraries (build the agent statically)"
    fi
    base=$(ensure_built initramfs 0)
    umask 022
    mkdir -p "$stage/usr/local/bin"
    agent_install "$agent" "$stage/usr/local/bin/sbx-agent"
    for spec in "${MINIMAL_FILES[@]}"; do
        install -D -m 0644 "$IMAGES_DIR/${spec%%:*}" "$stage/${spec#*:}"
    done
    # Reproducible, like the base archive: sorted, owner root, mtime 0.
    find "$stage" -exec touch -h -d @0 {} +
    {
        cat "$base/initramfs.cpio.gz"
        (
            cd "$stage" || exit 1
            find . -mindepth 1 -printf '%P\n' | LC_ALL=C sort |
                cpio --quiet -o -H newc -R 0:0 --reproducible
        ) | gzip -9 -n
    } >"$out/minimal.cpio.gz"
    log "minimal: $(stat -c %s "$out/minimal.cpio.gz") bytes (initramfs $(stat -c %s "$base/initramfs.cpio.gz") bytes + agent $(stat -c %s "$stage/usr/local/bin/sbx-agent") bytes before compression)"
}
