# images/rootfs/full-base.sh: the rootfs-full-base recipe for images/build
# (sourced).
# shellcheck shell=bash
#
# The tree of the full image: the rootfs-base tree (images/rootfs/base.sh)
# plus `apt-get install --no-install-recommends` of images/rootfs/packages-full
# (from the mirror and release the base came from) and `npm ci` of the npm
# project images/rootfs/npm/ (the coding agents, exact versions and
# tarball hashes in its package-lock.json, from the npm registry) into
# /opt/sandboxer-npm, with their commands linked into /usr/local/bin.
# Trimmed as the base is, packed as rootfs-full-base.tar.zst; images/rootfs/full.sh
# turns it into the ext4 disk. Needs root (chroot, mounts) and network (the
# Debian mirror, registry.npmjs.org).
#
# Cache entry: rootfs-full-base.tar.zst, packages.txt (dpkg-query of the
# tree), npm-packages.txt (every npm package installed: path, name,
# version), apt.log, npm.log.

load_recipe rootfs-base

ROOTFS_FULL_NPM_DIR=/opt/sandboxer-npm
# The commands of the npm project that must be in /usr/local/bin.
ROOTFS_FULL_NPM_COMMANDS=(claude codex)

# rootfs_full_base_packages: the package list, one line, space-separated.
rootfs_full_base_packages() {
    local list
    list=$(sed -e 's/#.*//' "$IMAGES_DIR/rootfs/packages-full" | tr -s ' \t\n' '\n' | grep -v '^$' | paste -sd' ' -)
    [[ -n $list ]] || die "rootfs-full-base: images/rootfs/packages-full lists no package"
    echo "$list"
}

rootfs_full_base_inputs() {
    echo "base: $(recipe_key rootfs-base)"
    echo "packages: $(rootfs_full_base_packages)"
    hash_files "$IMAGES_DIR/rootfs/full-base.sh" "$IMAGES_DIR/rootfs/packages-full" \
        "$IMAGES_DIR/rootfs/npm/package.json" "$IMAGES_DIR/rootfs/npm/package-lock.json" \
        "$IMAGES_DIR/rootfs/files/etc/dpkg/dpkg.cfg.d/sandboxer-nodoc"
}

rootfs_full_base_artifact() { echo rootfs-full-base.tar.zst; }

# rootfs_full_base_chroot ROOT CMD...: CMD in the tree with a clean
# environment (nothing of the caller's PATH, locale or npm settings).
rootfs_full_base_chroot() {
    local root=$1
    shift
    chroot "$root" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
}

