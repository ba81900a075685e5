#!/usr/bin/env python3
"""Small network probes for egress_test.sh (each bounded in time):

  netcheck.py udp-listen ADDR PORT OUT   log "SOURCE PAYLOAD" per datagram to OUT, for 300 s at most
  netcheck.py udp-send SRC DST PORT TEXT one datagram from SRC (an address of this namespace)
  netcheck.py ping DST                   one ICMP echo (RFC 792), 1 s for the reply; exit 0 on a reply
  netcheck.py udp-refused DST PORT       one datagram on a connected socket; exit 0 when an ICMP
                                         error comes back within 1 s (EHOSTUNREACH, ECONNREFUSED)
"""
import errno
import os
import socket
import struct
import sys
import time


def udp_listen(addr, port, out):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((addr, int(port)))
    end = time.monotonic() + 300
    with open(out, "a", buffering=1) as f:
        while time.monotonic() < end:
            s.settimeout(max(0.1, end - time.monotonic()))
            try:
                data, (src, _) = s.recvfrom(2048)
            except socket.timeout:
                break
            f.write(f"{src} {data.decode(errors='replace')}\n")


def udp_send(src, dst, port, text):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((src, 0))
    s.sendto(text.encode(), (dst, int(port)))


def checksum(data):
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def ping(dst):
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    ident = os.getpid() & 0xFFFF
    header = struct.pack("!BBHHH", 8, 0, 0, ident, 1)
    payload = b"sbxd-egress-test"
    packet = struct.pack("!BBHHH", 8, 0, checksum(header + payload), ident, 1) + payload
    s.sendto(packet, (dst, 0))
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        s.settimeout(max(0.01, end - time.monotonic()))
        try:
            data, (src, _) = s.recvfrom(2048)
        except socket.timeout:
            break
        icmp = data[(data[0] & 0x0F) * 4:]
        kind, _, _, rid, _ = struct.unpack("!BBHHH", icmp[:8])
        if src == dst and kind == 0 and rid == ident:
            return 0
    return 1


def udp_refused(dst, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect((dst, int(port)))
    s.settimeout(1.0)
    try:
        s.send(b"sbxd-egress-test")
        s.recv(2048)
    except socket.timeout:
        print("no answer within 1 s")
        return 1
    except OSError as e:
        if e.errno in (errno.EHOSTUNREACH, errno.ECONNREFUSED):
            print(errno.errorcode[e.errno])
            return 0
        raise
    print("answered")
    return 1


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "udp-listen":
        udp_listen(*args)
    elif cmd == "udp-send":
        udp_send(*args)
    elif cmd == "ping":
        sys.exit(ping(*args))
    elif cmd == "udp-refused":
        sys.exit(udp_refused(*args))
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
