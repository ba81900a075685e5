# sbxd part "ssh" (sourced by session.sh): the real OpenSSH client, scp and
# rsync reach a sandbox's sshd (on the guest's 127.0.0.1:22 only) through
# `sbx ssh-proxy` (sbxd's TCP WebSocket and the agent's connect_tcp), with
# the per-user key sbx makes and `sbx new` authorizes (docs/sbx.md, "ssh");
# a password login is refused; `sbx forward` carries a guest server to a
# host port and `sbx forward --reverse` a level-1 server into the guest.
# HOME and XDG_CONFIG_HOME are a folder of the test's (level 1's /root is
# the host's, read-only), so ssh is given the config file sbx installs.
# shellcheck shell=bash
# session.sh and lib.sh set w, sock, code, body, logdir:
# shellcheck disable=SC2154

sh_home=$w/ssh-home
mkdir -p "$sh_home"
sbxs() { HOME=$sh_home XDG_CONFIG_HOME=$sh_home/.config SBX_HOST=unix:$sock "$sbx" "$@"; }
sh_ssh() { HOME=$sh_home SBX_HOST=unix:$sock ssh -F "$sh_home/.ssh/config" -o BatchMode=yes -o ConnectTimeout=120 "$@"; }

body=$(sbxs --json new --cpus 1 --memory 1024 --no-auto-stop --label test=ssh 2>"$logdir/ssh-new.err" | tail -n 1)
sh_id=$(py "b['id']" 2>/dev/null)
[ -n "$sh_id" ] && ok "ssh: sbx new made $sh_id" || bad "ssh: sbx new: $body $(tail -n 3 "$logdir/ssh-new.err")"
check "ssh: sbx new authorized the key (no warning)" "" "$(grep -o '"type":"warning"[^}]*' "$logdir/ssh-new.err" | head -n 1)"
sbxs ssh-config --install >/dev/null 2>&1
check "ssh: ssh-config --install writes a Host *.sbx stanza" 1 "$(grep -c '^Host \*\.sbx' "$sh_home/.ssh/config" 2>/dev/null)"
check "ssh: plain ssh ID.sbx runs a command as root" root "$(sh_ssh "$sh_id.sbx" id -un 2>>"$logdir/ssh.err")"
[ -s "$logdir/ssh.err" ] && echo "ssh: ssh said: $(tail -n 5 "$logdir/ssh.err")"
check "ssh: sshd listens on the guest's loopback only" "127.0.0.1:22" \
  "$(sh_ssh "$sh_id.sbx" "ss -Hltn | awk '\$4 ~ /:22\$/ { print \$4 }'" 2>/dev/null | xargs)"
check "ssh: sbx ssh ID -- CMD" "$(printf %s "$sh_id" | tr _ -)" "$(sbxs ssh "$sh_id" -- hostname 2>/dev/null)"
check "ssh: a password login is refused" refused \
  "$(sh_ssh -o PubkeyAuthentication=no -o PreferredAuthentications=password,keyboard-interactive "$sh_id.sbx" true \
     >/dev/null 2>&1 && echo admitted || echo refused)"

head -c 10M /dev/urandom >"$w/ssh-blob"
HOME=$sh_home SBX_HOST=unix:$sock scp -F "$sh_home/.ssh/config" -o BatchMode=yes -q "$w/ssh-blob" "$sh_id.sbx:/root/blob" 2>>"$logdir/ssh.err"
check "ssh: scp copies 10 MiB in" "$(sha256sum <"$w/ssh-blob" | cut -d' ' -f1)" \
  "$(sh_ssh "$sh_id.sbx" 'sha256sum </root/blob' 2>/dev/null | cut -d' ' -f1)"
mkdir -p "$w/ssh-tree/a/b" && echo one >"$w/ssh-tree/a/one" && echo two >"$w/ssh-tree/a/b/two"
HOME=$sh_home SBX_HOST=unix:$sock rsync -a -e "ssh -F $sh_home/.ssh/config -o BatchMode=yes" \
  "$w/ssh-tree/" "$sh_id.sbx:/root/tree/" 2>>"$logdir/ssh.err"
check "ssh: rsync -e ssh copies a tree" "one two" "$(sh_ssh "$sh_id.sbx" 'cat /root/tree/a/one /root/tree/a/b/two' 2>/dev/null | xargs)"
rm -rf "$w/ssh-blob" "$w/ssh-tree"

# sbx forward: a guest server (on its loopback) at a level-1 port.
agent "$sh_id" exec --detach --shell 'cd /tmp && echo hello through forward >index.html && exec python3 -m http.server 8000 --bind 127.0.0.1' \
  >/dev/null 2>&1
# A simple command in the background, so that $! is sbx itself (not a
# subshell running a function, which would take the SIGINT and ignore it).
HOME=$sh_home XDG_CONFIG_HOME=$sh_home/.config SBX_HOST=unix:$sock "$sbx" forward "$sh_id" 18000:8000 \
  >"$logdir/forward.out" 2>&1 &
sh_fw=$!
sh_forwarded() { curl -sf --max-time 10 http://127.0.0.1:18000/ >/dev/null 2>&1; }
wait_until 120 "sbx forward 18000:8000" sh_forwarded
check "ssh: sbx forward carries the guest's server to a level-1 port" "hello through forward" \
  "$(curl -sS --max-time 20 http://127.0.0.1:18000/ 2>&1)"
kill -INT "$sh_fw"
sh_gone() { ! kill -0 "$1" 2>/dev/null; }
wait_until 60 "sbx forward to end on SIGINT" sh_gone "$sh_fw" || kill -9 "$sh_fw"
wait "$sh_fw"
check "ssh: sbx forward ends 0 on Ctrl-C" 0 "$?"

# sbx forward --reverse: a level-1 server inside the guest.
mkdir -p "$w/rev" && echo hello from level 1 >"$w/rev/index.html"
(cd "$w/rev" && exec /usr/bin/python3 -m http.server 19000 --bind 127.0.0.1) >/dev/null 2>&1 &
sh_srv=$!
HOME=$sh_home XDG_CONFIG_HOME=$sh_home/.config SBX_HOST=unix:$sock "$sbx" forward --reverse "$sh_id" 19001:19000 \
  >"$logdir/reverse.out" 2>&1 &
sh_rv=$!
sh_reversed() { agent "$sh_id" exec -- curl -sf --max-time 10 http://127.0.0.1:19001/ >/dev/null 2>&1; }
wait_until 120 "sbx forward --reverse 19001:19000" sh_reversed
check "ssh: sbx forward --reverse carries a level-1 server into the guest" "hello from level 1" \
  "$(agent "$sh_id" exec -- curl -sS --max-time 20 http://127.0.0.1:19001/ 2>&1)"
kill -INT "$sh_rv"
wait_until 60 "sbx forward --reverse to end on SIGINT" sh_gone "$sh_rv" || kill -9 "$sh_rv"
wait "$sh_rv"
check "ssh: sbx forward --reverse ends 0 on Ctrl-C" 0 "$?"
kill "$sh_srv" 2>/dev/null; wait "$sh_srv" 2>/dev/null

api DELETE "/v1/sandboxes/$sh_id"
check "ssh: delete" 200 "$code"
