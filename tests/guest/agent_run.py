#!/usr/bin/env python3
"""Boots a guest image that holds sbx-agent (images/build rootfs-slim or minimal)
under sbx-vmm and then under QEMU -M microvm, in the same level-1 run, and
times each boot from the VMM's start. Runs where /dev/kvm can boot Linux:
inside the nested harness, as the CMD of tests/nested.

  rootfs:  the ext4 image is copied once from the (9p) project or cache into
           level 1's /tmp, changed there with `debugfs -w -f CMDS` if asked
           (test-only units), and each VMM boots its own copy of that as
           /dev/vda with root=/dev/vda rw init=/lib/systemd/systemd.
  minimal: the initramfs is the guest's only file system.

Both get a vsock device (guest CID 3) with a host listener on port 53, where
the agent announces itself: sbx-vmm's hybrid Unix socket (PATH_53), or
AF_VSOCK in level 1 for QEMU's vhost-vsock (as in vmrun.py).

Each VMM's console and the host side's lines ("HOST-...") go to stdout,
prefixed by "[sbx] " or "[qemu] ", and to LOGDIR/<vmm>.log without prefix.
At the end, one "HOST-TIME: <vmm> <event> <seconds>" line per event seen:
  first-line   the first console line (kernel or init)
  init         SBX-BOOTED (minimal image's /init)
  agent-start  the agent's first start: SBX-FAKE-AGENT-START, or for the
               real agent the minimal /init's SBX-AGENT-START line
  announce     the agent's connection to host port 53 was accepted
  report       SBX-ROOTFS-STATE (the rootfs test unit: boot finished)
  exit         the VMM exited
and "HOST-VMM-TIMER: <vmm> <ms>" for sbx-vmm's own boot timer line.
With --hello TOKEN (the real agent), the host then speaks the agent
protocol on port 52: hello, health, and one exec (HOST-HELLO, HOST-HEALTH,
HOST-EXEC-OUT, HOST-EXEC-END lines).
Exit status: 0 if every VMM exited 0 (or was stopped as asked by
--stop-after-announce), else the first non-zero status.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the (shared) source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vmrun  # noqa: E402
from agent_frames import recv_frame, send_frame  # noqa: E402

BASE_CMDLINE = ("console=ttyS0 reboot=k panic=1 i8042.noaux i8042.nomux "
                "i8042.nopnp i8042.dumbkbd quiet")
ROOTFS_CMDLINE = "root=/dev/vda rw rootfstype=ext4 init=/lib/systemd/systemd"
# seconds for the guest's own view of a stall (through the agent)
GUEST_DIAG_LIMIT_S = 90
EVENTS = [
    ("first-line", None),
    ("init", "SBX-BOOTED"),
    ("agent-start", "SBX-FAKE-AGENT-START:"),
    ("agent-start", "SBX-AGENT-START:"),
    ("report", "SBX-ROOTFS-STATE:"),
]


def talk_to_agent(vs, token, user, emit):
    """With the real agent: hello with the boot's token, health, and one
    exec as USER that shows the env file's variables and creates
    /run/sbx-test-exec-done (the rootfs test unit waits for it)."""
    with vs.connect(52, wait=60) as conn:
        conn.settimeout(120)
        send_frame(conn, {"type": "hello", "version": 1, "token": token})
        emit(f"HOST-HELLO: {recv_frame(conn)[1].decode(errors='replace')}")
        send_frame(conn, {"type": "request", "op": "health"})
        emit(f"HOST-HEALTH: {recv_frame(conn)[1].decode(errors='replace')}")
        send_frame(conn, {"type": "request", "op": "exec", "user": user, "argv": [
            "sh", "-c", 'echo "SBX_TEST_ENV=$SBX_TEST_ENV uid=$(id -u) home=$HOME"; '
            'if [ "$(id -u)" = 0 ]; then touch /run/sbx-test-exec-done; '
            'else sudo -n touch /run/sbx-test-exec-done; fi']})
        out = b""
        while True:
            kind, body = recv_frame(conn)
            if kind == 2 and body[0] == 1:
                out += body[9:]
            elif kind == 1:
                message = json.loads(body)
                if message.get("type") in ("exit", "error"):
                    emit(f"HOST-EXEC-OUT: {out.decode(errors='replace').strip()}")
                    emit(f"HOST-EXEC-END: {json.dumps(message, sort_keys=True)}")
                    return


def wait_or_diagnose(machine, args, emit, diagnose_inside):
    """The VMM's exit status; or, at the deadline or after --silence
    seconds without a console line, what the guest was doing (from inside
    through the agent when it had announced itself, and sbx-vmm's vCPU,
    interrupt and UART state through vmrun's diagnosis), then SIGKILL and
    124."""
    deadline = machine.started + args.timeout
    while True:
        now = time.monotonic()
        if now >= deadline:
            why = f"still running after {args.timeout:.0f} s"
            break
        if now - machine.last_output >= args.silence:
            why = f"printed nothing for {args.silence:.0f} s ({now - machine.started:.0f} s in)"
            break
        try:
            return machine.proc.wait(timeout=min(1.0, deadline - now))
        except subprocess.TimeoutExpired:
            pass
    emit(f"HOST-TIMEOUT: {machine.vmm} {why}, diagnosing and killing it")

    def inside():
        try:
            diagnose_inside()
        except Exception as e:  # reported, never silent
            emit(f"HOST-DIAG: through the agent: {type(e).__name__}: {e}")
    # a wedged guest must not wedge its diagnosis: bounded, then the VMM's view
    asker = threading.Thread(target=inside, name="diagnose-inside", daemon=True)
    asker.start()
    asker.join(timeout=GUEST_DIAG_LIMIT_S)
    if asker.is_alive():
        emit(f"HOST-DIAG: through the agent: no answer within {GUEST_DIAG_LIMIT_S} s")
    machine.diagnose()
    machine.proc.kill()
    machine.proc.wait()
    return 124


# What a stuck boot waits for, seen from inside (run as root by the agent).
GUEST_DIAG_SCRIPT = (
    "systemctl list-jobs --no-pager 2>&1 | head -20; "
    "systemctl --failed --no-pager --no-legend 2>&1 | head; "
    "ps -eo pid,stat,wchan:28,etime,args --sort=start_time 2>&1 | grep -v ' \\[' | tail -25; "
    "grep -E '^ *(4|TTY|ttyS)' /proc/interrupts; cat /proc/tty/driver/serial 2>&1 | tail -4; "
    "dmesg 2>&1 | tail -8")


def diagnose_guest(vs, args, emit):
    """HOST-GUEST-DIAG lines: the guest's pending systemd jobs, processes,
    serial interrupts and kernel log, through the agent (port 52), bounded
    to 60 s. Needs the real agent (--hello)."""
    if not args.hello:
        return
    with vs.connect(52, wait=10) as conn:
        conn.settimeout(60)
        send_frame(conn, {"type": "hello", "version": 1, "token": args.hello})
        recv_frame(conn)
        send_frame(conn, {"type": "request", "op": "exec", "user": "root",
                          "argv": ["sh", "-c", GUEST_DIAG_SCRIPT]})
        out = b""
        while True:
            kind, body = recv_frame(conn)
            if kind == 2 and body[0] in (1, 2):
                out += body[9:]
            elif kind == 1 and json.loads(body).get("type") in ("exit", "error"):
                break
    for line in out.decode(errors="replace").splitlines():
        emit(f"HOST-GUEST-DIAG: {line}")


class ImageMachine(vmrun.Machine):
    """vmrun.Machine without an initrd when none is given (disk boot)."""

    def argv(self):
        argv = super().argv()
        if self.initrd is None:
            for flag in ("--initrd", "-initrd"):
                if flag in argv:
                    i = argv.index(flag)
                    del argv[i:i + 2]
        return argv


def run_one(vmm, args, image_copy, out):
    """Boots once under VMM; returns (status, {event: seconds})."""
    workdir = tempfile.mkdtemp(prefix=f"sbx-agentrun-{vmm}.", dir="/tmp")
    lock = threading.Lock()
    times = {}

    def emit(line):
        out.write(line + "\n")
        out.flush()
        vmrun.say(f"[{vmm}] {line}")

    def mark(event):
        with lock:
            if event not in times:
                times[event] = time.monotonic() - machine.started

    cmdline = BASE_CMDLINE
    if args.kind == "rootfs":
        cmdline += " " + ROOTFS_CMDLINE
    if args.cmdline_extra:
        cmdline += " " + args.cmdline_extra
    machine = ImageMachine(vmm, args.kernel, args.image if args.kind == "minimal" else None,
                           sbx_vmm=args.sbx_vmm, cpus=args.cpus, memory=args.memory,
                           cmdline=cmdline,
                           disks=[(image_copy, False)] if args.kind == "rootfs" else [])
    machine.vsock = True
    machine.vsock_uds = os.path.join(workdir, "v.sock")
    if vmm == "sbx":
        machine.control = os.path.join(workdir, "control.sock")  # for "diagnose"
    vs = vmrun.VsockHost(vmm, workdir)
    listener = vs.listen(53)
    listener.settimeout(args.timeout)
    announced = threading.Event()
    connections = []

    def serve_announce():
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        mark("announce")
        connections.append(conn)  # kept open until the VM has ended
        conn.settimeout(60)  # the message follows the connection; generous under the harness
        data = b""
        try:
            while len(data) < 4096 and b"\n" not in data:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                data += chunk
                if b"}" in data:  # the real agent's JSON ready message
                    break
        except OSError as e:
            emit(f"HOST-ANNOUNCE-ERROR: {type(e).__name__}: {e}")
        emit(f"HOST-ANNOUNCE: {data.decode(errors='replace').strip()!r}")
        if args.hello:
            try:
                talk_to_agent(vs, args.hello, args.exec_user, emit)
            except Exception as e:  # reported, never silent
                emit(f"HOST-ERROR: talking to the agent: {type(e).__name__}: {e}")
        announced.set()

    threading.Thread(target=serve_announce, daemon=True).start()

    # Console lines: into the log, and timestamps of the events.
    def read_console():
        for raw in machine.proc.stdout:
            machine.last_output = time.monotonic()
            line = raw.decode(errors="replace").rstrip("\r\n").replace("\r", "")
            mark("first-line")
            for event, marker in EVENTS:
                if marker and marker in line:
                    mark(event)
            if "guest boot time:" in line and "vmm-timer" not in times:
                try:
                    times["vmm-timer"] = float(line.split("guest boot time:")[1].split()[0]) / 1000
                except (IndexError, ValueError):
                    pass
            emit(line)

    emit(f"HOST-VMM-ARGV: {' '.join(machine.argv())}")
    machine.started = time.monotonic()
    machine.proc = subprocess.Popen(machine.argv(), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    reader = threading.Thread(target=read_console, daemon=True)
    reader.start()

    stopped = False
    if args.stop_after_announce:
        deadline = time.monotonic() + args.timeout
        while machine.proc.poll() is None and time.monotonic() < deadline:
            if announced.wait(0.2):
                # A deliberate duration, not a wait for a condition: the VM
                # runs on this long before the host stops it.
                time.sleep(args.stop_after_announce)
                emit(f"HOST-STOP: agent announced{' and answered' if args.hello else ''}, "
                     f"stopping {vmm} after {args.stop_after_announce} s more")
                machine.proc.terminate()
                stopped = True
                break
    status = wait_or_diagnose(machine, args, emit,
                              lambda: diagnose_guest(vs, args, emit) if "announce" in times else None)
    times["exit"] = time.monotonic() - machine.started
    reader.join(timeout=10)
    emit(f"HOST-VMM-EXIT: {status}{' (stopped by the host)' if stopped else ''} after {times['exit']:.2f} s")
    for c in connections:
        c.close()
    listener.close()
    shutil.rmtree(workdir, ignore_errors=True)
    if stopped:
        status = 0
    return status, times


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kind", choices=("rootfs", "minimal"), required=True)
    ap.add_argument("--image", required=True,
                    help="rootfs: the .ext4 or a sparse tar holding rootfs.ext4; minimal: the .cpio.gz")
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--sbx-vmm", required=True)
    ap.add_argument("--vmms", default="sbx,qemu", help="comma-separated, in boot order")
    ap.add_argument("--cpus", type=int, default=1)
    ap.add_argument("--memory", type=int, default=512)
    ap.add_argument("--cmdline-extra", default="")
    ap.add_argument("--debugfs", help="rootfs: debugfs -w command file applied to the copy")
    ap.add_argument("--logdir", required=True)
    ap.add_argument("--stop-after-announce", type=float, default=0,
                    help="stop the VMM this many seconds after the agent announced itself "
                         "(and answered, with --hello)")
    ap.add_argument("--hello", metavar="TOKEN",
                    help="after the announcement, talk to the (real) agent on port 52: hello "
                         "with TOKEN, health, an exec as --exec-user (HOST-HELLO/HEALTH/EXEC-* lines)")
    ap.add_argument("--exec-user", default="user")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per boot")
    ap.add_argument("--silence", type=float, default=240,
                    help="a console silent this long is a stalled guest: diagnosed and killed")
    args = ap.parse_args()

    pristine = None
    if args.kind == "rootfs":
        # 9p is slow and cannot find holes (a plain copy reads all 2 GiB):
        # the image comes as a sparse tar (tar -S, made on the host), which
        # unpacks into level 1's tmpfs with the holes; or, slower, as the
        # image itself. Then one copy of that per VMM (tmpfs to tmpfs).
        tmp = tempfile.mkdtemp(prefix="sbx-agentrun.", dir="/tmp")
        pristine = os.path.join(tmp, "rootfs.ext4")
        t0 = time.monotonic()
        if args.image.endswith(".tar"):
            subprocess.run(["tar", "-C", tmp, "-xSf", args.image], check=True)
            if not os.path.exists(pristine):
                vmrun.say(f"HOST-ERROR: {args.image} holds no rootfs.ext4")
                return 125
        else:
            subprocess.run(["cp", "--sparse=always", args.image, pristine], check=True)
        vmrun.say(f"HOST-COPY: {args.image} -> {pristine} in {time.monotonic() - t0:.1f} s")
        if args.debugfs:
            r = subprocess.run(["debugfs", "-w", "-f", args.debugfs, pristine],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            text = r.stdout.decode(errors="replace")
            bad = [ln for ln in text.splitlines()
                   if ln and not ln.startswith(("debugfs", "Allocated inode")) and ln.strip()]
            if r.returncode != 0 or bad:
                vmrun.say("HOST-ERROR: debugfs: " + " | ".join(bad or [f"exit {r.returncode}"]))
                return 125

    final = 0
    summary = []
    for vmm in args.vmms.split(","):
        image_copy = None
        if pristine:
            image_copy = os.path.join(os.path.dirname(pristine), f"{vmm}.ext4")
            subprocess.run(["cp", "--sparse=always", pristine, image_copy], check=True)
        with open(os.path.join(args.logdir, f"{vmm}.log"), "w") as out:
            status, times = run_one(vmm, args, image_copy, out)
        if image_copy:
            os.unlink(image_copy)
        final = final or status
        for event in ("first-line", "init", "agent-start", "announce", "report", "exit"):
            if event in times:
                summary.append(f"HOST-TIME: {vmm} {event} {times[event]:.3f}")
        if "vmm-timer" in times:
            summary.append(f"HOST-VMM-TIMER: {vmm} {times['vmm-timer'] * 1000:.1f}")
    if pristine:
        shutil.rmtree(os.path.dirname(pristine), ignore_errors=True)
    for line in summary:
        vmrun.say(line)
    return final


if __name__ == "__main__":
    sys.exit(main())
