# sbxd part "network" (sourced by session.sh, sbxd running on the test's
# "internet", lib.sh sbxd_internet): a sandbox's network end to end
# (docs/network.md). Its guest has the address, route and DNS of its /30;
# it reaches a public server through NAT (the server sees the uplink's
# address) and resolves a public name through the gateway; it does not
# reach a private address, TCP port 25, the host (but for DNS) or another
# sandbox, and a public name that answers with a private address is not
# answered. Each refusal has its control: the same thing works from level
# 1 itself. The egress policy changes while the sandbox runs: deny-all,
# an allow list without and with the server, back to the internet; the
# sandbox's own key may not change it. A memory fork's child gets its own address and reaches the
# server too; a stop and resume keep the address; deleting takes the tap.
# The host's other addresses (level 1's uplink address, another
# sandbox's gateway, and addresses the part puts on an interface of
# level 1, a public-looking and a private one) are out of reach, each
# with its control. The egress table (nft -j list table inet sbxd) across
# an sbxd restart with the sandbox running on an allow list: while no
# sbxd runs the table stays and filters; the next sbxd makes the table
# anew with the same rules and the sandbox's set elements, and the policy
# holds (the listed server, not an unlisted public one, not port 25 or a
# private address, DNS). An sbxd that fails to start before it adopts
# the sandbox leaves the table in place: the guest reaches neither the
# host nor the internet until the next sbxd adopts it. `sbx rm` takes
# every element of the removed sandboxes out of the table.
# shellcheck shell=bash
# session.sh and lib.sh set w, sock, code, body, inet_*:
# shellcheck disable=SC2154

# nw_guest ID CMD: CMD run by sh in sandbox ID, its stdout (stderr dropped).
nw_guest() { agent "$1" exec -- sh -c "$2" 2>/dev/null; }
# nw_fetch ID URL: "BODY ok" or "no" from a curl in sandbox ID, 8 s at most;
# l1_fetch URL: the same from level 1 itself (the controls).
nw_fetch() { nw_guest "$1" "curl -sS --max-time 8 $2 && echo ' ok' || echo no" | tr -d '\n'; }
l1_fetch() { { curl -sS --max-time 8 "$1" && echo ' ok' || echo no; } 2>/dev/null | tr -d '\n'; }
# nw_nft WHAT [TAP]: the egress table as nft lists it (docs/network.md,
# "Egress policy"): "handle" (the table's, new each time it is made),
# "rules" (how many), or "elements": the set elements that name TAP, one
# SET:ELEMENT a line, sorted (a concatenation as a.b, a prefix as a/n).
nw_nft_cmd=$(command -v nft || echo /usr/sbin/nft)
nw_nft() {
  "$nw_nft_cmd" -j list table inet sbxd 2>/dev/null | /usr/bin/python3 -c '
import json, sys
what, tap = sys.argv[1], (sys.argv[2:] or [""])[0]
def flat(e):
    if isinstance(e, dict):
        if "concat" in e: return ".".join(flat(x) for x in e["concat"])
        if "prefix" in e: return "%s/%s" % (flat(e["prefix"]["addr"]), e["prefix"]["len"])
        if "range" in e: return "-".join(flat(x) for x in e["range"])
        if "elem" in e: return flat(e["elem"]["val"])
        return json.dumps(e, sort_keys=True)
    return str(e)
objects = json.load(sys.stdin)["nftables"]
if what == "handle":
    print(*[o["table"]["handle"] for o in objects if "table" in o])
elif what == "rules":
    print(sum(1 for o in objects if "rule" in o))
else:
    out = [o["set"]["name"] + ":" + flat(e) for o in objects if "set" in o for e in o["set"].get("elem", [])]
    print("\n".join(sorted(e for e in out if e.split(":", 1)[1].split(".")[0] == tap)))
' "$@"
}

api POST /v1/sandboxes '{"cpus":1,"memoryMib":1024,"noAutoStop":true,"labels":{"test":"network"}}'
check "network: create answers 201" 201 "$code"
nw=$(py "b['sandbox']['id']" 2>/dev/null)
nw_addr=$(py "b['sandbox']['network']['address']" 2>/dev/null)
nw_gw=$(py "b['sandbox']['network']['gateway']" 2>/dev/null)
nw_tap=$(py "b['sandbox']['network']['interface']" 2>/dev/null)
case $nw_addr in 10.231.*/30) ok "network: the sandbox has a /30 from the pool ($nw_addr via $nw_gw on $nw_tap)" ;;
  *) bad "network: no address in the pool: '$nw_addr' ($(py "b['sandbox'].get('network')" 2>/dev/null))" ;; esac
