# images/rootfs/base.sh: the rootfs-base recipe for images/build (sourced).
# shellcheck shell=bash
#
# A Debian 12 (bookworm) tree made by `debootstrap --variant=minbase
# --include=<images/rootfs/packages>`, trimmed (no docs, man pages,
# translations, apt caches or lists, logs), packed as rootfs-base.tar.zst.
# It is the expensive half of the default image (about a minute plus the
# download); images/rootfs/build.sh turns it into the ext4 disk.
# Needs root (debootstrap chroots and makes device nodes) and network.
#
# Cache entry: rootfs-base.tar.zst, packages.txt (dpkg-query of the tree),
# debootstrap.log.

ROOTFS_SUITE=bookworm
ROOTFS_MIRROR=${SBX_DEBIAN_MIRROR:-http://deb.debian.org/debian}
ROOTFS_MIRROR=${ROOTFS_MIRROR%/}

# rootfs_base_packages: the package list, comma-separated.
rootfs_base_packages() {
    local list
    list=$(sed -e 's/#.*//' "$IMAGES_DIR/rootfs/packages" | tr -s ' \t\n' '\n' | grep -v '^$' | paste -sd, -)
    [[ -n $list ]] || die "rootfs-base: images/rootfs/packages lists no package"
    echo "$list"
}

# rootfs_base_release: the identity of the mirror's current bookworm release:
# the Date: line of its InRelease file (it changes whenever the archive
# changes: point releases, and every day on snapshot mirrors) and the
# SHA256 of main/binary-amd64/Packages.xz listed in it. Remembered per
# mirror in the cache, so a cached base stays usable offline (with a
# warning).
rootfs_base_release() {
    local memo inrelease date packages
    memo="$CACHE_ROOT/rootfs-base/.release-$(printf '%s' "$ROOTFS_MIRROR $ROOTFS_SUITE" | sha256sum | cut -c1-16)"
    if inrelease=$(curl -fsSL --max-time 15 --retry 1 "$ROOTFS_MIRROR/dists/$ROOTFS_SUITE/InRelease" 2>/dev/null); then
        date=$(sed -n 's/^Date: //p' <<<"$inrelease" | head -n1)
        packages=$(awk '/^SHA256:/ { s = 1; next } /^[^ ]/ { s = 0 } s && $3 == "main/binary-amd64/Packages.xz" { print $1; exit }' <<<"$inrelease")
        if [[ -n $date && -n $packages ]]; then
            mkdir -p "${memo%/*}"
            printf 'Date: %s; main/binary-amd64/Packages.xz sha256 %s\n' "$date" "$packages" >"$memo.tmp.$$"
            mv -f "$memo.tmp.$$" "$memo"
        else
            log "rootfs-base: warning: $ROOTFS_MIRROR/dists/$ROOTFS_SUITE/InRelease has no Date or Packages.xz line"
        fi
    fi
    if [[ -f $memo ]]; then
        [[ -n ${inrelease:-} ]] || log "rootfs-base: warning: cannot reach $ROOTFS_MIRROR; using the release seen last: $(cat "$memo")"
        cat "$memo"
    else
        die "rootfs-base: cannot read $ROOTFS_MIRROR/dists/$ROOTFS_SUITE/InRelease (no network? set SBX_DEBIAN_MIRROR)"
    fi
}

rootfs_base_inputs() {
    echo "debootstrap: $(pkg_version debootstrap)"
    echo "suite: $ROOTFS_SUITE variant: minbase mirror: $ROOTFS_MIRROR"
    echo "release: $(rootfs_base_release)"
    echo "packages: $(rootfs_base_packages)"
    hash_files "$IMAGES_DIR/rootfs/base.sh" "$IMAGES_DIR/rootfs/packages"
}

rootfs_base_artifact() { echo rootfs-base.tar.zst; }

# rootfs_umount_under DIR: unmount everything mounted at or below DIR
# (what an interrupted debootstrap can leave: proc, sys, dev binds),
# deepest first.
rootfs_umount_under() {
    local dir mnt
    dir=$(readlink -f "$1")
    awk -v d="$dir" '$5 == d || index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo |
        sort -r | while read -r mnt; do
        umount -l "$mnt" 2>/dev/null || log "rootfs: could not unmount $mnt"
    done
}

# rootfs_base_trim ROOT: what a disposable sandbox does not need.
rootfs_base_trim() {
    local root=$1
    # Documentation (copyright files stay: the licences of what is shipped),
    # man and info pages, translations (C.UTF-8 is built into libc6 and is
    # not under /usr/share/locale).
    find "$root/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
    find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
    rm -rf "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/* \
        "$root"/usr/share/lintian "$root"/usr/share/linda
    # apt: downloaded .debs, package lists (stale anyway; `apt-get update`
    # fetches fresh ones), caches that apt rebuilds.
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin \
        "$root"/var/lib/apt/lists/* "$root"/var/cache/debconf/*-old "$root"/var/lib/dpkg/*-old
    mkdir -p "$root/var/lib/apt/lists/partial"
    # Logs of the installation.
    find "$root/var/log" -type f -delete
    # A machine-id made at install time would be shared by every sandbox;
    # the rootfs recipe leaves /etc/machine-id empty (a new one per boot).
    : >"$root/etc/machine-id"
    rm -f "$root/var/lib/dbus/machine-id"
}

rootfs_base_build() {
    local out=$1 work=$2
    local root="$work/root" packages rc=0
    [[ $(id -u) == 0 ]] || die "rootfs-base: debootstrap needs root (it chroots and makes device nodes); run images/build as root"
    command -v debootstrap >/dev/null || die "rootfs-base: debootstrap not found (apt-get install debootstrap)"
    command -v zstd >/dev/null || die "rootfs-base: zstd not found (apt-get install zstd)"
    packages=$(rootfs_base_packages)
    log "rootfs-base: debootstrap $ROOTFS_SUITE (minbase + $packages) from $ROOTFS_MIRROR (log: debootstrap.log in the cache entry)"
    local t0=$SECONDS
    # dpkg fsyncs every file it unpacks, which makes the second stage crawl
    # on a busy disk; the tree is thrown away on failure anyway. Placed
    # before debootstrap runs, so that the chroot's dpkg reads it; removed
    # right after.
    mkdir -p "$root/etc/dpkg/dpkg.cfg.d"
    echo force-unsafe-io >"$root/etc/dpkg/dpkg.cfg.d/sbx-build-unsafe-io"
    # In a subshell with its own trap: whatever happens to debootstrap, no
    # mount is left in the tree that the cache machinery then removes.
    (
        trap 'rootfs_umount_under "$root"' EXIT
        run_logged "$out/debootstrap.log" debootstrap --variant=minbase --include="$packages" \
            --components=main --merged-usr "$ROOTFS_SUITE" "$root" "$ROOTFS_MIRROR"
    ) || rc=$?
    ((rc == 0)) || die "rootfs-base: debootstrap failed (exit $rc)"
    rm -f "$root/etc/dpkg/dpkg.cfg.d/sbx-build-unsafe-io"
    log "rootfs-base: debootstrap took $((SECONDS - t0)) s"
    t0=$SECONDS
    # shellcheck disable=SC2016 # dpkg-query's format, not shell
    chroot "$root" dpkg-query -W -f='${Package} ${Version}\n' | sort >"$out/packages.txt"
    rootfs_base_trim "$root"
    log "rootfs-base: $(wc -l <"$out/packages.txt") packages, $(du -sm "$root" | cut -f1) MiB after trimming"
    # Owners and modes as they are (numeric), extended attributes (file
    # capabilities) and ACLs; sorted for a stable archive.
    tar -C "$root" --numeric-owner --xattrs --xattrs-include='*' --acls --sort=name \
        -cf - . | zstd -q -T0 -6 -o "$out/rootfs-base.tar.zst"
    log "rootfs-base: rootfs-base.tar.zst $(stat -c %s "$out/rootfs-base.tar.zst") bytes, trimmed and packed in $((SECONDS - t0)) s"
}
