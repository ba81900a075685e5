# images/rootfs/image.sh: how a guest root disk is made from a base tree
# (sourced by the recipes images/rootfs/full.sh, the default image, and
# images/rootfs/slim.sh; not a recipe itself).
# shellcheck shell=bash
#
# A root disk is a base tarball (rootfs-full-base or rootfs-base, cached
# separately), the files under images/rootfs/files/, the user `user`,
# systemd units masked or enabled, and sbx-agent at
# /usr/local/bin/sbx-agent with its default user, written into a sparse
# ext4 image with `mkfs.ext4 -d`. Needs root: the tree's owners (root,
# _apt, user, ...) must survive the extraction for mkfs.ext4 -d to copy
# them. rootfs_image_inputs is such an image's manifest, rootfs_image_build
# makes it.
#
# Each image's file system is its recipe's size, sparse; a sandbox's disk
# is bigger (sbxd's diskGib): the guest grows the file system to it at
# boot (sbx-growfs.service).

# shellcheck source=images/rootfs/agent.sh
source "$IMAGES_DIR/rootfs/agent.sh"

# Units a sandbox does not need, masked (-> /dev/null) so that nothing,
# including a first-boot preset, starts them.
ROOTFS_MASK=(
    # Login prompts: no VT in the kernel, and the console is not a way in
    # (no passwords; the agent is). images/README.md says how to get an
    # emergency shell on ttyS0 for debugging.
    getty@.service serial-getty@.service
    # Seats and sessions need dbus (not installed); sudo and the agent do
    # not need logind.
    systemd-logind.service
    # /etc/machine-id is empty, so every boot is a first boot: it would
    # prompt on the console for a locale, time zone, root password.
    systemd-firstboot.service
    # Periodic maintenance that makes no sense in a disposable VM.
    apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer
    e2scrub_all.timer e2scrub_reap.service fstrim.timer
    # No module support in the guest kernel (modprobe@ would spawn a
    # modprobe for dm_mod, loop, fuse, configfs at each boot); the two
    # mounts require their modprobe@ unit. FUSE works without fusectl, and
    # the kernel has no configfs. No pstore, no partitions to grow.
    systemd-modules-load.service modprobe@.service
    sys-fs-fuse-connections.mount sys-kernel-config.mount
    systemd-pstore.service systemd-repart.service
    # The journal is volatile (journald.conf.d/sandboxer.conf): nothing to
    # flush to /var. No logins to record in utmp/wtmp.
    systemd-journal-flush.service
    systemd-update-utmp.service systemd-update-utmp-runlevel.service
)

# Generators PID 1 would run (one process each) before it starts any unit,
# for things the image does not have: LUKS, dm-integrity, dm-verity,
# GPT partitions, hibernation, /etc/rc.local, SysV init scripts, offline
# updates, and gettys (masked above). Kept: fstab, debug (systemd.mask=,
# systemd.wants=, systemd.debug_shell on the kernel command line), run
# (systemd.run=).
ROOTFS_MASK_GENERATORS=(
    systemd-cryptsetup-generator systemd-integritysetup-generator systemd-veritysetup-generator
    systemd-gpt-auto-generator systemd-hibernate-resume-generator systemd-rc-local-generator
    systemd-sysv-generator systemd-system-update-generator systemd-getty-generator
)

# rootfs_image_inputs BASE_RECIPE SIZE [RECIPE_FILE...]: the manifest of an
# image made by rootfs_image_build (rootfs-full, rootfs-slim): the base's
# key, the size, the agent, this file and RECIPE_FILEs (which hold the
# rest of the image's arguments), files/.
rootfs_image_inputs() {
    local base=$1 size=$2
    shift 2
    echo "base: $(recipe_key "$base")"
    echo "e2fsprogs: $(pkg_version e2fsprogs)"
    echo "size: $size"
    agent_inputs
    hash_files "$IMAGES_DIR/rootfs/image.sh" "$@"
    # The files and their mode (0755 if executable, else 0644).
    local f
    while IFS= read -r -d '' f; do
        printf '%s %s\n' "$(hash_files "$f")" "$(rootfs_file_mode "$f")"
    done < <(find "$IMAGES_DIR/rootfs/files" -type f -print0 | LC_ALL=C sort -z)
}

