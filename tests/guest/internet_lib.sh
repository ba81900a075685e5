# shellcheck shell=bash
# The sandboxes' "internet" for guest tests and the main job, all inside
# level 1 (sourced; needs $w, a scratch directory).
# shellcheck disable=SC2154,SC2034,SC2015  # $w is the caller's; sbxd_net_flags is for it
# sbxd_internet: "the internet" for the sandboxes, all inside level 1
# (docs/network.md, "Testing"): a network namespace joined to level 1 by
# a veth, level 1's default route through it, and in it HTTP servers on a
# public-looking address (TEST-NET-2, RFC 5737) on ports 80 and 25 and on
# a private one, and a DNS server (dnsmasq) that answers public.test with
# the public address and rebind.test with the private one; on level 1
# itself, a server on every address (the gateways' too). Sets inet_* and
# the flags to start sbxd with (sbxd_net_flags); removed at exit by
# sbxd_internet_down. Before it, sbxd_net_flags is --network off.
sbxd_net_flags=(--network off)
# the uplink is not named sbx*: that prefix is the sandboxes' (docs/network.md)
inet_pids=() inet_uplink=inet-up inet_uplink_address=198.51.100.1
inet_public=198.51.100.10 inet_private=10.99.0.10 inet_host_port=8099
# sbxd_internet [DIR]: the servers' files and logs in DIR/internet (default $w).
sbxd_internet() {
  inet_dir=${1:-$w}/internet
  mkdir -p "$inet_dir"/{public,private,smtp,host}
  echo "hello from the internet" >"$inet_dir/public/index.html"
  echo "hello from a private address" >"$inet_dir/private/index.html"
  echo "smtp" >"$inet_dir/smtp/index.html"
  echo "hello from level 1" >"$inet_dir/host/index.html"
  # The namespace is held by a process, not named with `ip netns add`:
  # level 1's /run is the host's, read-only.
  unshare --net sleep infinity &
  inet_ns_pid=$!
  inet_in() { nsenter -t "$inet_ns_pid" -n "$@"; }
  # until unshare has made the namespace, the PID names ours
  local tries=0
  while [ "$(readlink "/proc/$inet_ns_pid/ns/net")" = "$(readlink /proc/self/ns/net)" ]; do
    tries=$((tries + 1))
    [ "$tries" -le 100 ] || { echo "FAIL: no network namespace for the test's internet"; exit 1; }
    sleep 0.1
  done
  # Level 1's own loopback (its init leaves it down): the host's
  # addresses, the gateways' among them, are reached through it.
  ip link set lo up
  ip link add "$inet_uplink" type veth peer name eth0 netns "$inet_ns_pid" &&
    ip addr add "$inet_uplink_address/24" dev "$inet_uplink" && ip link set "$inet_uplink" up &&
    inet_in ip addr add "$inet_public/24" dev eth0 &&
    inet_in ip addr add "$inet_private/24" dev eth0 &&
    inet_in ip link set eth0 up && inet_in ip link set lo up &&
    ip route add default via "$inet_public" dev "$inet_uplink" &&
    ip route add "${inet_private%.*}.0/24" via "$inet_public" dev "$inet_uplink" ||
    { echo "FAIL: setting up the test's internet"; exit 1; }
  # One Python per namespace (it starts slowly under the harness), a
  # server per DIR,ADDRESS,PORT, each logging its requests to DIR.log.
  local serve='
import functools, http.server, sys, threading
for spec in sys.argv[1:]:
    root, address, port = spec.split(",")
    log = open(root + ".log", "a", buffering=1)
    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, fmt, *args, log=log):
            log.write("%s %s\n" % (self.client_address[0], fmt % args))
    server = http.server.ThreadingHTTPServer((address, int(port)), functools.partial(Handler, directory=root))
    threading.Thread(target=server.serve_forever, daemon=True).start()
threading.Event().wait()'
  inet_in /usr/bin/python3 -c "$serve" "$inet_dir/public,$inet_public,80" "$inet_dir/private,$inet_private,80" \
    "$inet_dir/smtp,$inet_public,25" >/dev/null 2>"$inet_dir/servers.log" &
  inet_pids+=($!)
  /usr/bin/python3 -c "$serve" "$inet_dir/host,0.0.0.0,$inet_host_port" >/dev/null 2>>"$inet_dir/servers.log" &
  inet_pids+=($!)
  inet_in /usr/sbin/dnsmasq --keep-in-foreground --conf-file=/dev/null --no-resolv --no-hosts \
    --listen-address="$inet_public" --bind-interfaces --pid-file="$inet_dir/dns.pid" \
    --address=/public.test/"$inet_public" --address=/rebind.test/"$inet_private" 2>"$inet_dir/dns.log" &
  inet_pids+=($!)
  # Python starts slowly under the harness: every server answers first.
  local url
  for url in "http://$inet_public/" "http://$inet_private/" "http://$inet_public:25/" "http://127.0.0.1:$inet_host_port/"; do
    tries=0
    until curl -s --max-time 2 -o /dev/null "$url"; do
      tries=$((tries + 1))
      [ "$tries" -le 120 ] || { echo "FAIL: the test's internet: no answer from $url"; exit 1; }
      sleep 0.5
    done
  done
  # The public address is a documentation one (RFC 5737), which dnsmasq's
  # rebinding check refuses like a private one: public.test is let through.
  sbxd_net_flags=(--uplink "$inet_uplink" --dns-upstream "$inet_public" --dns-rebind-ok public.test)
}
# Everything in the namespace, then the namespace (its end of the veth
# goes with it, and so does level 1's).
sbxd_internet_down() {
  [ -n "${inet_ns_pid:-}" ] || return 0
  kill "${inet_pids[@]}" "$inet_ns_pid" 2>/dev/null
  ip link del "$inet_uplink" 2>/dev/null
  return 0
}
