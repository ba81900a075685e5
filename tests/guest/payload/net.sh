#!/bin/sh
# Guest side of the virtio-net test (/sbx-run; the same for every VMM). The
# host side has a tap with 172.31.0.1/24 and a TCP listener on port 7000.
#  1. eth0 gets 172.31.0.2/24, its MAC is reported;
#  2. ping the host;
#  3. TCP guest -> host: send a line to 172.31.0.1:7000, report the answer;
#  4. TCP host -> guest: listen on 7001 (the host connects after
#     "SBX-NET-LISTENING: 7001"), answer a line, report what the host sent.
# Busybox nc half-closes when its stdin ends and exits when the peer closes;
# every exchange is "each side sends one line, then reads to EOF".
# The exit status counts the failed steps.
failed=0
bad() { echo "SBX-NET-FAIL: $*"; failed=$((failed + 1)); }

echo "SBX-VIRTIO-IDS: $(cat /sys/bus/virtio/devices/*/device 2>/dev/null | tr '\n' ' ')"
echo "SBX-NET-IFACES:" /sys/class/net/*
echo "SBX-NET-MAC: $(cat /sys/class/net/eth0/address 2>&1)"
ip link set lo up
ip link set eth0 up || bad "eth0 up"
ip addr add 172.31.0.2/24 dev eth0 || bad "address on eth0"

# The first packets may wait for ARP; -W bounds the wait for the replies.
if ping -c 3 -W 10 172.31.0.1 >/tmp/ping 2>&1; then
    echo "SBX-NET-PING: ok"
else
    bad "ping 172.31.0.1: $(tail -n 2 /tmp/ping | tr '\n' ' ')"
fi

if reply=$(echo "hello-from-guest-tcp" | timeout 60 nc -w 10 172.31.0.1 7000); then
    echo "SBX-NET-TCP-REPLY: $reply"
else
    bad "TCP to 172.31.0.1:7000"
fi

echo "hello-from-guest-tcp-listener" >/tmp/reply
timeout 120 nc -l -p 7001 </tmp/reply >/tmp/got &
nc_pid=$!
# No readiness signal from busybox nc: the host retries until it connects.
echo "SBX-NET-LISTENING: 7001"
if wait "$nc_pid"; then
    echo "SBX-NET-TCP-FROM-HOST: $(cat /tmp/got)"
else
    bad "TCP listener on 7001"
fi
exit "$failed"
