#!/usr/bin/env bash
# Guest side of a check of the full image, the default one (images/build
# rootfs; images/README.md, "Default image"): every tool it lists runs and says its
# version, plus a few checks that the tools work as the image promises
# (a venv with pip, Chromium rendering a page headless, the Docker daemon
# answering, `user` in groups sudo and docker). Runs inside the guest, as
# root or as `user`; prints one "ok: ..." or "FAIL: ..." line per check and
# a closing count. Exit status: the number of failed checks (0: all passed).
# Run in a sandbox by the full_image part of the guest test sbxd-full.
# Usage: full_tools.sh [TIMEOUT_S]   (per command, default 300: the nested
# harness is 10-50x slower than hardware)
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
limit=${1:-300}
passed=0 failed=0
ok() { echo "ok: $*"; passed=$((passed + 1)); }
bad() { echo "FAIL: $*"; failed=$((failed + 1)); }
work=$(mktemp -d /tmp/full-tools.XXXXXX)
trap 'rm -rf "$work"' EXIT

# version NAME PATTERN CMD...: CMD exits 0 and its output (stdout and
# stderr) has a line matching the extended regexp PATTERN; that line is
# printed.
version() {
    local name=$1 pattern=$2 out rc=0 line
    shift 2
    out=$(timeout "$limit" "$@" </dev/null 2>&1) || rc=$?
    line=$(grep -m1 -E "$pattern" <<<"$out")
    if ((rc == 0)) && [[ -n $line ]]; then
        ok "$name: $line"
    else
        bad "$name: \`$*\` exit $rc: $(head -c 400 <<<"$out" | tr '\n' ' ')"
    fi
}

version docker 'Docker version' docker --version
version docker-compose 'docker-compose version' docker-compose --version
version python3 '^Python 3' python3 --version
version pip '^pip [0-9]' pip --version
version node '^v[0-9]' node --version
version npm '^[0-9]+\.' npm --version
version go '^go version' go version
version rustc '^rustc ' rustc --version
version cargo '^cargo ' cargo --version
version gcc '^gcc ' gcc --version
version g++ '^g\+\+ ' g++ --version
version make '^GNU Make' make --version
version git '^git version' git --version
version gh '^gh version' gh --version
version curl '^curl ' curl --version
version jq '^jq-' jq --version
version rg '^ripgrep ' rg --version
version tmux '^tmux ' tmux -V
version ffmpeg '^ffmpeg version' ffmpeg -version
version chromium '^Chromium ' chromium --version
version ssh '^OpenSSH_' ssh -V
# sshd has no version option: its usage text, after "unknown option",
# names the version (and it exits 1).
version sshd '^OpenSSH_' sh -c 'sshd -V 2>&1 || true'
version claude 'Claude Code' claude --version
version codex '^codex' codex --version

# python3 -m venv makes an environment whose pip runs (ensurepip, offline).
# shellcheck disable=SC2016 # expanded by the inner sh
version 'python3 -m venv' '^pip [0-9]' sh -c 'python3 -m venv "$1/venv" && "$1/venv/bin/python" -m pip --version' sh "$work"

# Chromium headless renders a page (fonts, no GPU, no display). As root
# it needs --no-sandbox; as another user it uses its user-namespace
# sandbox.
sandbox=()
[[ $(id -u) == 0 ]] && sandbox=(--no-sandbox)
version 'chromium --headless' 'sbx-rendered' chromium --headless "${sandbox[@]}" --disable-gpu \
    --user-data-dir="$work/chromium" --dump-dom 'data:text/html,<p id="x"></p><script>document.getElementById("x").textContent="sbx-rendered"</script>'

# The Docker daemon (docker.service, containerd.service) runs and answers;
# as `user` through the docker group.
version 'docker daemon' '^[0-9]+\.' docker info --format '{{.ServerVersion}}'
groups=" $(id -nG user 2>/dev/null) "
if [[ $groups == *" sudo "* && $groups == *" docker "* ]]; then
    ok "user's groups:$groups"
else
    bad "user's groups:$groups(want sudo and docker)"
fi

echo "full-tools: $passed passed, $failed failed"
exit "$failed"
