#!/usr/bin/env python3
"""Level-1 side of bench/snapshot: snapshot and restore of one guest with
FILL_MIB of touched memory, sbx-vmm next to QEMU -M microvm, same kernel,
minimal image (busybox + sbx-agent) and memory size.

sbx-vmm: snapshot through the control socket (compressed, then raw), then
  restore eager and lazy from the compressed file and private from the raw
  one. QEMU: `migrate exec:cat>FILE` over QMP, restored with
  `-incoming defer` and `migrate-incoming exec:cat FILE`.
Each restore reports: time to the first guest instruction (sbx-vmm: its
"VM set up in" log line, measured from its process start; QEMU: QMP
query-status says running), time to the first agent answer (health over
vsock, polled every 5 ms, from process start) and time to fully loaded
memory (eager and QEMU: the first instruction; lazy: the loader's log line;
private: pages load on touch, so never).

Prints BENCH-SAVE / BENCH-RESTORE lines. Usage:
snapshot_runner.py --kernel K --image MINIMAL --sbx-vmm PATH --workdir DIR [--fill-mib N]
"""

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time

sys.dont_write_bytecode = True
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tests", "guest"))
import vmm_control  # noqa: E402
import vmrun  # noqa: E402
from agent_frames import recv_message, send_frame  # noqa: E402

BASE_CMDLINE = ("console=ttyS0 reboot=k panic=1 i8042.noaux i8042.nomux i8042.nopnp "
                "i8042.dumbkbd quiet")


def say(line):
    print(line, flush=True)


class Agent:
    """Requests to sbx-agent over the VMM's vsock (hybrid UDS or AF_VSOCK)."""

    def __init__(self, vmm, workdir, token):
        self.host = vmrun.VsockHost(vmm, workdir)
        self.token = token

    def _session(self, wait, timeout=600):
        sock = self.host.connect(52, wait=wait)
        sock.settimeout(timeout)
        send_frame(sock, {"type": "hello", "version": 1, "token": self.token})
        if recv_message(sock).get("type") != "hello":
            raise ConnectionError("hello refused")
        return sock

    def health(self, wait=0.0, timeout=600):
        with self._session(wait, timeout) as sock:
            send_frame(sock, {"type": "request", "op": "health"})
            return recv_message(sock)

    def shell(self, command):
        with self._session(30) as sock:
            send_frame(sock, {"type": "request", "op": "exec", "argv": ["sh", "-c", command]})
            while True:
                m = recv_message(sock)
                if m.get("type") in ("exit", "error"):
                    if m.get("code") != 0:
                        raise RuntimeError(f"{command!r}: {m}")
                    return

    def wait(self, deadline_s=600, poll_s=0.005):
        """Seconds until the agent first answers health."""
        start = time.monotonic()
        seen = {}  # what each failed attempt met, for the error
        while time.monotonic() - start < deadline_s:
            try:
                # An accepted connection whose hello is never answered
                # must not eat the whole deadline.
                self.health(timeout=30)
                return time.monotonic() - start
            except (OSError, ConnectionError) as e:
                what = f"{type(e).__name__}: {e}"
                seen[what] = seen.get(what, 0) + 1
                time.sleep(poll_s)
        raise TimeoutError(f"the agent never answered ({seen})")


def fill(agent, mib):
    """FILL_MIB of incompressible data in a tmpfs: the snapshot's worst case."""
    agent.shell(f"mkdir -p /fill && mount -t tmpfs -o size={mib + 64}m tmpfs /fill && "
                f"head -c {mib << 20} /dev/urandom > /fill/data")


def control(path, message):
    reply = vmm_control.request(path, message)
    if not reply.get("ok"):
        raise RuntimeError(f"{message}: {reply}")
    return reply