# rootfs_file_mode FILE: the mode a file of files/ gets in the image (not
# the checkout's, which depends on the umask).
rootfs_file_mode() { if [[ -x $1 ]]; then echo 0755; else echo 0644; fi; }

# rootfs_configure ROOT AGENT GROUPS DEFAULT_USER: everything on top of the
# base tree; GROUPS: the user's supplementary groups (comma-separated);
# DEFAULT_USER: the agent's user for requests that name none.
rootfs_configure() {
    local root=$1 agent=$2 groups=$3 default_user=$4 unit d
    # Our files, owned by root; new directories 0755.
    local f
    while IFS= read -r -d '' f; do
        install -D -m "$(rootfs_file_mode "$f")" "$f" "$root/${f#"$IMAGES_DIR/rootfs/files/"}"
    done < <(find "$IMAGES_DIR/rootfs/files" -type f -print0)
    # (They replace what debootstrap copied from the build host: hostname,
    # hosts, resolv.conf.)
    chmod 0440 "$root/etc/sudoers.d/sandboxer"

    # The user: uid 1000, home /home/user from /etc/skel, bash, member of
    # GROUPS: sudo (sudoers.d/sandboxer: no password needed; the account
    # has none), in the full image also docker.
    chroot "$root" useradd --create-home --uid 1000 --user-group --groups "$groups" \
        --shell /bin/bash --comment "Sandbox user" user

    agent_install "$agent" "$root/usr/local/bin/sbx-agent"
    mkdir -p "$root/etc/systemd/system/sysinit.target.wants"
    ln -sfn /etc/systemd/system/sbx-agent.service \
        "$root/etc/systemd/system/sysinit.target.wants/sbx-agent.service"
    rootfs_agent_default_user "$root" "$default_user"
    # The root file system grows to its disk at every boot (images/README.md,
    # "sbx-growfs.service"): the disk sbxd gives a sandbox is bigger than
    # the image.
    [[ -x $root/usr/sbin/resize2fs ]] || die "rootfs: no /usr/sbin/resize2fs (e2fsprogs) for sbx-growfs.service"
    ln -sfn /etc/systemd/system/sbx-growfs.service \
        "$root/etc/systemd/system/sysinit.target.wants/sbx-growfs.service"

    # sshd (images/README.md, "sshd"): enabled for multi-user.target, and
    # no host keys in the image: the packages' postinst made some, and
    # every copy of the image would share them. ssh.service's drop-in
    # makes them at the first boot.
    [[ -e $root/lib/systemd/system/ssh.service ]] || die "rootfs: no ssh.service (openssh-server in rootfs/packages?)"
    mkdir -p "$root/etc/systemd/system/multi-user.target.wants"
    ln -sfn /lib/systemd/system/ssh.service "$root/etc/systemd/system/multi-user.target.wants/ssh.service"
    ln -sfn /lib/systemd/system/ssh.service "$root/etc/systemd/system/sshd.service"
    rm -f "$root"/etc/ssh/ssh_host_*

    for unit in "${ROOTFS_MASK[@]}"; do
        [[ -e $root/lib/systemd/system/$unit ]] || die "rootfs: no unit $unit to mask (package list changed?)"
        ln -sfn /dev/null "$root/etc/systemd/system/$unit"
        # and drop the enablement symlinks the packages made (for a
        # template, those of its instances: getty@tty1.service)
        find "$root/etc/systemd/system" -path "*.wants/${unit/@./@*.}" -delete
    done

    mkdir -p "$root/etc/systemd/system-generators"
    for unit in "${ROOTFS_MASK_GENERATORS[@]}"; do
        [[ -e $root/lib/systemd/system-generators/$unit ]] || die "rootfs: no generator $unit to mask"
        ln -sfn /dev/null "$root/etc/systemd/system-generators/$unit"
    done

    # ConditionNeedsUpdate= (ldconfig, systemd-sysusers, hwdb, journal
    # catalog, ...) compares /usr's mtime with these stamps: as if
    # systemd-update-done had run, so the first boot does not redo what the
    # packages' postinst scripts did.
    local stamp
    stamp=$(stat -c %.9Y "$root/usr" | tr -d .)
    for d in etc var; do
        printf '# written by images/rootfs/image.sh, as systemd-update-done would\nTIMESTAMP_NSEC=%s\n' \
            "$stamp" >"$root/$d/.updated"
        touch -r "$root/usr" "$root/$d/.updated"
    done
}

