# sbxd part "forward_tcp" (sourced by session.sh, sbxd running): `sbx
# forward` and `sbx forward --reverse` (docs/sbx.md, "forward") carrying
# protocols that are not HTTP, with real clients and servers at both ends.
#  - iperf3 (Debian's, copied into the sandbox with `sbx scp` as bench/net
#    does): a one-off server on the guest's 127.0.0.1, the client on level
#    1 through `sbx forward`, four streams at once and then the reverse
#    direction (-R, the guest sends); each end writes its JSON report,
#    and the bytes the server counts itself are those the client got back
#    over iperf3's control connection, through the same forward.
#  - OpenSSH: the guest's sshd through a plain `sbx forward` of port 22
#    (not sbx ssh-proxy), the real ssh client with the key `sbx new`
#    authorized; 4 MiB in and back, byte for byte (sha256).
#  - `sbx forward --reverse`: a level-1 iperf3 server (loopback only) in
#    the guest at a port of its own; the guest's iperf3 client sends to it
#    over two streams, the server's own report matches the client's.
# Each forward ends 0 on Ctrl-C, but the last reverse one, which ends with
# an error when its sandbox is deleted. Every run is bounded (-t 3 or a
# byte count, under timeout).
# shellcheck shell=bash
# session.sh and lib.sh set w, sock, code, body, logdir, sbx:
# shellcheck disable=SC2154