def wait_for_line(path, pattern, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(path, errors="replace") as f:
                m = re.search(pattern, f.read())
            if m:
                return m
        except FileNotFoundError:
            pass
        time.sleep(0.05)
    return None


def stop(proc, timeout=120):
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def sbx(args, token):
    work = args.workdir
    machine = vmrun.Machine("sbx", args.kernel, args.image, sbx_vmm=args.sbx_vmm, vsock=True, memory=args.memory,
                            cmdline=f"{BASE_CMDLINE} sbx.token={token}")
    machine.vsock_uds = os.path.join(work, "v.sock")
    ctl = os.path.join(work, "control.sock")
    argv = machine.argv() + ["--control", ctl, "--snapshot-dir", work, "--console", f"file:{work}/sbx-console.log"]
    with open(f"{work}/sbx-boot.log", "w") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    agent = Agent("sbx", work, token)
    agent.wait()
    say("progress: sbx-vmm booted")
    fill(agent, args.fill_mib)
    say("progress: sbx-vmm guest filled")
    snaps = {}
    for mode in ("compressed", "raw"):
        path = os.path.join(work, f"vm.{mode}")
        # The compressed snapshot (restored lazily below) records the
        # working set: what the guest writes in the 500 ms before the pause.
        reply = control(ctl, {"op": "snapshot", "path": path, "mode": mode,
                              "working_set_ms": 500 if mode == "compressed" else 0})
        seconds = (reply["pause_ms"] + reply["write_ms"]) / 1000
        mib = reply["memory_bytes"] / (1 << 20)
        say(f"BENCH-SAVE: sbx-{mode} seconds={seconds:.3f} write_ms={reply['write_ms']:.0f} "
            f"pause_ms={reply['pause_ms']:.1f} working_set_mib={reply['working_set_bytes'] / (1 << 20):.1f} "
            f"memory_mib={mib:.0f} "
            f"touched_mib={(reply['memory_bytes'] - reply['zero_bytes']) / (1 << 20):.0f} "
            f"file_mib={os.path.getsize(path) / (1 << 20):.0f} "
            f"disk_mib={os.stat(path).st_blocks * 512 / (1 << 20):.0f} mb_s={mib * 1.048576 / seconds:.0f}")
        snaps[mode] = path
    control(ctl, {"op": "stop"})
    stop(proc)
    for restore_mode, snap in (("eager", "compressed"), ("lazy", "compressed"), ("private", "raw")):
        try:
            restore_sbx(args, token, restore_mode, snaps[snap])
        except (OSError, RuntimeError, TimeoutError) as e:
            say(f"BENCH-RESTORE: sbx-{restore_mode} FAILED: {e}")
            dump_logs(work)
        if restore_mode == "lazy":
            os.unlink(snaps["compressed"])
    os.unlink(snaps["raw"])


def diagnose_restore(args, proc, control, logs):
    """A restored VM that never answered: the logs' tails, the VMM's threads
    and the guest's vCPUs (vmrun's diagnosis), then SIGKILL, and the
    threads again if it has not exited 30 s later."""
    for path in logs:
        try:
            with open(path, errors="replace") as f:
                for line in f.read().splitlines()[-25:]:
                    say(f"DIAG-LOG {os.path.basename(path)}: {line}")
        except OSError as e:
            say(f"DIAG-LOG {path}: {e}")
    machine = vmrun.Machine("sbx", args.kernel, args.image, sbx_vmm=args.sbx_vmm, control=control)
    machine.proc = proc
    machine.diagnose()
    proc.kill()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        say("DIAG: sbx-vmm has not exited 30 s after SIGKILL")
        machine.control = None
        machine.diagnose()
        proc.wait()


def restore_sbx(args, token, mode, snap):
    work = args.workdir
    log_path = f"{work}/sbx-restore-{mode}.log"
    console = f"{work}/sbx-restore-{mode}-console.log"
    control = f"{work}/restore-control.sock"
    argv = [args.sbx_vmm, "--restore", snap, "--restore-mode", mode, "--vsock",
            f"cid={vmrun.GUEST_CID},uds={work}/v.sock", "--console", f"file:{console}", "--control", control]
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    agent = Agent("sbx", work, token)
    try:
        agent.wait(deadline_s=120)
    except TimeoutError:
        diagnose_restore(args, proc, control, (log_path, console))
        raise
    to_agent = time.monotonic() - t0
    setup = wait_for_line(log_path, r"VM set up in ([0-9.]+) ms", 60)
    loaded = "on-touch"
    if mode == "eager":
        loaded = f"{float(setup.group(1)) / 1000:.3f}" if setup else "?"
    elif mode == "lazy":
        m = wait_for_line(log_path, r"fully loaded from the snapshot ([0-9.]+) ms", 120)
        loaded = f"{float(m.group(1)) / 1000:.3f}" if m else "never"
    say(f"BENCH-RESTORE: sbx-{mode} first_instruction={float(setup.group(1)) / 1000 if setup else -1:.3f} "
        f"agent={to_agent:.3f} fully_loaded={loaded}")
    try:
        agent.shell("reboot")
    except ConnectionError:
        pass  # the guest can go down before the exit frame reaches us
    finally:
        stop(proc)  # the next restore needs the vsock path free


class Qmp:
    def __init__(self, path, timeout=60):
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.connect(path)
                break
            except OSError:
                self.sock.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.005)
        self.file = self.sock.makefile("rb")
        json.loads(self.file.readline())  # greeting
        self.cmd("qmp_capabilities")

    def cmd(self, name, **arguments):
        self.sock.sendall(json.dumps({"execute": name, "arguments": arguments}).encode() + b"\n")
        while True:
            reply = json.loads(self.file.readline())
            if "return" in reply:
                return reply["return"]
            if "error" in reply:
                raise RuntimeError(f"QMP {name}: {reply['error']}")


