# images/initramfs/build.sh: initramfs recipe for images/build (sourced).
#
# busybox-static + images/initramfs/init, packed as cpio (newc) + gzip -9.
# The archive is reproducible: fixed order, owner 0:0, mtimes 0.

INITRAMFS_BUSYBOX_PKG=busybox-static
INITRAMFS_BUSYBOX=/bin/busybox

initramfs_inputs() {
    echo "busybox: $INITRAMFS_BUSYBOX_PKG $(pkg_version "$INITRAMFS_BUSYBOX_PKG")"
    [[ -x $INITRAMFS_BUSYBOX ]] || die "$INITRAMFS_BUSYBOX missing (apt-get install $INITRAMFS_BUSYBOX_PKG)"
    echo "busybox-sha256: $(sha256sum <"$INITRAMFS_BUSYBOX" | cut -d' ' -f1)"
    hash_files "$IMAGES_DIR/initramfs/build.sh" "$IMAGES_DIR/initramfs/init"
}

initramfs_artifact() { echo initramfs.cpio.gz; }

initramfs_build() {
    local out=$1 work=$2
    local root="$work/root" applet
    if readelf -l "$INITRAMFS_BUSYBOX" | grep -q 'program interpreter'; then
        die "$INITRAMFS_BUSYBOX is not statically linked (need package $INITRAMFS_BUSYBOX_PKG)"
    fi
    mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,dev,proc,sys,tmp,run,root,etc,mnt}
    chmod 1777 "$root/tmp"
    chmod 0700 "$root/root"
    cp "$INITRAMFS_BUSYBOX" "$root/bin/busybox"
    chmod 0755 "$root/bin/busybox"
    # One symlink per applet, at the path busybox itself reports (bin/sh,
    # sbin/reboot, usr/bin/nproc, ...).
    while read -r applet; do
        [[ -n $applet && $applet != bin/busybox ]] || continue
        [[ -e $root/$applet || -L $root/$applet ]] && continue
        mkdir -p "$root/$(dirname "$applet")"
        ln -s /bin/busybox "$root/$applet"
    done < <("$INITRAMFS_BUSYBOX" --list-full)
    [[ -L $root/bin/sh ]] || die "busybox did not list bin/sh"
    install -m 0755 "$IMAGES_DIR/initramfs/init" "$root/init"
    printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
    printf 'root:x:0:\n' >"$root/etc/group"
    # Reproducible archive: sorted names, owner root, mtime 0.
    find "$root" -exec touch -h -d @0 {} +
    (
        cd "$root" || exit 1
        find . -mindepth 1 -printf '%P\n' | LC_ALL=C sort |
            cpio --quiet -o -H newc -R 0:0 --reproducible
    ) | gzip -9 -n >"$out/initramfs.cpio.gz"
    log "initramfs: $(stat -c %s "$out/initramfs.cpio.gz") bytes, $(find "$root" -mindepth 1 | wc -l) entries"
}
