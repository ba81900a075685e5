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
# shellcheck shell=bash
# session.sh and lib.sh set w, sock, code, body, inet_*:
# shellcheck disable=SC2154

# nw_guest ID CMD: CMD run by sh in sandbox ID, its stdout (stderr dropped).
nw_guest() { agent "$1" exec -- sh -c "$2" 2>/dev/null; }
# nw_fetch ID URL: "BODY ok" or "no" from a curl in sandbox ID, 8 s at most;
# l1_fetch URL: the same from level 1 itself (the controls).
nw_fetch() { nw_guest "$1" "curl -sS --max-time 8 $2 && echo ' ok' || echo no" | tr -d '\n'; }
l1_fetch() { { curl -sS --max-time 8 "$1" && echo ' ok' || echo no; } 2>/dev/null | tr -d '\n'; }

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
check "network: (control) the upstream answers rebind.test with a private address" "$inet_private" \
  "$(busybox nslookup rebind.test "$inet_public" 2>/dev/null | awk '/^Address/ { a = $NF } END { print a }')"
check "network: the gateway gives no private answer for a public name" "" \
  "$(nw_guest "$nw" "getent ahostsv4 rebind.test | awk '{ print \$1; exit }'")"
check "network: (control) level 1 serves on the gateway address" "hello from level 1 ok" \
  "$(l1_fetch "http://$nw_gw:$inet_host_port/")"
check "network: the guest reaches nothing on the host but DNS" no \
  "$(nw_fetch "$nw" "http://$nw_gw:$inet_host_port/")"

# Its egress policy (docs/network.md, "Per-sandbox egress"), changed while
# it runs: deny-all, then allow lists that name the public server or not.
body=$(sbxc --json egress "$nw" deny-all 2>&1 | tail -n 1)
check "network: sbx egress deny-all" deny-all "$(py "b['egress']" 2>/dev/null)"
check "network: deny-all: the guest does not reach the public server" no "$(nw_fetch "$nw" "http://$inet_public/")"
check "network: deny-all: not even DNS" "" \
  "$(nw_guest "$nw" "getent ahostsv4 public.test | awk '{ print \$1; exit }'")"
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
for nw_s in "$nw" "$nw_child"; do
  api DELETE "/v1/sandboxes/$nw_s"
  check "network: delete $nw_s" 200 "$code"
done
check "network: no tap is left" "" "$(ip -o link show "$nw_tap" 2>/dev/null; ip -o link show "$nw_child_tap" 2>/dev/null)"