# rootfs_agent_default_user ROOT USER: the agent runs an exec, and owns what
# a file op makes, as USER when the request names no user (sbx-agent
# --default-user, docs/agent-protocol.md); for root (the agent's own
# default) the unit stays as it is.
rootfs_agent_default_user() {
    local root=$1 user=$2 dropin="$1/etc/systemd/system/sbx-agent.service.d"
    [[ $user == root ]] && return 0
    grep -q "^$user:" "$root/etc/passwd" || die "rootfs: the agent's default user $user is not in /etc/passwd"
    mkdir -p "$dropin"
    printf '%s\n' "# images/rootfs/image.sh: the agent's default user" "[Service]" "ExecStart=" \
        "ExecStart=/usr/local/bin/sbx-agent --default-user $user" >"$dropin/default-user.conf"
}

# rootfs_image_build OUT WORK RECIPE BASE_RECIPE SIZE GROUPS DEFAULT_USER:
# the image of RECIPE (file name: its _artifact) from BASE_RECIPE's
# tarball, SIZE apparent (truncate's syntax), the user in GROUPS, the
# agent's default user DEFAULT_USER.
rootfs_image_build() {
    local out=$1 work=$2 recipe=$3 base_recipe=$4 size=$5 groups=$6 default_user=$7
    local root="$work/root" img agent base
    img="$out/$("$(recipe_fn "$recipe" artifact)")"
    [[ $(id -u) == 0 ]] || die "$recipe: assembling the image needs root (the Debian tree's file owners must be kept for mkfs.ext4 -d); run images/build as root"
    agent=$(agent_check)
    if agent_is_dynamic "$agent"; then
        log "$recipe: warning: $agent is dynamically linked; it runs only if the image has its libraries"
    fi
    base=$(ensure_built "$base_recipe" 0)
    umask 022
    mkdir "$root"
    local t0=$SECONDS
    tar -C "$root" --numeric-owner --xattrs --xattrs-include='*' --acls -xpf "$base/$("$(recipe_fn "$base_recipe" artifact)")"
    rootfs_configure "$root" "$agent" "$groups" "$default_user"
    log "$recipe: tree ready in $((SECONDS - t0)) s, $(du -sm "$root" | cut -f1) MiB; mkfs.ext4 -d"
    # A new sparse file reads as zeros, so mkfs need not write zeros to the
    # inode tables and journal (which would allocate them in the image) and
    # still marks the tables initialized: the guest kernel's ext4lazyinit
    # thread would otherwise zero them at every first mount. No reserved
    # blocks: the sandbox user has sudo anyway.
    truncate -s "$size" "$img"
    mkfs.ext4 -F -L sbx-root -m 0 -E assume_storage_prezeroed=1 -d "$root" "$img" >"$work/mkfs.log" 2>&1 || {
        cat "$work/mkfs.log" >&2
        die "$recipe: mkfs.ext4 failed"
    }
    e2fsck -fn "$img" >"$work/fsck.log" 2>&1 || {
        cat "$work/fsck.log" >&2
        die "$recipe: e2fsck finds errors in the new image"
    }
    log "$recipe: ${img##*/} $size apparent, $(du -m "$img" | cut -f1) MiB allocated, in $((SECONDS - t0)) s"
}