ft_home=$w/forward-tcp-home
mkdir -p "$ft_home"
ft_sbx() { HOME=$ft_home XDG_CONFIG_HOME=$ft_home/.config SBX_HOST=unix:$sock "$sbx" "$@"; }
ft_gone() { ! kill -0 "$1" 2>/dev/null; }
# ft_forwarding FILE: sbx forward's "forwarding" line is in FILE (it
# listens, or for --reverse the guest listens).
ft_forwarding() { grep -q '"type":"forwarding"' "$1" 2>/dev/null; }
# ft_json FILE EXPR: EXPR over the JSON in FILE as j ("?" when it does not parse).
ft_json() { /usr/bin/python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1" 2>/dev/null || echo '?'; }
# ft_listens PORT: something in the guest listens on 127.0.0.1:PORT.
ft_listens() { agent "$ft" exec -- sh -c "ss -Hltn | awk '\$4 == \"127.0.0.1:$1\"' | grep -q ." 2>/dev/null; }
# ft_stop PID WHAT: Ctrl-C to a forward, which ends 0.
ft_stop() {
  kill -INT "$1"
  wait_until 60 "$2 to end on SIGINT" ft_gone "$1" || kill -9 "$1"
  wait "$1"
  check "forward_tcp: $2 ends 0 on Ctrl-C" 0 "$?"
}

body=$(ft_sbx --json new --cpus 1 --memory 1024 --no-auto-stop --label test=forward_tcp 2>"$logdir/forward_tcp-new.err" | tail -n 1)
ft=$(py "b['id']" 2>/dev/null)
[ -n "$ft" ] && ok "forward_tcp: sbx new made $ft" || bad "forward_tcp: sbx new: $body $(tail -n 3 "$logdir/forward_tcp-new.err")"

if [ -n "$ft" ]; then
  # Debian's iperf3 and the libraries the guest's glibc would not find (the
  # guest is Debian 12 too), beside it, as bench/net_session.sh does.
  agent "$ft" exec -- mkdir -p /root/ft >/dev/null 2>&1
  ft_libs=$(ldd /usr/bin/iperf3 | awk '$3 ~ /^\// { print $3 }' | grep -Ev '/(libc|libm|libdl|libpthread|librt)\.so')
  for f in /usr/bin/iperf3 $ft_libs; do
    timeout 300 env HOME="$ft_home" XDG_CONFIG_HOME="$ft_home/.config" SBX_HOST="unix:$sock" "$sbx" scp "$f" "$ft:/root/ft/" \
      >/dev/null 2>>"$logdir/forward_tcp-scp.err" || bad "forward_tcp: sbx scp $f"
  done
  agent "$ft" exec -- chmod +x /root/ft/iperf3 >/dev/null 2>&1
  ft_iperf="env LD_LIBRARY_PATH=/root/ft /root/ft/iperf3"
  check "forward_tcp: Debian's iperf3 runs in the guest" "$(iperf3 --version | head -n 1 | cut -d' ' -f1,2)" \
    "$(agent "$ft" exec -- sh -c "$ft_iperf --version" 2>/dev/null | head -n 1 | cut -d' ' -f1,2)"

  # 1. sbx forward: level-1 client -> the guest's iperf3 server, 4 streams.
  HOME=$ft_home XDG_CONFIG_HOME=$ft_home/.config SBX_HOST=unix:$sock "$sbx" forward "$ft" 15201:5201 \
    >"$logdir/forward_tcp-fw.out" 2>&1 &
  ft_fw=$!
  wait_until 120 "sbx forward 15201:5201" ft_forwarding "$logdir/forward_tcp-fw.out"
  check "forward_tcp: sbx forward listens on 127.0.0.1:15201" "127.0.0.1:15201" \
    "$(sed -n 's/.*"local":"\([^"]*\)".*/\1/p' "$logdir/forward_tcp-fw.out" | head -n 1)"
  # ft_iperf_run NAME ARGS: a one-off server in the guest (its report in
  # /tmp/NAME.json there, then $w/NAME-server.json), the level-1 client
  # through the forward (its report in $w/NAME-client.json).
  ft_iperf_run() {
    local name=$1; shift
    agent "$ft" exec -- rm -f "/tmp/$name.json" >/dev/null 2>&1
    agent "$ft" exec --detach --shell "exec $ft_iperf -s -1 -B 127.0.0.1 -p 5201 -J --logfile /tmp/$name.json" >/dev/null 2>&1
    # not a connect to test it: a one-off server would take it for its test
    wait_until 120 "the guest's iperf3 server for $name" ft_listens 5201
    timeout 180 iperf3 -c 127.0.0.1 -p 15201 --connect-timeout 60000 -J "$@" >"$w/$name-client.json" 2>"$w/$name-client.err"
    echo "$?" >"$w/$name-client.rc"
    # its report is whole once the test has ended
    ft_report_whole() { agent "$ft" exec -- python3 -c "import json; json.load(open('/tmp/$1.json'))['end']" >/dev/null 2>&1; }
    wait_until 60 "the guest's iperf3 server's report ($name)" ft_report_whole "$name"
    agent "$ft" exec -- cat "/tmp/$name.json" >"$w/$name-server.json" 2>/dev/null
  }
  t=$(now)
  ft_iperf_run ft-send -t 3 -P 4
  echo "SBXD-TIME: forward_tcp iperf3 through sbx forward $(elapsed "$t") s"
  check "forward_tcp: iperf3 -P 4 through sbx forward ends 0" "0 none" \
    "$(cat "$w/ft-send-client.rc") $(ft_json "$w/ft-send-client.json" "j.get('error', 'none')")"
  ft_sent=$(ft_json "$w/ft-send-client.json" "j['end']['sum_sent']['bytes']")
  ft_got=$(ft_json "$w/ft-send-server.json" "j['end']['sum_received']['bytes']")
  echo "forward_tcp: iperf3 to the guest: the client sent $ft_sent bytes, the server received $ft_got" \
    "($(ft_json "$w/ft-send-client.json" "round(j['end']['sum_received']['bits_per_second'] / 8e6, 2)") MB/s)"
  check "forward_tcp: the guest's server counted four streams from the forward's guest end" "4 127.0.0.1" \
    "$(ft_json "$w/ft-send-server.json" "str(len(j['end']['streams'])) + ' ' + j['start']['connected'][0]['remote_host']")"
  check "forward_tcp: the bytes the server received are what the client was told, over the control connection" \
    "$ft_got" "$(ft_json "$w/ft-send-client.json" "j['end']['sum_received']['bytes']")"
  check "forward_tcp: ... at least 1 MiB of them, no more than the client sent" yes \
    "$([ "${ft_got:-0}" -ge 1048576 ] 2>/dev/null && [ "$ft_got" -le "${ft_sent:-0}" ] && echo yes)"
  check "forward_tcp: none of the five connections failed" 0 "$(grep -c connection_failed "$logdir/forward_tcp-fw.out")"

  # The other way: the guest's server sends (-R). (At its end the client
  # closes its data stream with bytes still coming: its reset reaches the
  # guest through the forward, which reports that connection_failed.)
  ft_iperf_run ft-recv -t 3 -R
  check "forward_tcp: iperf3 -R through sbx forward ends 0" "0 none" \
    "$(cat "$w/ft-recv-client.rc") $(ft_json "$w/ft-recv-client.json" "j.get('error', 'none')")"
  ft_sent=$(ft_json "$w/ft-recv-server.json" "j['end']['sum_sent']['bytes']")
  ft_got=$(ft_json "$w/ft-recv-client.json" "j['end']['sum_received']['bytes']")
  echo "forward_tcp: iperf3 from the guest: the server sent $ft_sent bytes, the client received $ft_got"
  check "forward_tcp: -R: the client received at least 1 MiB, no more than the guest's server sent" yes \
    "$([ "${ft_got:-0}" -ge 1048576 ] 2>/dev/null && [ "$ft_got" -le "${ft_sent:-0}" ] && echo yes)"
  check "forward_tcp: -R: the client was told what the server itself reported sending" "$ft_sent" \
    "$(ft_json "$w/ft-recv-client.json" "j['end']['sum_sent']['bytes']")"
  echo "forward_tcp: sbx forward after -R: $(grep connection_failed "$logdir/forward_tcp-fw.out" | tr '\n' ' ')"
  ft_stop "$ft_fw" "sbx forward (iperf3)"

  # 2. OpenSSH through a plain forward of the guest's port 22.
  HOME=$ft_home XDG_CONFIG_HOME=$ft_home/.config SBX_HOST=unix:$sock "$sbx" forward "$ft" 0:22 \
    >"$logdir/forward_tcp-ssh.out" 2>&1 &
  ft_fw=$!
  wait_until 120 "sbx forward 0:22" ft_forwarding "$logdir/forward_tcp-ssh.out"
  ft_port=$(sed -n 's/.*"localPort":\([0-9]*\).*/\1/p' "$logdir/forward_tcp-ssh.out" | head -n 1)
  check "forward_tcp: sbx forward 0:22 took a free port" yes "$([ "${ft_port:-0}" -gt 0 ] 2>/dev/null && echo yes)"
  ft_ssh() {
    timeout 300 ssh -p "$ft_port" -i "$ft_home/.config/sandboxer/ssh/id_ed25519" -o IdentitiesOnly=yes \
      -o BatchMode=yes -o ConnectTimeout=120 -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
      -o LogLevel=ERROR root@127.0.0.1 "$@"
  }
  head -c 4M /dev/urandom >"$w/ft-blob"
  check "forward_tcp: ssh through sbx forward: 4 MiB into the guest, its sha256 there" \
    "$(sha256sum <"$w/ft-blob" | cut -d' ' -f1)" \
    "$(ft_ssh 'cat >/root/ft-blob && sha256sum </root/ft-blob' <"$w/ft-blob" 2>>"$logdir/forward_tcp-ssh.err" | cut -d' ' -f1)"
  check "forward_tcp: ... and back out, byte for byte" "$(sha256sum <"$w/ft-blob" | cut -d' ' -f1)" \
    "$(ft_ssh 'cat /root/ft-blob' 2>>"$logdir/forward_tcp-ssh.err" </dev/null | sha256sum | cut -d' ' -f1)"
  rm -f "$w/ft-blob"
  ft_stop "$ft_fw" "sbx forward (ssh)"

  # 3. sbx forward --reverse: the guest's client -> a level-1 iperf3 server.
  rm -f "$w/ft-rev-server.json"
  timeout 300 iperf3 -s -1 -B 127.0.0.1 -p 15301 -J --logfile "$w/ft-rev-server.json" &
  ft_srv=$!
  HOME=$ft_home XDG_CONFIG_HOME=$ft_home/.config SBX_HOST=unix:$sock "$sbx" forward --reverse "$ft" 5301:15301 \
    >"$logdir/forward_tcp-rev.out" 2>&1 &
  ft_rv=$!
  wait_until 120 "sbx forward --reverse 5301:15301" ft_forwarding "$logdir/forward_tcp-rev.out"
  check "forward_tcp: the guest listens on 127.0.0.1:5301 for the reverse forward" 0 "$(ft_listens 5301; echo $?)"
  agent "$ft" exec -- timeout 180 sh -c "$ft_iperf -c 127.0.0.1 -p 5301 --connect-timeout 60000 -t 3 -P 2 -J" \
    >"$w/ft-rev-client.json" 2>/dev/null
  check "forward_tcp: the guest's iperf3 through sbx forward --reverse" none \
    "$(ft_json "$w/ft-rev-client.json" "j.get('error', 'none')")"
  ft_gone_srv() { ft_gone "$ft_srv"; }
  wait_until 60 "level 1's one-off iperf3 server to end" ft_gone_srv
  ft_sent=$(ft_json "$w/ft-rev-client.json" "j['end']['sum_sent']['bytes']")
  ft_got=$(ft_json "$w/ft-rev-server.json" "j['end']['sum_received']['bytes']")
  echo "forward_tcp: iperf3 from the guest to level 1: the client sent $ft_sent bytes, the server received $ft_got"
  check "forward_tcp: --reverse: level 1's server counted two streams from loopback" "2 127.0.0.1" \
    "$(ft_json "$w/ft-rev-server.json" "str(len(j['end']['streams'])) + ' ' + j['start']['connected'][0]['remote_host']")"
  check "forward_tcp: --reverse: the bytes the host's server received are what the guest's client was told" \
    "$ft_got" "$(ft_json "$w/ft-rev-client.json" "j['end']['sum_received']['bytes']")"
  check "forward_tcp: --reverse: at least 1 MiB, no more than the client sent" yes \
    "$([ "${ft_got:-0}" -ge 1048576 ] 2>/dev/null && [ "$ft_got" -le "${ft_sent:-0}" ] && echo yes)"
  kill "$ft_srv" 2>/dev/null; wait "$ft_srv" 2>/dev/null

  # Deleting the sandbox ends the reverse forward, with an error.
  api DELETE "/v1/sandboxes/$ft"
  check "forward_tcp: delete" 200 "$code"
  wait_until 120 "sbx forward --reverse to end when its sandbox goes" ft_gone "$ft_rv" || kill -9 "$ft_rv"
  wait "$ft_rv"
  ft_rc=$?
  [ "$ft_rc" -ne 0 ] && [ "$ft_rc" -ne 137 ] && ok "forward_tcp: sbx forward --reverse ends $ft_rc when its sandbox is deleted" ||
    bad "forward_tcp: sbx forward --reverse after the delete: exit $ft_rc; $(tail -n 2 "$logdir/forward_tcp-rev.out")"
fi
rm -rf "$ft_home"
