#!/bin/sh
# Guest side of bench/net's tap part (/sbx-run; the same for every VMM).
# The host has a tap with 172.31.0.1/24 (bench/net_runner.py tap); the
# initramfs carries Debian's iperf3 with its shared libraries (glibc
# included) at their usual paths. Parameters from /etc/sbx-test.env.
#  1. eth0 gets 172.31.0.2/24; the negotiated virtio feature bits are printed;
#  2. two one-shot iperf3 servers (-s -1) on 5201, one after the other; each
#     is announced with "SBX-NET-IPERF-READY: N" once it listens, and the
#     host runs one test against it (1: host sends, 2: -R, guest sends);
#  3. ping the host PING_COUNT times, PING_INTERVAL s apart (RTT summary).
# Server output goes to /tmp, not the console: a serial byte is an exit.
# The exit status counts the failed steps.
SECONDS_PER_TEST=5 PING_COUNT=20 PING_INTERVAL=0.2
# shellcheck disable=SC1091 # written by bench/net
[ -f /etc/sbx-test.env ] && . /etc/sbx-test.env
failed=0
bad() { echo "SBX-NET-FAIL: $*"; failed=$((failed + 1)); }

ip link set lo up
ip link set eth0 up || bad "eth0 up"
ip addr add 172.31.0.2/24 dev eth0 || bad "address on eth0"
for d in /sys/bus/virtio/devices/*; do
    echo "SBX-BENCH-FEATURES: $(cat "$d/device") $(cat "$d/features")"
done

# listening PORT: a socket in LISTEN (state 0A) on PORT (hex) in /proc/net/tcp
# or tcp6 (iperf3 listens on :: when the kernel has IPv6).
listening() {
    cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
        awk -v p=":$1" '$4 == "0A" && substr($2, length($2) - 4) == p { f = 1 } END { exit !f }'
}
for n in 1 2; do
    timeout $((SECONDS_PER_TEST * 4 + 300)) iperf3 -s -1 -p 5201 >/tmp/iperf-$n.log 2>&1 &
    pid=$!
    tries=0
    until listening 1451; do  # 5201
        tries=$((tries + 1))
        if [ "$tries" -gt 600 ] || ! kill -0 "$pid" 2>/dev/null; then break; fi
        sleep 0.1
    done
    echo "SBX-NET-IPERF-READY: $n"
    wait "$pid" || bad "iperf3 server $n: $(tail -n 3 /tmp/iperf-$n.log | tr '\n' ' ')"
done

ping -c "$PING_COUNT" -i "$PING_INTERVAL" -W 10 -q 172.31.0.1 >/tmp/ping 2>&1 || bad "ping: $(tail -n 2 /tmp/ping | tr '\n' ' ')"
echo "SBX-NET-PING: $(grep round-trip /tmp/ping)"
exit "$failed"
