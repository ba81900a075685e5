#!/usr/bin/python3
"""TEST ONLY: a stand-in for sbx-vmm for the unit tests of sbx-bench's
restore, snapshot, fork, density and exec workloads and of boot --agent
(test_run_snapshot.py, test_run_exec.py, test_boot_agent.py), run as
`--vmm sbx=THIS`. It takes the flags those workloads give sbx-vmm and
serves what they talk to, without a VM:

- the hybrid vsock socket (`--vsock cid=N,uds=PATH`: `CONNECT 52` ->
  `OK ...`) with an agent that answers hello (checking the token of
  `sbx.token=` or of the snapshot), health and exec (exit 0; `reboot`
  ends the process with status 0, as the guest's reboot ends sbx-vmm);
  the agent listens FAKE_AGENT_DELAY_S (default 0.05) after the start
  (a console boot: and once it printed SBX-AGENT-START), and not while
  the guest is paused (a new connection is closed);
- the control socket (docs/vmm-control.md): status, pause, resume,
  snapshot (a small JSON file inside --snapshot-dir, the reply's fields),
  stop;
- the log lines the workloads read: `VM set up in X ms` and, for a lazy
  restore, `guest memory fully loaded from the snapshot X ms ...`;
- a boot without --console (boot --agent: the console on stdout): the
  minimal image's /init lines, SBX-BOOTED and `SBX-TS: init` at once,
  `SBX-AGENT-START` and `SBX-TS: agent_start` when its agent listens, and
  sbx-vmm's `guest boot time: X ms`.

FAKE_SBX_FAIL_MODE=MODE makes a restore in that mode exit 1 at once, and
FAKE_SBX_FAIL_CID=N one whose vsock has CID N (fork's child N - 10);
FAKE_SBX_NO_AGENT=1 makes a console boot the plain initramfs's: the
markers, then the guest's reboot, no agent.
"""

import argparse
import json
import os
import socket
import struct
import sys
import threading
import time

START = time.monotonic()
done = threading.Event()
agent_up = threading.Event()  # a console boot: set once /init "started" the agent
state = {"paused": False, "status": 0}


def log(text):
    sys.stderr.write(f"sbx-vmm: info: {text}\n")
    sys.stderr.flush()


def send(conn, message):
    body = b"\x01" + json.dumps(message).encode()
    conn.sendall(struct.pack("<I", len(body)) + body)


def recv_exact(conn, n):
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def recv(conn):
    (length,) = struct.unpack("<I", recv_exact(conn, 4))
    body = recv_exact(conn, length)
    return json.loads(body[1:])


def agent_session(conn, token, delay):
    line = b""
    while not line.endswith(b"\n"):
        c = conn.recv(1)
        if not c:
            return
        line += c
    if (line.strip() != b"CONNECT 52" or time.monotonic() - START < delay or state["paused"]
            or not agent_up.is_set()):
        return  # nothing listens on that port (yet), or no vCPU runs: the connection closes
    conn.sendall(b"OK 1073741824\n")
    hello = recv(conn)
    if hello.get("type") != "hello" or hello.get("token") != token:
        send(conn, {"type": "error", "code": "unauthorized", "message": "bad token"})
        return
    send(conn, {"type": "hello", "version": 1, "agent": "fake-agent", "boot_id": "fake"})
    while True:
        request = recv(conn)
        if request.get("op") == "health":
            send(conn, {"type": "result", "agent": "fake-agent", "uptime_s": time.monotonic() - START})
        elif request.get("op") == "exec":
            if "reboot" in " ".join(request.get("argv", [])):
                done.set()
                return
            send(conn, {"type": "started", "pid": 42})
            send(conn, {"type": "exit", "code": 0, "timed_out": False})
        else:
            send(conn, {"type": "error", "code": "unknown_op"})


def serve(path, handle):
    if os.path.exists(path):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(64)

    def loop():
        while True:
            conn, _ = server.accept()
            threading.Thread(target=guarded, args=(conn,), daemon=True).start()

    def guarded(conn):
        with conn:
            try:
                handle(conn)
            except (OSError, ConnectionError, ValueError):
                pass
    threading.Thread(target=loop, daemon=True).start()


def control_session(conn, args, token):
    reader = conn.makefile("rb")
    for line in reader:
        request = json.loads(line)
        op = request.get("op")
        reply = {"ok": True, "state": "paused" if state["paused"] else "running", "vcpus": 1,
                 "memory_mib": args.memory}
        if op == "pause":
            state["paused"] = True
            reply["state"] = "paused"
        elif op == "resume":
            state["paused"] = False
            reply["state"] = "running"
        elif op == "stop":
            reply["state"] = "stopping"
            conn.sendall(json.dumps(reply).encode() + b"\n")
            done.set()
            return
        elif op == "snapshot":
            reply = snapshot(request, args, token)
        elif op != "status":
            reply = {"ok": False, "error": "bad_request", "message": f"unknown op {op}"}
        conn.sendall(json.dumps(reply).encode() + b"\n")


