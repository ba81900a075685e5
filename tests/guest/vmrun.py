#!/usr/bin/env python3
"""Runs one guest with virtio devices under sbx-vmm or QEMU -M microvm and
plays the host side of a device test next to it. Runs where /dev/kvm can boot
Linux: inside the nested harness, as the CMD of tests/nested.

The device set is given once and turned into either VMM's flags, so the same
guest (kernel, initramfs with its /sbx-run) and the same host side serve both:

  sbx-vmm: --disk PATH[,ro]  --net tap=NAME,mac=MAC  --vsock cid=3,uds=PATH  --rng
  QEMU:    virtio-blk-device, virtio-net-device on a tap, vhost-vsock-device
           (guest-cid=3), virtio-rng-device

Everything the guest prints on its console is copied to stdout (with '\\r'
removed); the host side adds lines starting with "HOST-". Marker lines from
the guest trigger host actions (e.g. "SBX-VSOCK-LISTENING: 1234" -> connect).
Exit status: the VMM's, or 124 if it had to be killed (after --timeout, or
after --silence seconds in which the guest printed nothing), or
125 if the host side could not be set up.

Scenarios (--scenario): "none" (just run), "vsock", "net". bench/virtio_runner.py
reuses Machine and VsockHost for the benchmark.
"""

import argparse
import hashlib
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

CMDLINE = ("console=ttyS0 reboot=k panic=1 nomodule i8042.noaux i8042.nomux "
           "i8042.nopnp i8042.dumbkbd quiet")
GUEST_CID = 3
# seconds a guest has to answer "CONNECT <port>" (sbx-vmm's hybrid vsock)
CONNECT_ANSWER_S = 20
# The QEMU machine closest to ours (as in bench/boot_runner.py): microvm
# without ACPI (so QEMU puts virtio_mmio.device= on the command line), no
# option ROMs or RTC, legacy PIC/PIT, ttyS0, and an i8042 for reboot=k.
QEMU_MACHINE = "microvm,x-option-roms=off,rtc=off,acpi=off,pit=on,pic=on"
# QEMU's virtio-mmio transport defaults to the legacy (0.9.5) interface;
# sbx-vmm's is virtio 1.x (VERSION_1). Compare like with like.
QEMU_MODERN_VIRTIO = ["-global", "virtio-mmio.force-legacy=false"]
# microvm,acpi=off has no PCI host; sbx-vmm's has pvpanic for poweroff and
# panic (docs/guest-layout.md). QEMU's guest skips the PCI probe entirely.
QEMU_CMDLINE_EXTRA = " pci=off"

_out_lock = threading.Lock()


def say(line):
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def host(name, text):
    say(f"HOST-{name}: {text}")


# --- the machine -------------------------------------------------------------

