#!/usr/bin/env bash
# sbxd's host network with real packets, in network namespaces this test
# makes and removes (docs/network.md, "Tests"). No traffic leaves them.
#
#   G  (a sandbox, 10.231.0.2)  ─veth─ sbx0 ┐
#   G2 (a sandbox, 10.231.0.6)  ─veth─ sbx1 ┤ H ("the host": sbxd-net-probe runs
#                                 tap sbx5 ┘    HostNetwork here) ── uplink0 ─veth─ I
#   I ("the internet", 203.0.113.254): HTTP on 198.51.100.10:80 and :25 and on
#     the private 10.99.0.10:80, a UDP logger on 198.51.100.10:9999, and the
#     upstream DNS (dnsmasq: public.test → 198.51.100.10, rebind.test → 10.99.0.10)
#   L (another network of the host's, lan0 192.0.2.1/24 ─veth─ 192.0.2.10, HTTP):
#     public addresses, not the uplink: no sandbox goes there
#
# The veth ends in H stand in for taps (named as taps are, sbx<slot>): the
# rules match interfaces and addresses, and tap_test.cpp tests the taps;
# slot 5 is a real tap, to see it made, kept across a restart and deleted.
# Checks, from G unless said: the internet answers through NAT; the private
# server, port 25, the other sandbox and every host address but the
# gateway's DNS do not; DNS answers through the gateway over UDP and TCP,
# and not with a private address; spoofed sources are dropped; nothing from
# outside reaches a sandbox; deny-all; an allow list; after detach no egress; the policy
# holds while no sbxd runs; one that ends before it adopts (a failed
# start) leaves the table, as the sandboxes' interfaces still route; a
# restart rebuilds exactly one table that
# behaves the same; at the end the table, the tap and dnsmasq are gone.
# Usage: egress_test.sh SBXD_NET_PROBE. Exits 77 without root or namespaces.
set -euo pipefail
probe=$1
netcheck=$(cd "$(dirname "$0")" && pwd)/netcheck.py