def qemu_argv(args, token, work, extra):
    machine = vmrun.Machine("qemu", args.kernel, args.image, vsock=True, memory=args.memory,
                            cmdline=f"{BASE_CMDLINE} sbx.token={token}")
    argv = machine.argv()
    argv[argv.index("-serial") + 1] = f"file:{work}/qemu-console.log"
    return argv + ["-qmp", f"unix:{work}/qmp.sock,server=on,wait=off"] + extra


def qemu(args, token):
    work = args.workdir
    snap = os.path.join(work, "vm.qemu")
    with open(f"{work}/qemu-boot.log", "w") as log:
        proc = subprocess.Popen(qemu_argv(args, token, work, []), stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT)
    agent = Agent("qemu", work, token)
    agent.wait(deadline_s=600)
    say("progress: QEMU booted")
    fill(agent, args.fill_mib)
    say("progress: QEMU guest filled")
    qmp = Qmp(f"{work}/qmp.sock")
    t = time.monotonic()
    qmp.cmd("stop")
    qmp.cmd("migrate", uri=f"exec:cat > {snap}")
    while qmp.cmd("query-migrate").get("status") not in ("completed", "failed"):
        if time.monotonic() - t > 600:
            raise RuntimeError(f"QEMU's migration to a file: {qmp.cmd('query-migrate')}")
        time.sleep(0.005)
    seconds = time.monotonic() - t
    status = qmp.cmd("query-migrate")
    mib = args.memory
    say(f"BENCH-SAVE: qemu-migrate seconds={seconds:.3f} status={status.get('status')} memory_mib={mib} "
        f"file_mib={os.path.getsize(snap) / (1 << 20):.0f} mb_s={mib * 1.048576 / seconds:.0f}")
    qmp.cmd("quit")
    stop(proc)

    t0 = time.monotonic()
    with open(f"{work}/qemu-restore.log", "w") as log:
        proc = subprocess.Popen(qemu_argv(args, token, work, ["-incoming", "defer"]),
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    qmp = Qmp(f"{work}/qmp.sock")
    qmp.cmd("migrate-incoming", uri=f"exec:cat {snap}")
    status = None
    while status != "running":
        status = qmp.cmd("query-status").get("status")
        if status == "paused" and qmp.cmd("query-migrate").get("status") == "completed":
            qmp.cmd("cont")  # the source was stopped for the save, so the state arrives paused
            continue
        if status not in ("inmigrate", "running", "prelaunch") or time.monotonic() - t0 > 300:
            raise RuntimeError(f"QEMU's incoming migration: status {status}; {qmp.cmd('query-migrate')}")
        time.sleep(0.005)
    running = time.monotonic() - t0
    Agent("qemu", work, token).wait(deadline_s=120)
    to_agent = time.monotonic() - t0
    say(f"BENCH-RESTORE: qemu-incoming first_instruction={running:.3f} agent={to_agent:.3f} "
        f"fully_loaded={running:.3f}")
    qmp.cmd("quit")
    stop(proc)
    os.unlink(snap)


def dump_logs(work):
    for name in sorted(os.listdir(work)):
        if name.endswith(".log"):
            with open(os.path.join(work, name), errors="replace") as f:
                say(f"== {name}\n" + "".join(f.readlines()[-8:]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--image", required=True)
    ap.add_argument("--sbx-vmm", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--fill-mib", type=int, default=1024)
    ap.add_argument("--vmms", default="sbx,qemu")
    args = ap.parse_args()
    args.memory = args.fill_mib + 512
    token = os.urandom(16).hex()
    try:
        for vmm in args.vmms.split(","):
            {"sbx": sbx, "qemu": qemu}[vmm](args, token)
    except Exception:
        dump_logs(args.workdir)
        raise


if __name__ == "__main__":
    main()