def direct_io_works(path):
    """True if PATH can be opened with O_DIRECT (not on tmpfs before Linux
    6.6, nor on 9p): decides QEMU's cache=none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    except OSError:
        return False
    os.close(fd)
    return True


class Machine:
    """One guest, described independently of the VMM."""

    def __init__(self, vmm, kernel, initrd, *, sbx_vmm=None, qemu="qemu-system-x86_64",
                 cpus=1, memory=256, cmdline=CMDLINE, disks=(), net=None, vsock_uds=None,
                 vsock=False, rng=False, qemu_cache="auto", qemu_aio="io_uring",
                 control=None):
        self.vmm = vmm
        self.kernel, self.initrd = kernel, initrd
        self.sbx_vmm, self.qemu = sbx_vmm, qemu
        self.cpus, self.memory, self.cmdline = cpus, memory, cmdline
        self.disks = list(disks)  # [(path, read_only)]
        self.net = net            # (tap name, mac) or None
        self.vsock = vsock
        self.vsock_uds = vsock_uds
        self.rng = rng
        self.qemu_cache, self.qemu_aio = qemu_cache, qemu_aio
        self.proc = None
        self.handlers = []        # (marker, function of the text after it)
        self.threads = []
        self.output = []
        self._reader = None
        self.control = control    # sbx-vmm's control socket, for "diagnose"
        self.last_output = time.monotonic()

    def qemu_drive_options(self, path):
        cache = self.qemu_cache
        if cache == "auto":
            cache = "none" if direct_io_works(path) else "writeback"
        return f"cache={cache},aio={self.qemu_aio}"

    def argv(self):
        if self.vmm == "sbx":
            argv = [self.sbx_vmm, "--kernel", self.kernel, "--initrd", self.initrd,
                    "--cpus", str(self.cpus), "--memory", str(self.memory),
                    "--cmdline", self.cmdline]
            # The tests make their qcow2 images themselves, so their backing
            # files are followed, as QEMU does.
            for path, ro in self.disks:
                argv += ["--disk", path + (",ro" if ro else "")
                         + (",backing=on" if image_format(path) == "qcow2" else "")]
            if self.net:
                argv += ["--net", f"tap={self.net[0]},mac={self.net[1]}"]
            if self.vsock:
                argv += ["--vsock", f"cid={GUEST_CID},uds={self.vsock_uds}"]
            if self.rng:
                argv += ["--rng"]
            if self.control:
                argv += ["--control", self.control]
            return argv
        argv = [self.qemu, "-M", QEMU_MACHINE, "-enable-kvm", "-cpu", "host",
                "-smp", str(self.cpus), "-m", str(self.memory), "-nodefaults",
                "-no-user-config", "-nographic", "-serial", "stdio", "-device", "i8042",
                "-no-reboot", "-kernel", self.kernel, "-initrd", self.initrd,
                "-append", self.cmdline + QEMU_CMDLINE_EXTRA] + QEMU_MODERN_VIRTIO
        # Disks in -device order are vda, vdb, ... (checked by the
        # virtio-blk test), as with sbx-vmm's --disk order.
        for i, (path, ro) in enumerate(self.disks):
            argv += ["-drive", f"file={path},format={image_format(path)},if=none,id=d{i},"
                     f"{self.qemu_drive_options(path)}" + (",readonly=on" if ro else ""),
                     "-device", f"virtio-blk-device,drive=d{i}"]
        if self.net:
            argv += ["-netdev", f"tap,id=n0,ifname={self.net[0]},script=no,downscript=no",
                     "-device", f"virtio-net-device,netdev=n0,mac={self.net[1]}"]
        if self.vsock:
            argv += ["-device", f"vhost-vsock-device,guest-cid={GUEST_CID}"]
        if self.rng:
            argv += ["-device", "virtio-rng-device"]
        return argv

    def on(self, marker, fn):
        """Calls fn(text after marker) in a thread when a console line holds marker."""
        self.handlers.append((marker, fn))

    def spawn(self, name, fn, *args):
        def run():
            try:
                fn(*args)
            except Exception as e:  # reported, never silent
                host("ERROR", f"{name}: {type(e).__name__}: {e}")
        t = threading.Thread(target=run, name=name, daemon=True)
        t.start()
        self.threads.append(t)
        return t

    def _read_console(self):
        for raw in self.proc.stdout:
            self.last_output = time.monotonic()
            line = raw.decode(errors="replace").rstrip("\r\n").replace("\r", "")
            self.output.append(line)
            say(line)
            for marker, fn in self.handlers:
                if marker in line:
                    self.spawn(marker, fn, line.split(marker, 1)[1].strip())

    def start(self):
        argv = self.argv()
        host("VMM-ARGV", " ".join(argv))
        self.started = time.monotonic()
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT)
        self._reader = threading.Thread(target=self._read_console, daemon=True)
        self._reader.start()

    def wait(self, timeout, silence):
        """The VMM's exit status, or 124 after killing it at the deadline or
        once the console has been silent for `silence` seconds (a stalled
        guest: these guests print as they go and finish in seconds)."""
        deadline = self.started + timeout
        status = None
        while status is None:
            now = time.monotonic()
            if now >= deadline:
                host("TIMEOUT", f"{self.vmm} still running after {timeout:.0f} s, killing it")
                break
            if now - self.last_output >= silence:
                host("TIMEOUT", f"the guest printed nothing for {silence:.0f} s "
                     f"({now - self.started:.0f} s in), killing {self.vmm}")
                break
            try:
                status = self.proc.wait(timeout=min(1.0, deadline - now))
            except subprocess.TimeoutExpired:
                pass
        if status is None:
            self.diagnose()
            self.proc.kill()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                # Stuck in the kernel (uninterruptible sleep): say so and go
                # on rather than hang until the harness's deadline.
                host("ERROR", f"{self.vmm} (pid {self.proc.pid}) survived SIGKILL for 30 s")
                self.diagnose()
                self._reader.join(timeout=1)
                return 124
            status = 124
        self._reader.join(timeout=10)
        host("VMM-EXIT", f"{status} after {time.monotonic() - self.started:.1f} s")
        return status

    def diagnose(self):
        """Where the VMM's threads wait (state, wchan, kernel stack when
        readable) and the kernel log's tail: HOST-DIAG lines."""
        pid = self.proc.pid
        try:
            tids = sorted(os.listdir(f"/proc/{pid}/task"), key=int)
        except OSError:
            tids = []
        for tid in tids:
            base = f"/proc/{pid}/task/{tid}"
            info = []
            for name in ("comm", "wchan", "stat"):
                try:
                    with open(f"{base}/{name}") as f:
                        value = f.read().strip()
                except OSError:
                    continue
                info.append(value.split()[2] if name == "stat" else value)
            host("DIAG", f"thread {tid}: " + " ".join(info))
            try:
                with open(f"{base}/stack") as f:
                    for frame in f.read().split("\n")[:12]:
                        if frame:
                            host("DIAG", f"  {frame}")
            except OSError:
                pass
        try:
            dmesg = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10).stdout
            for line in dmesg.splitlines()[-30:]:
                host("DIAG", f"dmesg: {line}")
        except (OSError, subprocess.TimeoutExpired):
            pass
        if self.control and os.path.exists(self.control):
            # The guest's side: each vCPU's RIP, interrupt state, LAPIC and
            # KVM's counters (sbx-vmm's "diagnose" op, twice, 1 s apart).
            system_map = os.path.join(os.path.dirname(self.kernel), "System.map")
            argv = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                 "vm_diagnose.py"), self.control]
            if os.path.exists(system_map):
                argv.append(system_map)
            try:
                out = subprocess.run(argv, capture_output=True, text=True, timeout=75)
                for line in (out.stdout + out.stderr).splitlines()[-40:]:
                    host("DIAG", line)
            except (OSError, subprocess.TimeoutExpired) as e:
                host("DIAG", f"vm_diagnose.py: {type(e).__name__}: {e}")
            self.diagnose_pf_spin()

    def diagnose_pf_spin(self):
        """pf_spin.py's HARNESS-BELOW line, unprefixed (run_nested reruns a
        failed run that printed one), when a vCPU spins on #PFs from below."""
        argv = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                             "tools", "pf_spin.py"), self.control, self.vmm]
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
            for line in (out.stdout + out.stderr).splitlines()[-8:]:
                say(line)
        except (OSError, subprocess.TimeoutExpired) as e:
            host("DIAG", f"pf_spin.py: {type(e).__name__}: {e}")

    def join_handlers(self, timeout=30):
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(timeout=max(0, deadline - time.monotonic()))
            if t.is_alive():
                host("ERROR", f"{t.name}: still running after the VM exited")


