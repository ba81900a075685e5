# images/kernel/build.sh: kernel recipe for images/build (sourced, not run).
#
# tinyconfig of Debian's linux-source-6.12 + config.fragment, checked, then
# `make bzImage vmlinux`. Cache entry: bzImage, vmlinux (ELF, with PVH note),
# config (the .config; `.config` is a symlink to it), System.map, build.log.

KERNEL_SRC_PKG=linux-source-6.12
KERNEL_SRC_TARBALL=/usr/src/linux-source-6.12.tar.xz
KERNEL_FRAGMENT="$IMAGES_DIR/kernel/config.fragment"
KERNEL_MAKE=(make ARCH=x86_64 KBUILD_BUILD_USER=sbx KBUILD_BUILD_HOST=sandboxer)

kernel_inputs() {
    echo "linux-source: $KERNEL_SRC_PKG $(pkg_version "$KERNEL_SRC_PKG")"
    echo "gcc: $(gcc --version | head -n1)"
    echo "binutils: $(ld --version | head -n1)"
    echo "base: tinyconfig"
    hash_files "$IMAGES_DIR/kernel/build.sh" "$KERNEL_FRAGMENT"
}

kernel_artifact() { echo bzImage; }

# kernel_extract WORKDIR: unpack the source, print the tree's path.
kernel_extract() {
    local work=$1
    [[ -f $KERNEL_SRC_TARBALL ]] || die "$KERNEL_SRC_TARBALL not found (apt-get install $KERNEL_SRC_PKG)"
    log "kernel: extracting $KERNEL_SRC_TARBALL"
    tar -C "$work" -xf "$KERNEL_SRC_TARBALL"
    local src="$work/$KERNEL_SRC_PKG"
    [[ -f $src/Makefile ]] || die "unexpected tarball layout: no $src/Makefile"
    echo "$src"
}

# kernel_check_config FRAGMENT CONFIG: every `CONFIG_X=v` / `# CONFIG_X is not
# set` line of FRAGMENT must hold in CONFIG. Lists all mismatches, then fails.
kernel_check_config() {
    local fragment=$1 config=$2
    local line name want got bad=0
    declare -A have=()
    while IFS= read -r line; do
        if [[ $line =~ ^(CONFIG_[A-Za-z0-9_]+)=(.*)$ ]]; then
            have[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
        elif [[ $line =~ ^#\ (CONFIG_[A-Za-z0-9_]+)\ is\ not\ set$ ]]; then
            have[${BASH_REMATCH[1]}]=n
        fi
    done <"$config"
    while IFS= read -r line; do
        if [[ $line =~ ^(CONFIG_[A-Za-z0-9_]+)=(.*)$ ]]; then
            name=${BASH_REMATCH[1]} want=${BASH_REMATCH[2]}
        elif [[ $line =~ ^#\ (CONFIG_[A-Za-z0-9_]+)\ is\ not\ set$ ]]; then
            name=${BASH_REMATCH[1]} want=n
        elif [[ $line =~ ^[[:space:]]*(#|$) ]]; then
            continue
        else
            log "kernel: config.fragment: unparsable line: $line"
            bad=1
            continue
        fi
        got=${have[$name]:-n}
        if [[ $got != "$want" ]]; then
            log "kernel: MISMATCH $name: requested $want, got $got"
            bad=1
        fi
    done <"$fragment"
    if ((bad)); then
        log "kernel: config.fragment options were dropped or changed by Kconfig"
        log "kernel: (usually an unmet dependency; check with 'make menuconfig' and '/')"
        return 1
    fi
    log "kernel: all $(grep -c -E '^(CONFIG_|# CONFIG_.* is not set)' "$fragment") fragment options verified"
}

# kernel_configure SRC LOG: tinyconfig + fragment + olddefconfig + check.
kernel_configure() {
    local src=$1 logfile=$2
    log "kernel: configuring (tinyconfig + $(basename "$KERNEL_FRAGMENT"))"
    run_logged "$logfile" "${KERNEL_MAKE[@]}" -C "$src" tinyconfig || return
    run_logged "$logfile" "$src/scripts/kconfig/merge_config.sh" -m -O "$src" \
        "$src/.config" "$KERNEL_FRAGMENT" || return
    run_logged "$logfile" "${KERNEL_MAKE[@]}" -C "$src" olddefconfig || return
    kernel_check_config "$KERNEL_FRAGMENT" "$src/.config"
}

kernel_build() {
    local out=$1 work=$2 src
    src=$(kernel_extract "$work")
    kernel_configure "$src" "$out/build.log"
    local jobs t0=$SECONDS
    jobs=$(jobs_count)
    log "kernel: make -j$jobs bzImage vmlinux (log: build.log in the cache entry)"
    run_logged "$out/build.log" "${KERNEL_MAKE[@]}" -C "$src" -j"$jobs" bzImage vmlinux
    log "kernel: compiled in $((SECONDS - t0)) s"
    cp "$src/arch/x86/boot/bzImage" "$out/bzImage"
    cp "$src/vmlinux" "$out/vmlinux"
    cp "$src/System.map" "$out/System.map"
    cp "$src/.config" "$out/config"
    ln -s config "$out/.config"
    log "kernel: $("${KERNEL_MAKE[@]}" -s -C "$src" kernelrelease), bzImage $(stat -c %s "$out/bzImage") bytes, vmlinux $(stat -c %s "$out/vmlinux") bytes"
}

# `images/build kernel-config`: the checked .config on stdout, no compile.
kernel_config_only() {
    local tmp src rc=0
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/sbx-kernel-config.XXXXXX")
    src=$(kernel_extract "$tmp")
    kernel_configure "$src" "$tmp/config.log" >&2 || rc=$?
    ((rc == 0)) && cat "$src/.config"
    rm -rf "$tmp"
    return "$rc"
}
