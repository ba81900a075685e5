# images/rootfs/agent.sh: which sbx-agent binary goes into the guest images
# shellcheck shell=bash
# (sourced by the rootfs and minimal recipes; part of both cache keys).
#
# $SBX_AGENT, or the meson build's ${SBX_BUILD_DIR:-<project>/build}/guest-agent/sbx-agent.
# A static ELF binary, or a script whose interpreter the image has (tests
# use a placeholder). The images' cache keys hold its SHA-256.

agent_path() {
    local project
    project=$(cd "$IMAGES_DIR/.." && pwd)
    echo "${SBX_AGENT:-${SBX_BUILD_DIR:-$project/build}/guest-agent/sbx-agent}"
}

# agent_check: the agent's path, or die saying what is wrong.
agent_check() {
    local agent
    agent=$(agent_path)
    if [[ ! -e $agent ]]; then
        if [[ -n ${SBX_AGENT:-} ]]; then
            die "SBX_AGENT=$agent does not exist"
        fi
        die "no sbx-agent at $agent: build it first (scripts/build) or set SBX_AGENT=PATH"
    fi
    [[ -f $agent && -x $agent ]] || die "sbx-agent $agent is not an executable file"
    echo "$agent"
}

# agent_is_dynamic AGENT: true for an ELF binary with a program interpreter.
agent_is_dynamic() {
    agent_is_elf "$1" && readelf -l "$1" 2>/dev/null | grep -q 'program interpreter'
}

agent_is_elf() { [[ $(head -c 4 "$1" | od -An -c | tr -d ' ') == '177ELF' ]]; }

# agent_install AGENT DEST: the agent at DEST, mode 0755, without debug
# information if it is an ELF binary (a debug build of the static agent is
# ~50 MB, 3.5 MB without; the symbol table stays for backtraces).
agent_install() {
    install -m 0755 "$1" "$2"
    if agent_is_elf "$1"; then
        strip --strip-debug "$2" || die "strip --strip-debug $1 failed (binutils)"
    fi
}

agent_inputs() {
    local agent
    agent=$(agent_check)
    echo "sbx-agent-sha256: $(sha256sum <"$agent" | cut -d' ' -f1)"
    echo "binutils: $(pkg_version binutils)"
    hash_files "$IMAGES_DIR/rootfs/agent.sh"
}