# --- vsock, seen from the host -----------------------------------------------

class VsockHost:
    """The host end of the guest's vsock. sbx-vmm: Firecracker's hybrid
    convention over Unix sockets (connect to UDS, "CONNECT <port>\\n", read
    "OK <host port>\\n"; the guest's connections to port P arrive at a Unix
    listener UDS_P). QEMU vhost-vsock: AF_VSOCK to CID 3, listeners on the
    host's own vsock ports."""

    def __init__(self, vmm, workdir):
        self.vmm = vmm
        self.uds = os.path.join(workdir, "v.sock") if vmm == "sbx" else None

    def listen(self, port):
        if self.vmm == "sbx":
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(f"{self.uds}_{port}")
        else:
            s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
            s.bind((socket.VMADDR_CID_ANY, port))
        s.listen(1)
        return s

    def _connect_once(self, port):
        if self.vmm != "sbx":
            return connect_vsock(GUEST_CID, port)
        return connect_hybrid(self.uds, port)

    def connect(self, port, wait=30):
        """Connects to the guest's PORT, retrying while nothing listens yet."""
        return connect_retrying(lambda: self._connect_once(port), wait)


def connect_vsock(cid, port):
    """AF_VSOCK to the guest's CID (QEMU vhost-vsock)."""
    s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
    try:
        s.connect((cid, port))
    except OSError:
        s.close()
        raise
    return s