[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root (network namespaces)"; exit 77; }
for tool in ip ss nft curl python3 getent unshare mount timeout; do
    command -v "$tool" >/dev/null || { echo "SKIP: no $tool"; exit 77; }
done
[ -x /usr/sbin/dnsmasq ] || { echo "SKIP: no /usr/sbin/dnsmasq (dnsmasq-base)"; exit 77; }

H=sbxnet-h-$$ I=sbxnet-i-$$ L=sbxnet-l-$$ G=sbxnet-g-$$ G2=sbxnet-g2-$$
tmp=$(mktemp -d /tmp/sbxd-net-egress-XXXXXX)
state=$tmp/state
probe_pid=
failures=0

# A dnsmasq the probe started, found by its pid file (a released one is
# no child of anyone here).
forwarder_pid() {
    local pid
    pid=$(cat "$state/dnsmasq.pid" 2>/dev/null) || return 1
    grep -qzxF -- "--pid-file=$state/dnsmasq.pid" "/proc/$pid/cmdline" 2>/dev/null || return 1
    echo "$pid"
}
# Every process in the test's namespaces (the servers, the probe, the
# dnsmasq it started, released or not), then the namespaces.
cleanup() {
    set +e
    local ns left
    for signal in TERM KILL; do
        left=
        for ns in "$G" "$G2" "$L" "$I" "$H"; do
            left+=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
        done
        [ -z "$left" ] && break
        kill -"$signal" $left 2>/dev/null
        sleep 0.5
    done
    wait 2>/dev/null
    for ns in "$G" "$G2" "$L" "$I" "$H"; do ip netns del "$ns" 2>/dev/null; done
    if [ -n "${KEEP:-}" ]; then echo "kept $tmp" >&2; else rm -rf "$tmp"; fi
}
trap cleanup EXIT

if ! ip netns add "$H" 2>/dev/null; then
    echo "SKIP: cannot make network namespaces"
    exit 77
fi
for ns in "$I" "$L" "$G" "$G2"; do ip netns add "$ns"; done

on() { local ns=$1; shift; ip netns exec "$ns" "$@"; }
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
check() { local what=$1; shift; if "$@"; then echo "ok: $what"; else fail "$what"; fi; }
check_not() { local what=$1; shift; if "$@"; then fail "$what"; else echo "ok: $what"; fi; }
quiet() { "$@" >/dev/null 2>&1; }
# fetch NS URL: the body, or nothing within the timeouts.
fetch() { on "$1" curl -sS --noproxy '*' --connect-timeout 1 --max-time 3 "$2" 2>/dev/null || true; }
answers() { [ "$(fetch "$1" "$2")" = "$3" ]; }
refused() { [ -z "$(fetch "$1" "$2")" ]; }
# fetch_error NS URL: curl's exit code: 7 when something answered the
# connection with a refusal (a TCP reset or an ICMP error), 28 when nothing
# came back within 1 s. rejected: refused out loud; silent: dropped.
fetch_error() {
    local rc=0
    on "$1" curl -sS --noproxy '*' --connect-timeout 1 --max-time 3 -o /dev/null "$2" 2>/dev/null || rc=$?
    echo "$rc"
}
rejected() { [ "$(fetch_error "$1" "$2")" = 7 ]; }
silent() { [ "$(fetch_error "$1" "$2")" = 28 ]; }
# resolve NS SERVER NAME [tcp]: the IPv4 addresses glibc's resolver gets
# from SERVER (a resolv.conf of its own, bound in a private mount namespace).
resolve() {
    local conf=$tmp/resolv.$RANDOM opts="timeout:1 attempts:1"
    [ "${4:-}" = tcp ] && opts="$opts use-vc"
    printf 'nameserver %s\noptions %s\n' "$2" "$opts" >"$conf"
    on "$1" unshare --mount --propagation private \
        sh -c 'mount --bind "$1" /etc/resolv.conf && getent ahostsv4 "$2"' sh "$conf" "$3" 2>/dev/null |
        awk '{print $1}' | sort -u | tr '\n' ' ' | sed 's/ $//' || true
}
resolves() { [ "$(resolve "$@")" = "198.51.100.10" ]; }
# until TRIES COMMAND...: COMMAND, retried every 0.1 s.
until_ok() { local n=$1; shift; for _ in $(seq "$n"); do "$@" && return 0; sleep 0.1; done; return 1; }
# udp_from NS SRC TEXT: one datagram to I's logger; arrived TEXT: whether it came.
udp_from() { on "$1" python3 "$netcheck" udp-send "$2" 198.51.100.10 9999 "$3" || true; }
arrived() { grep -q " $1\$" "$tmp/udp.log" 2>/dev/null; }

# --- the world -------------------------------------------------------------
for ns in "$H" "$I" "$L" "$G" "$G2"; do on "$ns" ip link set lo up; done
# Only the policy decides here: no reverse-path filter in H.
on "$H" sh -c 'echo 0 >/proc/sys/net/ipv4/conf/all/rp_filter; echo 0 >/proc/sys/net/ipv4/conf/default/rp_filter'
on "$H" ip link add uplink0 type veth peer name eth0 netns "$I"
on "$H" ip addr add 203.0.113.1/24 dev uplink0
on "$H" ip link set uplink0 up
on "$H" ip route add default via 203.0.113.254
on "$I" ip addr add 203.0.113.254/24 dev eth0
on "$I" ip link set eth0 up
on "$I" ip addr add 198.51.100.10/32 dev lo
on "$I" ip addr add 10.99.0.10/32 dev lo
on "$I" ip route add 10.231.0.0/16 via 203.0.113.1  # so I could try to reach a sandbox directly
on "$H" ip link add lan0 type veth peer name eth0 netns "$L"
on "$H" ip addr add 192.0.2.1/24 dev lan0
on "$H" ip link set lan0 up
on "$L" ip addr add 192.0.2.10/24 dev eth0
on "$L" ip link set eth0 up
on "$L" ip route add 10.231.0.0/16 via 192.0.2.1  # replies could come back
slot_ns=("$G" "$G2")
for slot in 0 1; do
    ns=${slot_ns[$slot]}
    on "$H" ip link add "sbx$slot" type veth peer name eth0 netns "$ns"
    on "$ns" ip addr add "10.231.0.$((4 * slot + 2))/30" dev eth0
    on "$ns" ip link set eth0 up
    on "$ns" ip route add default via "10.231.0.$((4 * slot + 1))"
    # A guest that keeps sending to the host's MAC after its address is gone.
    mac=$(on "$H" cat "/sys/class/net/sbx$slot/address")
    on "$ns" ip neigh replace "10.231.0.$((4 * slot + 1))" lladdr "$mac" dev eth0 nud permanent
done

serve() {  # serve NS ADDR PORT TEXT NAME
    mkdir -p "$tmp/www-$5"
    echo "$4" >"$tmp/www-$5/hello"
    ip netns exec "$1" timeout 300 python3 -m http.server --bind "$2" --directory "$tmp/www-$5" "$3" >"$tmp/$5.log" 2>&1 &
}
serve "$I" 198.51.100.10 80 internet public
serve "$I" 10.99.0.10 80 private private
serve "$I" 198.51.100.10 25 smtp smtp
serve "$H" 0.0.0.0 8080 host host
serve "$L" 192.0.2.10 80 lan lan
serve "$G" 10.231.0.2 8080 sandbox sandbox
serve "$G2" 10.231.0.6 8080 sandbox2 sandbox2
ip netns exec "$I" timeout 300 python3 "$netcheck" udp-listen 198.51.100.10 9999 "$tmp/udp.log" &
ip netns exec "$I" timeout 300 /usr/sbin/dnsmasq --keep-in-foreground --conf-file=/dev/null --no-hosts --no-resolv \
    --bind-interfaces --listen-address=203.0.113.254 --pid-file="$tmp/upstream.pid" --log-facility=- \
    --address=/public.test/198.51.100.10 --address=/doc.test/198.51.100.10 --address=/rebind.test/10.99.0.10 >"$tmp/upstream.log" 2>&1 &

# The world works without sbxd's part: each server answers its neighbours.
until_ok 100 answers "$H" http://198.51.100.10/hello internet || { cat "$tmp/public.log" >&2; exit 1; }
until_ok 100 answers "$H" http://10.99.0.10/hello private || exit 1
until_ok 100 answers "$H" http://198.51.100.10:25/hello smtp || exit 1
until_ok 100 answers "$I" http://203.0.113.1:8080/hello host || exit 1
until_ok 100 answers "$H" http://192.0.2.10/hello lan || exit 1
until_ok 100 answers "$G" http://10.231.0.2:8080/hello sandbox || exit 1
until_ok 100 answers "$G2" http://10.231.0.6:8080/hello sandbox2 || exit 1
until_ok 30 resolves "$H" 203.0.113.254 public.test || { cat "$tmp/upstream.log" >&2; exit 1; }
[ "$(resolve "$H" 203.0.113.254 rebind.test)" = 10.99.0.10 ] || { echo "upstream has no rebind.test" >&2; exit 1; }
[ "$(resolve "$H" 203.0.113.254 doc.test)" = 198.51.100.10 ] || { echo "upstream has no doc.test" >&2; exit 1; }
echo "ok: the test world is up"

# --- the probe -------------------------------------------------------------
mkfifo "$tmp/probe.in" "$tmp/probe.out"
start_probe() {
    # dnsmasq counts the documentation networks as private: public.test,
    # and only it, is let through (doc.test shows why).
    ip netns exec "$H" "$probe" --state-dir "$state" --dns-upstream 203.0.113.254 --log-dns-queries \
        --dns-rebind-ok public.test \
        <"$tmp/probe.in" >"$tmp/probe.out" 2>>"$tmp/probe.log" &
    probe_pid=$!
    exec {to_probe}>"$tmp/probe.in" {from_probe}<"$tmp/probe.out"
    reply=
    read -r -t 30 reply <&"$from_probe" || true
    echo "start => $reply" >>"$tmp/transcript"
}
send() {
    echo "$*" >&"$to_probe"
    reply=
    read -r -t 30 reply <&"$from_probe" || true
    echo "$* => $reply" >>"$tmp/transcript"
}
stop_probe() {  # after quit or release: it exits by itself
    exec {to_probe}>&- {from_probe}<&-
    local status=0
    wait "$probe_pid" || status=$?
    probe_pid=
    return "$status"
}
replied() { [[ $reply == $1 ]]; }
tables() { on "$H" nft list tables | grep -c '^table inet sbxd$' || true; }
# The addresses with something on port 53 in H, TCP and UDP.
listeners() { on "$H" ss -Hlntu 'sport = :53' | awk '{print $5}' | sed 's/:53$//' | sort -u | tr '\n' ' ' | sed 's/ $//'; }
has_address() { on "$H" ip -4 -o addr show dev "$1" | grep -q " $2 "; }

start_probe
check "the probe opens the host network, its uplink the default route's" replied "ready uplink=uplink0 pool=10.231.0.0/16"
check "one table inet sbxd" [ "$(tables)" = 1 ]
check "IPv4 forwarding on in H" [ "$(on "$H" cat /proc/sys/net/ipv4/ip_forward)" = 1 ]
first_forwarder=$(forwarder_pid || true)
check "dnsmasq runs, with sbxd's pid file" [ -n "$first_forwarder" ]

send attach-existing 0
check "slot 0: its /30" replied "ok tap=sbx0 mac=* guest=10.231.0.2/30 gateway=10.231.0.1 dns=10.231.0.1 egress=internet"
send attach-existing 1
check "slot 1: its /30" replied "ok tap=sbx1 mac=* guest=10.231.0.6/30 gateway=10.231.0.5 dns=10.231.0.5 egress=internet"
check "the gateway address on sbx0" has_address sbx0 10.231.0.1/30
send attach 5
check "slot 5: a tap" replied "ok tap=sbx5 mac=* guest=10.231.0.22/30 gateway=10.231.0.21 dns=10.231.0.21 egress=internet"
check "sbx5 is a persistent tap with the vnet header" \
    sh -c "ip netns exec '$H' ip -d link show sbx5 | grep -q 'tun type tap pi off vnet_hdr on persist on'"
check "sbx5 is up with its gateway address" \
    sh -c "ip netns exec '$H' ip -o link show sbx5 | grep -q '[<,]UP[,>]' && ip netns exec '$H' ip -4 -o addr show dev sbx5 | grep -q ' 10.231.0.21/30 '"
check "no IPv6 on a sandbox interface" [ "$(on "$H" cat /proc/sys/net/ipv6/conf/sbx5/disable_ipv6)" = 1 ]
send attach 5
check "a slot attached twice is refused" replied "error slot_in_use *"

phase=0
behaviour() {
    phase=$((phase + 1))
    check "G reaches the internet" until_ok 10 answers "$G" "http://198.51.100.10/hello?from=G-$phase" internet
    check "the internet sees the uplink's address (NAT)" grep -q "^203\.0\.113\.1 .*\"GET /hello?from=G-$phase " "$tmp/public.log"
    check_not "the internet never sees a sandbox address" grep -q '^10\.231\.' "$tmp/public.log"
    check "G2 reaches the internet" answers "$G2" http://198.51.100.10/hello internet
    check "G does not reach a private address" refused "$G" http://10.99.0.10/hello
    check "G does not reach port 25" refused "$G" http://198.51.100.10:25/hello
    check "G does not reach a network that is not the uplink's" refused "$G" http://192.0.2.10/hello
    check "G does not reach the other sandbox" refused "$G" http://10.231.0.6:8080/hello
    check "G does not reach the host on its gateway address" refused "$G" http://10.231.0.1:8080/hello
    check "G does not reach the host's uplink address" refused "$G" http://203.0.113.1:8080/hello
    check "G does not reach the host on another sandbox's gateway" refused "$G" http://10.231.0.5:8080/hello
    check "the host reaches a sandbox (the port proxy's way)" answers "$H" http://10.231.0.6:8080/hello sandbox2
    check "the internet does not reach a sandbox" refused "$I" http://10.231.0.2:8080/hello
    # What the policy denies is refused at once; unasked inbound is dropped.
    check "a denied connection out is refused at once (a TCP reset)" rejected "$G" http://10.99.0.10/hello
    check "so is one to the host" rejected "$G" http://203.0.113.1:8080/hello
    check "a denied datagram gets ICMP administratively prohibited" \
        on "$G" python3 "$netcheck" udp-refused 10.99.0.10 9999
    check "the internet's connection to a sandbox gets no answer" silent "$I" http://10.231.0.2:8080/hello
    check "G pings its gateway" on "$G" python3 "$netcheck" ping 10.231.0.1
    check_not "G does not ping the host's uplink address" on "$G" python3 "$netcheck" ping 203.0.113.1
    check "public.test resolves through the gateway (UDP)" until_ok 30 resolves "$G" 10.231.0.1 public.test
    check "dnsmasq listens on the sandbox gateways and nowhere else" \
        [ "$(listeners)" = "10.231.0.1 10.231.0.21 10.231.0.5" ]
    check "public.test resolves through the gateway (TCP)" resolves "$G" 10.231.0.1 public.test tcp
    check "rebind.test gets no private answer" [ -z "$(resolve "$G" 10.231.0.1 rebind.test)" ]
    check "doc.test neither: dnsmasq counts documentation networks as private" [ -z "$(resolve "$G" 10.231.0.1 doc.test)" ]
    check_not "G gets no DNS from another sandbox's gateway" resolves "$G" 10.231.0.5 public.test
    on "$G" ip addr replace 10.231.0.9/32 dev eth0
    udp_from "$G" 10.231.0.9 "spoofed-$phase"
    udp_from "$G" 10.231.0.2 "own-$phase"
    check "a datagram from G's own address arrives" until_ok 20 arrived "own-$phase"
    check_not "a datagram from a spoofed address does not" arrived "spoofed-$phase"
    on "$G" ip addr del 10.231.0.9/32 dev eth0
}
behaviour

send egress 0 deny-all
check "deny-all" replied "ok egress=deny-all"
check "deny-all: G does not reach the internet" refused "$G" http://198.51.100.10/hello
check_not "deny-all: not even DNS" resolves "$G" 10.231.0.1 public.test
check "deny-all: DNS is refused at once" on "$G" python3 "$netcheck" udp-refused 10.231.0.1 53
check "deny-all is G's alone" answers "$G2" http://198.51.100.10/hello internet
send egress 0 internet
check "back to the internet" answers "$G" http://198.51.100.10/hello internet

# An allow list narrows the policy: DNS through the gateway, its networks,
# nothing else of the internet; the blocked ranges and port 25 stay blocked.
# The direct queries to the internet's DNS server go over UDP: glibc's TCP
# connect has no timeout of its own, so a dropped SYN would wait minutes.
check "the internet's DNS server answers G directly" resolves "$G" 203.0.113.254 public.test
send egress 0 allow:198.51.100.10/32
check "allow list" replied "ok egress=allow:198.51.100.10/32"
check "allow list: G reaches a listed address" answers "$G" http://198.51.100.10/hello internet
check "allow list: DNS through the gateway still" resolves "$G" 10.231.0.1 public.test
check_not "allow list: not an address it does not list" resolves "$G" 203.0.113.254 public.test
check "allow list: still no port 25 on a listed address" refused "$G" http://198.51.100.10:25/hello
check "allow list: still no private address" refused "$G" http://10.99.0.10/hello
check "allow list is G's alone" resolves "$G2" 203.0.113.254 public.test
send egress 0 allow:10.99.0.0/24
check "an allow list naming a private network is refused" replied "error bad_egress *"
send egress 0 allow:203.0.113.254/32
check "a new allow list" replied "ok egress=allow:203.0.113.254/32"
check "the new list: its address" resolves "$G" 203.0.113.254 public.test
check "the new list replaced the old whole" refused "$G" http://198.51.100.10/hello
send egress 0 internet
check "back to the internet, again" answers "$G" http://198.51.100.10/hello internet

send detach 1
check "detach" replied "ok detached"
check_not "the gateway address is gone from sbx1" has_address sbx1 10.231.0.5/30
check "after detach, G2 does not reach the internet" refused "$G2" http://198.51.100.10/hello
check "... and gets no answer (not attached: dropped, not refused)" silent "$G2" http://198.51.100.10/hello
udp_from "$G2" 10.231.0.6 "detached"
udp_from "$G" 10.231.0.2 "after-detach"
until_ok 20 arrived "after-detach" || true
check_not "after detach, nothing of G2's leaves" arrived "detached"
send attach-existing 1
check "attached again" answers "$G2" http://198.51.100.10/hello internet

# --- a restart -------------------------------------------------------------
send release
check "release" replied "ok released"
check "the released probe exits 0" stop_probe
check "the table stays while no sbxd runs" [ "$(tables)" = 1 ]
check "so does the tap" quiet on "$H" ip link show sbx5
check "so does dnsmasq" [ "$(forwarder_pid || true)" = "$first_forwarder" ]
check "and the policy: the internet yes" answers "$G" http://198.51.100.10/hello internet
check "and the policy: private no" refused "$G" http://10.99.0.10/hello

# A start that fails before it adopts (this probe quits without adopt):
# the interfaces of the sandboxes it never attached keep their addresses
# and routes, so the table it opened stays and drops their packets until
# an sbxd adopts them; without it they would be routed unfiltered.
start_probe
check "a probe that ends before adopt opens the host network" replied "ready *"
send quit
check "... and quits" replied "ok bye"
check "... and exits 0" stop_probe
check "the table stays: the sandboxes' interfaces it did not adopt still route" [ "$(tables)" = 1 ]
check "so does the tap" quiet on "$H" ip link show sbx5
check "with it, G does not reach the internet" refused "$G" http://198.51.100.10/hello
check "nor the host's uplink address" refused "$G" http://203.0.113.1:8080/hello
check "nor the host on its gateway address" refused "$G" http://10.231.0.1:8080/hello

start_probe
check "a second probe opens the host network" replied "ready *"
check "still one table" [ "$(tables)" = 1 ]
check "before adopt, the rebuilt table lets no sandbox out" refused "$G" http://198.51.100.10/hello
check_not "the earlier dnsmasq was stopped" quiet kill -0 "$first_forwarder"
check "a new dnsmasq runs" quiet forwarder_pid
send adopt 0:existing 1:existing 5
check "adopt" replied "ok adopted=3 failed=0"
check "still one table, after adopt" [ "$(tables)" = 1 ]
check "the adopted tap keeps its address" has_address sbx5 10.231.0.21/30
behaviour

# --- the end ---------------------------------------------------------------
last_forwarder=$(forwarder_pid || true)
check "the new dnsmasq is another process" test -n "$last_forwarder" -a "$last_forwarder" != "$first_forwarder"
send quit
check "quit" replied "ok bye"
check "the probe exits 0" stop_probe
check "the table is gone" [ "$(tables)" = 0 ]
check_not "the tap is gone" quiet on "$H" ip link show sbx5
check_not "the gateway address is gone" has_address sbx0 10.231.0.1/30
check_not "dnsmasq is gone" quiet kill -0 "$last_forwarder"
check "G has no egress" refused "$G" http://198.51.100.10/hello

if [ "$failures" -ne 0 ]; then
    echo "--- transcript" >&2
    cat "$tmp/transcript" >&2
    echo "--- probe log" >&2
    tail -n 40 "$tmp/probe.log" >&2
    echo "--- dnsmasq log" >&2
    tail -n 40 "$state/dnsmasq.log" >&2 || true
    echo "egress_test: $failures failed" >&2
    exit 1
fi
echo "egress_test: all passed"