def snapshot(request, args, token):
    if not args.snapshot_dir:
        return {"ok": False, "error": "snapshot_dir_unset", "message": "no --snapshot-dir"}
    path = os.path.realpath(request["path"])
    if not path.startswith(os.path.realpath(args.snapshot_dir) + "/"):
        return {"ok": False, "error": "bad_request", "message": "outside --snapshot-dir"}
    mode = request.get("mode", "compressed")
    window = request.get("working_set_ms", 0) if not state["paused"] else 0
    time.sleep(min(window, 20) / 1000)
    state["paused"] = True
    with open(path + ".tmp", "w") as f:
        json.dump({"fake-sbx-snapshot": 1, "mode": mode, "token": token, "memory_mib": args.memory}, f)
    os.rename(path + ".tmp", path)
    memory = args.memory << 20
    return {"ok": True, "state": "paused", "vcpus": 1, "memory_mib": args.memory, "memory_bytes": memory,
            "zero_bytes": memory // 2, "file_bytes": os.path.getsize(path),
            "working_set_bytes": (4 << 20) if window else 0, "pause_ms": 1.5, "write_ms": 20.25}


def console(text):
    sys.stdout.write(text + "\r\n")  # the guest's tty: ONLCR
    sys.stdout.flush()


def console_boot(delay):
    """The console of a boot of the minimal image, on stdout; its agent
    answers `delay` s after the start (agent_session)."""
    time.sleep(0.01)
    log("guest boot time: 40.500 ms")
    for line in ("SBX-BOOTED", "SBX-UNAME: Linux (none) 6.12.0-fake", "SBX-NPROC: 1", "SBX-MEM-KB: 243484",
                 "SBX-TS: init 81.25"):
        console(line)
    if os.environ.get("FAKE_SBX_NO_AGENT") == "1":
        console("SBX-HALT: reboot")
        done.set()
        return
    time.sleep(max(0.0, delay - (time.monotonic() - START)))
    console("SBX-AGENT-START: /usr/local/bin/sbx-agent")
    console("SBX-TS: agent_start 92.5")
    console("SBX-TS: agent_start 99.0")  # a restart's: the first counts
    agent_up.set()  # after SBX-BOOTED, as in the guest


def main():
    if "--version" in sys.argv:
        print("sbx-vmm 0.0.0-fake")
        return 0
    ap = argparse.ArgumentParser()
    for flag in ("--kernel", "--initrd", "--cmdline", "--vsock", "--control", "--snapshot-dir", "--console",
                 "--restore", "--restore-mode"):
        ap.add_argument(flag)
    ap.add_argument("--cpus", type=int, default=1)
    ap.add_argument("--memory", type=int, default=256)
    args, _ = ap.parse_known_args()
    if args.restore:
        with open(args.restore) as f:
            saved = json.load(f)
        mode = args.restore_mode or "eager"
        cid = dict(part.split("=", 1) for part in args.vsock.split(","))["cid"]
        for var, value in (("FAKE_SBX_FAIL_MODE", mode), ("FAKE_SBX_FAIL_CID", cid)):
            if os.environ.get(var) == value:
                sys.stderr.write(f"sbx-vmm: error: restore failed ({var})\n")
                return 1
        if mode == "private" and saved["mode"] != "raw":
            sys.stderr.write("sbx-vmm: error: a private restore needs a raw snapshot\n")
            return 1
        token, args.memory = saved["token"], saved["memory_mib"]
    else:
        mode = None
        token = next((w.split("=", 1)[1] for w in (args.cmdline or "").split() if w.startswith("sbx.token=")), "")
    log(f"VM set up in {3.5 if mode else 12.0:.3f} ms; starting {args.cpus} vCPU(s)")
    if mode == "lazy":
        threading.Timer(0.02, log, args=("guest memory fully loaded from the snapshot 25.5 ms after the "
                                         "start (3 faults served, 1 of 8 chunks installed by a fault first)",)).start()
    uds = dict(part.split("=", 1) for part in args.vsock.split(","))["uds"]
    delay = float(os.environ.get("FAKE_AGENT_DELAY_S", "0.05"))
    serve(uds, lambda conn: agent_session(conn, token, delay))
    if not mode and not args.console:
        console_boot(delay)
    else:
        agent_up.set()
    if args.control:
        serve(args.control, lambda conn: control_session(conn, args, token))
    done.wait()
    for path in (uds, args.control):
        if path and os.path.exists(path):
            os.unlink(path)
    return state["status"]


if __name__ == "__main__":
    sys.exit(main())