def connect_hybrid(uds, port):
    """Firecracker's hybrid vsock convention, as sbx-vmm serves it: connect
    to the Unix socket UDS, send "CONNECT <port>\\n", read "OK <host port>\\n"."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # A wedged guest never answers CONNECT: bounded, then blocking
    # again for the caller (who sets its own timeout).
    s.settimeout(CONNECT_ANSWER_S)
    try:
        s.connect(uds)
        s.sendall(f"CONNECT {port}\n".encode())
        line = b""
        while not line.endswith(b"\n"):  # byte by byte: data may follow
            c = s.recv(1)
            if not c:
                raise ConnectionError(f"closed after CONNECT {port} (answer so far {line!r})")
            line += c
            if len(line) > 64:
                raise ConnectionError(f"answer to CONNECT {port} too long: {line!r}")
        if not line.startswith(b"OK "):
            raise ConnectionError(f"answer to CONNECT {port}: {line!r}")
    except OSError:
        s.close()
        raise
    s.settimeout(None)
    return s


def connect_retrying(connect_once, wait):
    """connect_once() until it succeeds or WAIT seconds have passed."""
    deadline = time.monotonic() + wait
    while True:
        try:
            return connect_once()
        except OSError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


def recv_line(sock, limit=4096):
    """Bytes up to and including the first newline (or EOF)."""
    data = b""
    while b"\n" not in data and len(data) < limit:
        chunk = sock.recv(limit)
        if not chunk:
            break
        data += chunk
    return data


def recv_all(sock, limit=1 << 20):
    data = b""
    while len(data) < limit:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def text(data):
    return data.decode(errors="replace").strip()


# --- scenario: vsock ---------------------------------------------------------

def scenario_vsock(machine, args, workdir):
    vs = VsockHost(args.vmm, workdir)
    big, seed = args.big_bytes, args.seed
    timeout = 600

    # Guest-initiated connections arrive at listeners made before the boot.
    l5000, l5001 = vs.listen(5000), vs.listen(5001)
    for s in (l5000, l5001):
        s.settimeout(args.timeout)

    def serve_5000():
        conn, _ = l5000.accept()
        with conn:
            conn.settimeout(timeout)
            host("VSOCK-G2H-MSG", text(recv_line(conn)))
            conn.sendall(b"hello-from-host-listener\n")

    def serve_5001():
        conn, _ = l5001.accept()
        with conn:
            conn.settimeout(timeout)
            h, n, t0 = hashlib.sha256(), 0, time.monotonic()
            buf = bytearray(1 << 18)
            # Exactly BIG bytes: the guest's half-close need not reach us.
            while n < big:
                r = conn.recv_into(buf, min(len(buf), big - n))
                if r == 0:
                    break
                h.update(memoryview(buf)[:r])
                n += r
            secs = time.monotonic() - t0
            host("VSOCK-G2H-BIG-SHA256", f"{h.hexdigest()} bytes={n} seconds={secs:.3f}")

    def on_listening(port_text):
        port = int(port_text)
        with vs.connect(port) as conn:
            conn.settimeout(timeout)
            if port == 1234:
                conn.sendall(b"hello-from-host-connect\n")
                host("VSOCK-H2G-REPLY", text(recv_line(conn)))
            elif port == 1235:
                gen = subprocess.Popen([os.path.join(args.tools, "sbx-vsock"), "gen", str(big),
                                        str(seed + 1)], stdout=subprocess.PIPE)
                n, t0 = 0, time.monotonic()
                while True:
                    chunk = gen.stdout.read(1 << 18)
                    if not chunk:
                        break
                    conn.sendall(chunk)
                    n += len(chunk)
                gen.wait()
                # Then wait for the guest to close: it has read everything.
                conn.shutdown(socket.SHUT_WR)
                recv_all(conn)
                host("VSOCK-H2G-BIG", f"sent={n} seconds={time.monotonic() - t0:.3f}")
            else:
                host("ERROR", f"unexpected listener on guest port {port}")

    machine.spawn("vsock-5000", serve_5000)
    machine.spawn("vsock-5001", serve_5001)
    machine.on("SBX-VSOCK-LISTENING:", on_listening)


# --- scenario: net -----------------------------------------------------------

TAP, HOST_IP, GUEST_IP, MAC = "sbxtap0", "172.31.0.1", "172.31.0.2", "52:54:00:12:34:56"
TUNSETIFF, TUNSETPERSIST, IFF_TAP, IFF_NO_PI = 0x400454CA, 0x400454CB, 0x0002, 0x1000


def ip_command():
    for c in (shutil.which("ip"), "/usr/sbin/ip", "/sbin/ip", "/bin/ip"):
        if c and os.access(c, os.X_OK):
            return [c]
    return ["busybox", "ip"]


def make_tap(name, address):
    """A persistent tap NAME with ADDRESS/24, up (needs root, /dev/net/tun)."""
    import fcntl
    with open("/dev/net/tun", "rb+", buffering=0) as tun:
        ifr = struct.pack("16sH22x", name.encode(), IFF_TAP | IFF_NO_PI)
        fcntl.ioctl(tun, TUNSETIFF, ifr)
        fcntl.ioctl(tun, TUNSETPERSIST, 1)
    ip = ip_command()
    subprocess.run(ip + ["addr", "add", f"{address}/24", "dev", name], check=True)
    subprocess.run(ip + ["link", "set", name, "up"], check=True)


def delete_tap(name):
    subprocess.run(ip_command() + ["link", "del", name], stderr=subprocess.DEVNULL)


def scenario_net(machine, args, workdir):
    make_tap(TAP, HOST_IP)
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((HOST_IP, 7000))
    server.listen(1)
    server.settimeout(args.timeout)

    def serve_7000():
        conn, peer = server.accept()
        with conn:
            conn.settimeout(120)
            host("NET-PEER", peer[0])
            # busybox nc half-closes after its line: read to EOF, answer.
            host("NET-FROM-GUEST", text(recv_all(conn)))
            conn.sendall(b"hello-from-host-tcp\n")

    def on_listening(port_text):
        # Under the guest's 120 s `timeout nc -l`, generous under the harness.
        port, deadline = int(port_text), time.monotonic() + 100
        while True:  # busybox nc says nothing when it listens: retry
            try:
                conn = socket.create_connection((GUEST_IP, port), timeout=10)
                break
            except OSError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.3)
        with conn:
            conn.settimeout(120)
            conn.sendall(b"hello-from-host-tcp-connect\n")
            # The guest's nc sends its line and half-closes; then we close.
            host("NET-REPLY-FROM-GUEST", text(recv_all(conn)))

    machine.spawn("net-7000", serve_7000)
    machine.on("SBX-NET-LISTENING:", on_listening)
    return lambda: delete_tap(TAP)


# --- main --------------------------------------------------------------------

def image_format(path):
    """qcow2 for a file starting with the qcow2 magic, else raw."""
    with open(path, "rb") as f:
        return "qcow2" if f.read(4) == b"QFI\xfb" else "raw"


def disk_spec(spec):
    path, _, flags = spec.partition(",")
    if flags not in ("", "ro"):
        raise argparse.ArgumentTypeError(f"disk flags must be empty or 'ro': {spec}")
    return (os.path.abspath(path), flags == "ro")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vmm", choices=("sbx", "qemu"), required=True)
    ap.add_argument("--sbx-vmm", help="path of sbx-vmm (with --vmm sbx)")
    ap.add_argument("--qemu", default="qemu-system-x86_64")
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--initrd", required=True)
    ap.add_argument("--cpus", type=int, default=1)
    ap.add_argument("--memory", type=int, default=256)
    ap.add_argument("--cmdline", default=CMDLINE)
    ap.add_argument("--disk", action="append", type=disk_spec, default=[],
                    help="PATH[,ro]; the first is /dev/vda")
    ap.add_argument("--rng", action="store_true")
    ap.add_argument("--scenario", choices=("none", "vsock", "net"), default="none",
                    help="vsock and net add their device and play the host side")
    ap.add_argument("--tools", help="directory of the static guest tools (sbx-vsock)")
    ap.add_argument("--big-bytes", type=int, default=100 << 20)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--qemu-cache", default="auto", help="auto (none if O_DIRECT works), none, writeback")
    ap.add_argument("--qemu-aio", default="io_uring")
    ap.add_argument("--timeout", type=float, default=600, help="seconds for the whole VM run")
    ap.add_argument("--silence", type=float, default=180,
                    help="seconds without console output after which the guest counts as stalled")
    ap.add_argument("--sigterm-on", metavar="MARKER",
                    help="send the VMM SIGTERM when a console line holds MARKER; prints "
                         "HOST-SIGTERM-EXIT: how long it took to exit")
    args = ap.parse_args()
    if args.vmm == "sbx" and not args.sbx_vmm:
        ap.error("--vmm sbx needs --sbx-vmm PATH")

    # Unix sockets cannot live on the 9p project share: a private /tmp.
    workdir = tempfile.mkdtemp(prefix="sbx-vmrun.", dir="/tmp")
    machine = Machine(args.vmm, args.kernel, args.initrd, sbx_vmm=args.sbx_vmm, qemu=args.qemu,
                      cpus=args.cpus, memory=args.memory, cmdline=args.cmdline, disks=args.disk,
                      rng=args.rng, qemu_cache=args.qemu_cache, qemu_aio=args.qemu_aio,
                      control=os.path.join(workdir, "control.sock") if args.vmm == "sbx" else None)
    cleanup = None
    try:
        if args.scenario == "vsock":
            machine.vsock = True
            machine.vsock_uds = os.path.join(workdir, "v.sock")
            scenario_vsock(machine, args, workdir)
        elif args.scenario == "net":
            machine.net = (TAP, MAC)
            cleanup = scenario_net(machine, args, workdir)
    except Exception as e:
        host("ERROR", f"host-side setup of {args.scenario}: {type(e).__name__}: {e}")
        return 125
    sigterm_at = []
    if args.sigterm_on:
        def send_sigterm(_):
            if not sigterm_at:
                sigterm_at.append(time.monotonic())
                host("SIGTERM", f"sent to {args.vmm} (pid {machine.proc.pid})")
                machine.proc.send_signal(signal.SIGTERM)
        machine.on(args.sigterm_on, send_sigterm)
    try:
        machine.start()
        status = machine.wait(args.timeout, args.silence)
        if sigterm_at:
            host("SIGTERM-EXIT", f"{time.monotonic() - sigterm_at[0]:.2f} s, status {status}")
        machine.join_handlers()
    finally:
        if cleanup:
            cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