check "network: its tap is up on the host with the gateway address" "$nw_gw" \
  "$(ip -4 -o addr show dev "$nw_tap" 2>/dev/null | awk '{ print $4 }' | cut -d/ -f1)"

check "network: the guest has exactly that address" "$nw_addr" \
  "$(nw_guest "$nw" "ip -4 -o addr show scope global | awk '{ print \$4 }'" | xargs)"
check "network: its default route goes through the gateway" "$nw_gw" \
  "$(nw_guest "$nw" "ip -4 route show default | awk '{ print \$3 }'")"
check "network: its resolver is the gateway" "$nw_gw" \
  "$(nw_guest "$nw" "awk '/^nameserver/ { print \$2 }' /etc/resolv.conf" | head -n 1)"

# Out to the internet, through NAT.
check "network: the guest fetches from a public address" "hello from the internet ok" \
  "$(nw_fetch "$nw" "http://$inet_public/?from-$nw")"
check "network: the server saw the uplink's address (masquerade)" "$inet_uplink_address" \
  "$(grep "from-$nw" "$inet_dir/public.log" | cut -d' ' -f1)"
check "network: the gateway resolves a public name" "$inet_public" \
  "$(nw_guest "$nw" "getent ahostsv4 public.test | awk '{ print \$1; exit }'")"
check "network: and the guest fetches it by name" "hello from the internet ok" \
  "$(nw_fetch "$nw" "http://public.test/")"

# What it must not reach; each with its control from level 1.
check "network: (control) level 1 reaches the private server" "hello from a private address ok" \
  "$(l1_fetch "http://$inet_private/")"
