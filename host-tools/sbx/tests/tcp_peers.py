#!/usr/bin/env python3
"""TCP peers for forward_test.sh, on 127.0.0.1 only.

  tcp_peers.py server PORTFILE      an echo server on a free port (written to
                                    PORTFILE): each connection's bytes come back,
                                    and after the client's half-close "BYE\\n",
                                    then the server closes (so a half-close must
                                    pass both ways)
  tcp_peers.py clients PORT N BYTES N connections at once, each sending BYTES
                                    random bytes and half-closing, expecting
                                    them back followed by "BYE\\n"; exits 1 on
                                    any mismatch. Bounded: 60 s per connection.
"""
import os
import socket
import sys
import threading


def serve(conn):
    with conn:
        while True:
            data = conn.recv(65536)
            if not data:
                break
            conn.sendall(data)
        conn.sendall(b"BYE\n")


def server(portfile):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    with open(portfile + ".tmp", "w") as f:
        f.write(str(listener.getsockname()[1]))
    os.rename(portfile + ".tmp", portfile)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


def one_client(port, size, errors, index):
    payload = os.urandom(size)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
            sender = threading.Thread(target=lambda: (conn.sendall(payload), conn.shutdown(socket.SHUT_WR)))
            sender.start()
            got = bytearray()
            while True:
                data = conn.recv(65536)
                if not data:
                    break
                got += data
            sender.join()
        if bytes(got) != payload + b"BYE\n":
            errors.append(f"connection {index}: {len(got)} bytes back, not {size} + BYE")
    except OSError as error:
        errors.append(f"connection {index}: {error}")


def clients(port, count, size):
    errors = []
    threads = [threading.Thread(target=one_client, args=(port, size, errors, i)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for e in errors:
        print(e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    if sys.argv[1] == "server":
        server(sys.argv[2])
    else:
        sys.exit(clients(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])))