# rootfs_full_base_install ROOT OUT: the packages and the npm project into
# the unpacked base tree. Mounts proc and sysfs as debootstrap does (the
# device nodes are in the tree); the caller unmounts them.
rootfs_full_base_install() {
    local root=$1 out=$2 t0=$SECONDS cmd target
    mount -t proc proc "$root/proc"
    mount -t sysfs sysfs "$root/sys"
    # Name resolution for apt and npm: the build host's, only while building.
    cp -L /etc/resolv.conf "$root/etc/resolv.conf"
    # No daemon starts in the chroot (docker, containerd would).
    printf '#!/bin/sh\n# images/rootfs/full-base.sh: no service starts while building\nexit 101\n' \
        >"$root/usr/sbin/policy-rc.d"
    chmod 0755 "$root/usr/sbin/policy-rc.d"
    # No fsync per file (as in rootfs-base), and no docs or man pages
    # unpacked in the first place (the image's own dpkg setting).
    echo force-unsafe-io >"$root/etc/dpkg/dpkg.cfg.d/sbx-build-unsafe-io"
    install -m 0644 "$IMAGES_DIR/rootfs/files/etc/dpkg/dpkg.cfg.d/sandboxer-nodoc" "$root/etc/dpkg/dpkg.cfg.d/"

    run_logged "$out/apt.log" rootfs_full_base_chroot "$root" apt-get update ||
        die "rootfs-full-base: apt-get update failed"
    # shellcheck disable=SC2046 # the list is words by design
    run_logged "$out/apt.log" rootfs_full_base_chroot "$root" apt-get install -y --no-install-recommends \
        $(rootfs_full_base_packages) || die "rootfs-full-base: apt-get install failed"
    log "rootfs-full-base: apt-get install took $((SECONDS - t0)) s"

    # Docker at boot: docker.service with its socket, and containerd (the
    # packages' postinst enables them; made sure of here, as build.sh does
    # for sshd). The image's preset (files/) only keeps other units from
    # being enabled at a first boot; it disables none of these.
    local unit
    for unit in multi-user.target.wants/docker.service multi-user.target.wants/containerd.service \
        sockets.target.wants/docker.socket; do
        [[ -e $root/lib/systemd/system/${unit#*/} ]] || die "rootfs-full-base: no unit ${unit#*/}"
        mkdir -p "$root/etc/systemd/system/${unit%/*}"
        ln -sfn "/lib/systemd/system/${unit#*/}" "$root/etc/systemd/system/$unit"
    done

    t0=$SECONDS
    # npm trusts what the build host trusts (e.g. the CA of a TLS-inspecting
    # proxy): the host's bundle, in the tree only while building.
    local -a ca=()
    if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
        cp -L /etc/ssl/certs/ca-certificates.crt "$root/tmp/sbx-build-ca.crt"
        ca=(--cafile=/tmp/sbx-build-ca.crt)
    fi
    install -d -m 0755 "$root$ROOTFS_FULL_NPM_DIR"
    install -m 0644 "$IMAGES_DIR/rootfs/npm/package.json" "$IMAGES_DIR/rootfs/npm/package-lock.json" \
        "$root$ROOTFS_FULL_NPM_DIR/"
    # Exactly the lockfile's tarballs (checked against its hashes); install
    # scripts run (claude-code's postinstall links its native binary out of
    # its platform package). The cache is thrown away.
    run_logged "$out/npm.log" rootfs_full_base_chroot "$root" \
        npm --prefix "$ROOTFS_FULL_NPM_DIR" ci --omit=dev --no-audit --no-fund --update-notifier=false \
        --cache=/tmp/sbx-npm-cache "${ca[@]}" --registry=https://registry.npmjs.org/ ||
        die "rootfs-full-base: npm ci failed"
    rm -rf "$root/tmp/sbx-npm-cache" "$root/tmp/sbx-build-ca.crt" "$root/root/.npm"
    rootfs_full_base_npm_prune "$root" | sort >"$out/npm-packages.txt"
    for cmd in "${ROOTFS_FULL_NPM_COMMANDS[@]}"; do
        [[ -e $root$ROOTFS_FULL_NPM_DIR/node_modules/.bin/$cmd ]] || die "rootfs-full-base: npm installed no command $cmd"
        target=$(readlink -f "$root$ROOTFS_FULL_NPM_DIR/node_modules/.bin/$cmd")
        ln -sfn "${target#"$root"}" "$root/usr/local/bin/$cmd"
        # It runs (a platform binary missing or not linked in fails here),
        # with a scratch home for whatever it writes.
        mkdir -p "$root/root/sbx-version-home"
        run_logged "$out/npm.log" rootfs_full_base_chroot "$root" env HOME=/root/sbx-version-home "$cmd" --version ||
            die "rootfs-full-base: $cmd --version fails in the tree"
        rm -rf "$root/root/sbx-version-home"
    done
    log "rootfs-full-base: npm ci took $((SECONDS - t0)) s"

    rm -f "$root/usr/sbin/policy-rc.d" "$root/etc/dpkg/dpkg.cfg.d/sbx-build-unsafe-io"
}

# rootfs_full_base_npm_prune ROOT: removes the npm packages built for
# another libc and prints every package left: path, name, version.
# Debian 12's npm 9.2 does not know package.json's "libc" field (npm 10
# does), so it installs claude-code's musl binary (~370 MB) beside the
# glibc one.
rootfs_full_base_npm_prune() {
    # shellcheck disable=SC2016 # JavaScript, not shell
    rootfs_full_base_chroot "$1" node -e '
        const fs = require("fs"), top = process.argv[1];
        const hidden = top + "/node_modules/.package-lock.json";
        const lock = JSON.parse(fs.readFileSync(hidden));
        for (const path of Object.keys(lock.packages)) {
            const pkg = JSON.parse(fs.readFileSync(top + "/" + path + "/package.json"));
            if (pkg.libc && ![pkg.libc].flat().includes("glibc")) {
                fs.rmSync(top + "/" + path, { recursive: true });
                delete lock.packages[path];
            } else {
                console.log(`${path.replace(/^node_modules\//, "")} ${pkg.name} ${pkg.version}`);
            }
        }
        fs.writeFileSync(hidden, JSON.stringify(lock, null, 2) + "\n");
    ' "$ROOTFS_FULL_NPM_DIR"
}

# rootfs_full_base_unmount STATUS ROOT: the EXIT trap of the installation.
rootfs_full_base_unmount() {
    rootfs_umount_under "$2"
    (($1 == 0)) || log "rootfs-full-base: installing failed (exit $1)"
}

rootfs_full_base_build() {
    local out=$1 work=$2
    local root="$work/root" base t0=$SECONDS
    [[ $(id -u) == 0 ]] || die "rootfs-full-base: installing packages needs root (chroot, mounts); run images/build as root"
    command -v zstd >/dev/null || die "rootfs-full-base: zstd not found (apt-get install zstd)"
    base=$(ensure_built rootfs-base 0)
    umask 022
    mkdir "$root"
    tar -C "$root" --numeric-owner --xattrs --xattrs-include='*' --acls -xpf "$base/rootfs-base.tar.zst"
    cp -a "$root/etc/resolv.conf" "$work/resolv.conf"
    log "rootfs-full-base: base unpacked in $((SECONDS - t0)) s; apt-get install (log: apt.log, npm.log in the cache entry)"
    # In a subshell with its own trap: whatever fails, no mount is left in
    # the tree that the cache machinery then removes. (Not `( ... ) || die`:
    # that would turn off errexit inside.)
    (
        trap 'rootfs_full_base_unmount $? "$root"' EXIT
        rootfs_full_base_install "$root" "$out"
    )
    cp -a "$work/resolv.conf" "$root/etc/resolv.conf"
    t0=$SECONDS
    # shellcheck disable=SC2016 # dpkg-query's format, not shell
    chroot "$root" dpkg-query -W -f='${Package} ${Version}\n' | sort >"$out/packages.txt"
    rootfs_base_trim "$root"
    rm -rf "${root:?}"/tmp/* "$root"/var/tmp/*
    log "rootfs-full-base: $(wc -l <"$out/packages.txt") packages, $(du -sm "$root" | cut -f1) MiB after trimming"
    # As rootfs-base, but zstd's default level -3, not -6: the tree is over
    # ten times as big, and the tarball lives only in the cache.
    tar -C "$root" --numeric-owner --xattrs --xattrs-include='*' --acls --sort=name \
        -cf - . | zstd -q -T0 -3 -o "$out/rootfs-full-base.tar.zst"
    log "rootfs-full-base: rootfs-full-base.tar.zst $(stat -c %s "$out/rootfs-full-base.tar.zst") bytes, trimmed and packed in $((SECONDS - t0)) s"
}