if [ "$(l1_fetch "http://$inet_public/")" != "hello from the internet ok" ]; then
  # the test's internet itself is broken: say how it looks
  echo "network: level 1 does not reach $inet_public; its addresses, routes, listeners and the servers' logs:"
  ip -4 -o addr; ip -4 route; nsenter -t "$inet_ns_pid" -n ip -4 -o addr
  nsenter -t "$inet_ns_pid" -n ss -ltnu 2>&1 | head -20
  tail -n 5 "$inet_dir"/*.log
fi
check "network: the guest does not reach a private address" no "$(nw_fetch "$nw" "http://$inet_private/")"
check "network: (control) level 1 reaches port 25" "smtp ok" \
  "$(l1_fetch "http://$inet_public:25/")"
check "network: the guest does not reach TCP port 25" no "$(nw_fetch "$nw" "http://$inet_public:25/")"
# A refusal comes back at once (a TCP reset: curl's 7, "couldn't
# connect"), not as a wait until curl gives up (28).
check "network: a denied connection is refused at once, not left to time out" 7 \
  "$(nw_guest "$nw" "curl -sS --max-time 8 -o /dev/null http://$inet_private/; echo \$?")"
check "network: (control) the upstream answers rebind.test with a private address" "$inet_private" \
  "$(busybox nslookup rebind.test "$inet_public" 2>/dev/null | awk '/^Address/ { a = $NF } END { print a }')"
check "network: the gateway gives no private answer for a public name" "" \
  "$(nw_guest "$nw" "getent ahostsv4 rebind.test | awk '{ print \$1; exit }'")"
check "network: (control) level 1 serves on the gateway address" "hello from level 1 ok" \
  "$(l1_fetch "http://$nw_gw:$inet_host_port/")"
check "network: the guest reaches nothing on the host but DNS" no \
  "$(nw_fetch "$nw" "http://$nw_gw:$inet_host_port/")"
# The host's other addresses: its uplink's, and two on an interface of
# level 1 made for this (a public-looking one, which only the input chain
# keeps out, and a private one; a veth, as level 1 has no dummy module);
# level 1's server on every address answers on each (the controls).
nw_other=nw-other nw_other_public=192.0.2.77 nw_other_private=172.30.99.77
if ip link add "$nw_other" type veth peer name "$nw_other-p" && ip link set "$nw_other-p" up &&
  ip addr add "$nw_other_public/32" dev "$nw_other" && ip addr add "$nw_other_private/32" dev "$nw_other" &&
  ip link set "$nw_other" up; then :; else
  bad "network: an interface with $nw_other_public and $nw_other_private on level 1"
fi
for nw_a in "$inet_uplink_address" "$nw_other_public" "$nw_other_private"; do
  check "network: (control) level 1 serves on its address $nw_a" "hello from level 1 ok" \
    "$(l1_fetch "http://$nw_a:$inet_host_port/")"
  check "network: the guest does not reach the host's address $nw_a" no \
    "$(nw_fetch "$nw" "http://$nw_a:$inet_host_port/")"
done
ip link del "$nw_other" 2>/dev/null

# Its egress policy (docs/network.md, "Per-sandbox egress"), changed while
# it runs: deny-all, then allow lists that name the public server or not.
body=$(sbxc --json egress "$nw" deny-all 2>&1 | tail -n 1)
check "network: sbx egress deny-all" deny-all "$(py "b['egress']" 2>/dev/null)"
check "network: deny-all: the guest does not reach the public server" no "$(nw_fetch "$nw" "http://$inet_public/")"
check "network: deny-all: not even DNS" "" \
  "$(nw_guest "$nw" "getent ahostsv4 public.test | awk '{ print \$1; exit }'")"
check "network: deny-all: refused at once" 7 \
  "$(nw_guest "$nw" "curl -sS --max-time 8 -o /dev/null http://$inet_public/; echo \$?")"
api POST "/v1/sandboxes/$nw/egress" "{\"egressAllow\":[\"203.0.113.0/24\"]}"
check "network: an allow list that does not name the server" "200 allow-list 203.0.113.0/24" \
  "$code $(py "b['sandbox']['egress'], ','.join(b['sandbox']['egressAllow'])" 2>/dev/null | tr -d "(),'")"
check "network: allow list: DNS through the gateway" "$inet_public" \
  "$(nw_guest "$nw" "getent ahostsv4 public.test | awk '{ print \$1; exit }'")"
check "network: allow list: not the unlisted server" no "$(nw_fetch "$nw" "http://$inet_public/")"
body=$(sbxc --json egress "$nw" "$inet_public/32" 2>&1 | tail -n 1)
check "network: sbx egress NET: an allow list naming it" "$inet_public/32" "$(py "b['egressAllow'][0]" 2>/dev/null)"
check "network: allow list: the listed server" "hello from the internet ok" "$(nw_fetch "$nw" "http://$inet_public/")"
check "network: allow list: still no TCP port 25 on it" no "$(nw_fetch "$nw" "http://$inet_public:25/")"
api POST "/v1/sandboxes/$nw/egress" '{"egressAllow":["10.99.0.0/24"]}'
check "network: an allow list naming a private range is 400" "400 invalid_argument" "$code $(py "b['code']" 2>/dev/null)"
# A sandbox never lifts its own policy: its own key gets 403.
nw_own=$(agent "$nw" exec -- /usr/bin/python3 -c '
import urllib.request, urllib.error
env = dict(l.split("=", 1) for l in open("/etc/sandboxer/env").read().splitlines() if "=" in l and not l.startswith("#"))
req = urllib.request.Request(env["SANDBOXER_API_URL"] + "/v1/sandboxes/" + env["SANDBOXER_ID"] + "/egress",
                             data=b"{\"egress\":\"internet\"}", method="POST",
                             headers={"Authorization": "Bearer " + env["SANDBOXER_TOKEN"], "Content-Type": "application/json"})
try:
    print(urllib.request.urlopen(req, timeout=60).status)
except urllib.error.HTTPError as e:
    print(e.code)
' 2>&1)
check "network: the sandbox's own key cannot change its egress" 403 "$nw_own"
api GET "/v1/sandboxes/$nw"
check "network: ... and it is unchanged" "allow-list" "$(py "b['sandbox']['egress']" 2>/dev/null)"
api POST "/v1/sandboxes/$nw/egress" '{"egress":"internet"}'
check "network: back to the internet" "200 hello from the internet ok" "$code $(nw_fetch "$nw" "http://$inet_public/")"

# The egress table across an sbxd restart, the sandbox running on an allow
# list that names the public server and not a second public address (on
# the internet's namespace for this, with a server of its own).
nw_other_inet=203.0.113.20
mkdir -p "$w/other-inet" && echo "hello from another public address" >"$w/other-inet/index.html"
inet_in ip addr add "$nw_other_inet/24" dev eth0 || bad "network: $nw_other_inet in the internet's namespace"
inet_in /usr/bin/python3 -m http.server 80 --bind "$nw_other_inet" --directory "$w/other-inet" >/dev/null 2>&1 &
nw_other_srv=$!
nw_other_serves() { [ "$(l1_fetch "http://$nw_other_inet/")" = "hello from another public address ok" ]; }
wait_until 120 "the server on $nw_other_inet" nw_other_serves
check "network: (control) level 1 reaches a second public address" 0 "$?"
check "network: (control) so does the guest on the internet policy" "hello from another public address ok" \
  "$(nw_fetch "$nw" "http://$nw_other_inet/")"
body=$(sbxc --json egress "$nw" "$inet_public/32" 2>&1 | tail -n 1)
check "network: an allow list of the public server alone" "$inet_public/32" "$(py "','.join(b['egressAllow'])" 2>/dev/null)"
nw_nft_then=$(nw_nft elements "$nw_tap")
nw_guest_ip=${nw_addr%/*}
check "network: the table holds the sandbox's elements" \
  "allow_only:$nw_tap allowed:$nw_tap.$inet_public gateways:$nw_tap.$nw_gw sources:$nw_tap.$nw_guest_ip" \
  "$(printf '%s\n' "$nw_nft_then" | xargs)"
nw_handle=$(nw_nft handle) nw_rules=$(nw_nft rules)
# nw_policy_holds WHEN: the listed server, not the unlisted one, not port
# 25 of the listed one, not a private address.
nw_policy_holds() {
  check "network: $1: the listed server" "hello from the internet ok" "$(nw_fetch "$nw" "http://$inet_public/")"
  check "network: $1: not the unlisted public address" no "$(nw_fetch "$nw" "http://$nw_other_inet/")"
  check "network: $1: not TCP port 25 of the listed server" no "$(nw_fetch "$nw" "http://$inet_public:25/")"
  check "network: $1: not a private address" no "$(nw_fetch "$nw" "http://$inet_private/")"
}
nw_policy_holds "before the restart"
kill "$sbxd_pid"; wait "$sbxd_pid"
check "network: sbxd ends 0 on SIGTERM with the sandbox running" 0 "$?"
# (the guest is reached through its VMM's socket, not through sbxd)
check "network: with no sbxd the table stays, with the sandbox's elements" "$nw_handle $nw_nft_then" \
  "$(nw_nft handle) $(nw_nft elements "$nw_tap")"
check "network: with no sbxd: the listed server" "hello from the internet ok" "$(nw_fetch "$nw" "http://$inet_public/")"
check "network: with no sbxd: not the unlisted public address" no "$(nw_fetch "$nw" "http://$nw_other_inet/")"
start_sbxd
check "network: the restarted sbxd adopts the sandbox" "1 running VMM(s) adopted" \
  "$(grep -o '[0-9]* running VMM(s) adopted' "$logdir/sbxd.$starts.log")"
nw_handle_now=$(nw_nft handle)
[ -n "$nw_handle_now" ] && [ "$nw_handle_now" != "$nw_handle" ] &&
  ok "network: the restarted sbxd made the table anew (handle $nw_handle, now $nw_handle_now)" ||
  bad "network: the table after the restart: handle '$nw_handle_now' (before: $nw_handle)"
check "network: ... with the same rules" "$nw_rules" "$(nw_nft rules)"
check "network: ... and the sandbox's elements back" "$nw_nft_then" "$(nw_nft elements "$nw_tap")"
nw_policy_holds "after the restart"
check "network: after the restart: DNS through the gateway" "$inet_public" \
  "$(nw_guest "$nw" "getent ahostsv4 public.test | awk '{ print \$1; exit }'")"
check "network: after the restart: still nothing on the host but DNS" no \
  "$(nw_fetch "$nw" "http://$nw_gw:$inet_host_port/")"
api POST "/v1/sandboxes/$nw/egress" '{"egress":"internet"}'
check "network: after the restart the policy changes: back to the internet" \
  "200 hello from another public address ok" "$code $(nw_fetch "$nw" "http://$nw_other_inet/")"
check "network: ... its allow-list elements out of the table" "gateways:$nw_tap.$nw_gw sources:$nw_tap.$nw_guest_ip" \
  "$(nw_nft elements "$nw_tap" | xargs)"
# An sbxd that fails to start before it adopts the sandbox (a certificate
# file it cannot read): the sandbox's tap keeps its address and route, so
# the table that start made stays (docs/network.md, "Lifecycle"), and
# nothing of the guest's gets out or reaches the host until the next sbxd
# adopts it.
kill "$sbxd_pid"; wait "$sbxd_pid"
${sbxd_cpus:+taskset -c "$sbxd_cpus"} "$sbxd" --state-dir "$state" --images "$w/images" --default-image slim --vmm "$vmm" \
  --listen "unix:$w/failed.sock" "${sbxd_net_flags[@]}" --proxy-cert "$w/no-such.pem" --proxy-key "$w/no-such.key" \
  2>"$logdir/sbxd.failed.log"
nw_rc=$?
check "network: an sbxd that cannot read --proxy-cert ends 1 at start" "1 1" \
  "$nw_rc $(grep -c 'no-such.pem: cannot read it' "$logdir/sbxd.failed.log")"
check "network: ... the sandbox's tap keeps its gateway address" "$nw_gw" \
  "$(ip -4 -o addr show dev "$nw_tap" 2>/dev/null | awk '{ print $4 }' | cut -d/ -f1)"
check "network: ... and the egress table stays" yes "$([ -n "$(nw_nft handle)" ] && echo yes)"
check "network: after it, the guest does not reach the host" no "$(nw_fetch "$nw" "http://$nw_gw:$inet_host_port/")"
check "network: ... nor the host's uplink address" no "$(nw_fetch "$nw" "http://$inet_uplink_address:$inet_host_port/")"
check "network: ... nor the internet" no "$(nw_fetch "$nw" "http://$inet_public/")"
start_sbxd
check "network: the next sbxd adopts the sandbox" "1 running VMM(s) adopted" \
  "$(grep -o '[0-9]* running VMM(s) adopted' "$logdir/sbxd.$starts.log")"
check "network: ... and its guest reaches the internet again" "hello from the internet ok" \
  "$(nw_fetch "$nw" "http://$inet_public/")"
# An sbxd that fails to start after it adopted the sandbox (a listening
# socket it cannot make): it leaves the network as a clean exit does, the
# tap, the sandbox's elements and its policy, for the next sbxd.
nw_nft_then=$(nw_nft elements "$nw_tap")
kill "$sbxd_pid"; wait "$sbxd_pid"
${sbxd_cpus:+taskset -c "$sbxd_cpus"} "$sbxd" --state-dir "$state" --images "$w/images" --default-image slim --vmm "$vmm" \
  --listen "unix:/proc/sbx-no-such-dir/sbxd.sock" "${sbxd_net_flags[@]}" 2>"$logdir/sbxd.failed-late.log"
nw_rc=$?
check "network: an sbxd that cannot make its socket ends 1 after adopting the sandbox" "1 1" \
  "$nw_rc $(grep -c '1 running VMM(s) adopted' "$logdir/sbxd.failed-late.log")"
check "network: ... the sandbox's tap keeps its gateway address" "$nw_gw" \
  "$(ip -4 -o addr show dev "$nw_tap" 2>/dev/null | awk '{ print $4 }' | cut -d/ -f1)"
check "network: ... and the table its elements" "$nw_nft_then" "$(nw_nft elements "$nw_tap")"
check "network: ... so its guest still reaches the internet" "hello from the internet ok" \
  "$(nw_fetch "$nw" "http://$inet_public/")"
check "network: ... and still not the host" no "$(nw_fetch "$nw" "http://$nw_gw:$inet_host_port/")"
start_sbxd
check "network: the sbxd after it adopts the sandbox" "1 running VMM(s) adopted" \
  "$(grep -o '[0-9]* running VMM(s) adopted' "$logdir/sbxd.$starts.log")"
kill "$nw_other_srv" 2>/dev/null; wait "$nw_other_srv" 2>/dev/null
inet_in ip addr del "$nw_other_inet/24" dev eth0 2>/dev/null

# A memory fork: the child has its own address and reaches out too.
api POST "/v1/sandboxes/$nw/fork" '{"count":1}'
check "network: fork answers 201" 201 "$code"
nw_child=$(py "b['sandboxes'][0]['id']" 2>/dev/null)
nw_child_addr=$(py "b['sandboxes'][0]['network']['address']" 2>/dev/null)
[ -n "$nw_child_addr" ] && [ "$nw_child_addr" != "$nw_addr" ] && ok "network: the child has its own address ($nw_child_addr)" ||
  bad "network: the child's address '$nw_child_addr' (the parent's: $nw_addr)"
check "network: the child's guest has only its own address" "$nw_child_addr" \
  "$(nw_guest "$nw_child" "ip -4 -o addr show scope global | awk '{ print \$4 }'" | xargs)"
check "network: the child fetches from the internet" "hello from the internet ok" \
  "$(nw_fetch "$nw_child" "http://$inet_public/")"
check "network: so does the parent, after the fork" "hello from the internet ok" \
  "$(nw_fetch "$nw" "http://$inet_public/")"
# Sandboxes do not reach each other; the host reaches both.
agent "$nw_child" exec --detach --shell 'cd /tmp && echo hello from the child >index.html && exec python3 -m http.server 8000' \
  >/dev/null 2>&1
nw_child_ip=${nw_child_addr%/*}
nw_child_serves() { curl -sS --max-time 5 "http://$nw_child_ip:8000/" >/dev/null 2>&1; }
wait_until 120 "the child's server, from level 1" nw_child_serves
check "network: (control) level 1 reaches the child's server" 0 "$?"
check "network: the parent does not reach the child" no "$(nw_fetch "$nw" "http://$nw_child_ip:8000/")"
api GET "/v1/sandboxes/$nw_child"
nw_child_gw=$(py "b['sandbox']['network']['gateway']" 2>/dev/null)
check "network: (control) level 1 serves on the child's gateway" "hello from level 1 ok" \
  "$(l1_fetch "http://$nw_child_gw:$inet_host_port/")"
check "network: the parent does not reach the host at the child's gateway" no \
  "$(nw_fetch "$nw" "http://$nw_child_gw:$inet_host_port/")"

# Stop and resume keep the address; delete takes the tap.
echo "network: the largest files in /tmp before the stop: $(find /tmp -xdev -type f -size +20M -exec du -m {} + 2>/dev/null | sort -rn | head -n 8 | tr '\n' ';')"
api POST "/v1/sandboxes/$nw/stop" '{}'
check "network: stop" 200 "$code"
[ "$code" = 200 ] || echo "network: the largest files in /tmp after it: $(find /tmp -xdev -type f -size +20M -exec du -m {} + 2>/dev/null | sort -rn | head -n 8 | tr '\n' ';')"
api POST "/v1/sandboxes/$nw/resume" '{}'
check "network: resume" 200 "$code"
check "network: after the resume the guest has the same address" "$nw_addr" \
  "$(nw_guest "$nw" "ip -4 -o addr show scope global | awk '{ print \$4 }'" | xargs)"
check "network: and reaches the internet" "hello from the internet ok" "$(nw_fetch "$nw" "http://$inet_public/")"
api GET "/v1/sandboxes/$nw_child"
nw_child_tap=$(py "b['sandbox']['network']['interface']" 2>/dev/null)
nw_child_ip=${nw_child_addr%/*}
check "network: the table holds both sandboxes' elements" \
  "gateways:$nw_tap.$nw_gw sources:$nw_tap.$nw_guest_ip gateways:$nw_child_tap.$nw_child_gw sources:$nw_child_tap.$nw_child_ip" \
  "$(nw_nft elements "$nw_tap" | xargs) $(nw_nft elements "$nw_child_tap" | xargs)"
nw_rules=$(nw_nft rules)
body=$(sbxc --json rm "$nw" "$nw_child" 2>&1 | tail -n 1)
check "network: sbx rm of both" "$nw $nw_child" "$(py "' '.join(b['deleted'])" 2>/dev/null)"
for nw_s in "$nw" "$nw_child"; do
  api GET "/v1/sandboxes/$nw_s"
  check "network: $nw_s is gone" 404 "$code"
done
check "network: no tap is left" "" "$(ip -o link show "$nw_tap" 2>/dev/null; ip -o link show "$nw_child_tap" 2>/dev/null)"
check "network: no element of theirs is left in the table" "" \
  "$(nw_nft elements "$nw_tap"; nw_nft elements "$nw_child_tap")"
check "network: no address of theirs either" "" \
  "$("$nw_nft_cmd" list table inet sbxd 2>/dev/null | grep -E "($nw_guest_ip|$nw_gw|$nw_child_ip|$nw_child_gw)([^0-9]|\$)")"
check "network: the table's rules are the same (they name no sandbox)" "$nw_rules" "$(nw_nft rules)"
