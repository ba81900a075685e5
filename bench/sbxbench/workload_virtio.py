"""What the blk and vsock workloads share (ported from bench/virtio_runner.py):
a boot per measurement of the initramfs with bench/virtio_guest.sh as
/sbx-run, the guest's result lines, the host's side of the vsock
transfers, and the workload's skeleton (plan -> commands -> rotating rounds
-> statuses -> clean-up; workload_common's pieces).

Each round boots every path once, in rotation (workload_boot.rotation).
The guest runs the steps named on its kernel command line (`sbxbench.steps=
blk` or `vsock`, with `sbxbench.blk_mib`, `rand_s`, `vsock_bytes`: see
bench/virtio_guest.sh), prints its results and failures as console lines
and reboots; the VMM exits (reboot=k). A boot is a failed run when the
VMM does not exit within --timeout, the guest reports a failed step or a
missing result, or its /sbx-run exits non-zero.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from . import guest_agent as ga
from .process_timing import WatchedRun, run_watched
from .vmm_commands import DEFAULT_CMDLINE, BootCommand, BootConfig, NotApplicable
from .vmm_spec import VmmSpec
from .workload_common import PathSpec, fail_paths, finish_statuses, plan_paths, run_rounds

DEFAULT_MEMORY_MIB = 256   # bench/virtio_runner.py's
DEFAULT_TIMEOUT_S = 300.0  # per boot, bench/virtio_runner.py's
G2H_PORT, H2G_PORT = 5002, 1236  # bench/virtio_guest.sh's ports (host's listener, guest's)
CHUNK = 1 << 20
SOCKET_TIMEOUT_S = 120     # bench/virtio_runner.py's per-transfer socket timeout

MARKERS = {"h2g": f"SBX-VSOCK-LISTENING: {H2G_PORT}".encode(), "exit": b"SBX-RUN-EXIT: "}
_BLK_LINE = re.compile(r"SBX-BENCH: blk-(\w+) .*?MBps=([0-9.]+) iops=([0-9.]+)")
_FAIL_LINE = re.compile(r"SBX-BENCH-FAIL: (.*)")
_RUN_EXIT = re.compile(r"SBX-RUN-EXIT: (-?[0-9]+)")
_DEVICE_LINE = re.compile(r"(SBX-BENCH-(?:QUEUE|FEATURES): .*)")


@dataclass(frozen=True)
class VirtioOptions:
    kernel: str
    initrd: str   # the initramfs with bench/virtio_guest.sh as /sbx-run and the guest tools
    cpus: int
    memory_mib: int
    runs: int
    warmup: int
    timeout_s: float = DEFAULT_TIMEOUT_S
    cmdline: str = DEFAULT_CMDLINE
    blk_mib: int = 128
    rand_seconds: int = 10
    disk_mib: int = 256
    formats: tuple[str, ...] = ("raw",)
    qemu_cache: str = "auto"
    vsock_mib: int = 64


def guest_cmdline(base: str, words: dict[str, object]) -> str:
    """The kernel command line with bench/virtio_guest.sh's sbxbench.KEY=VALUE words."""
    return base + "".join(f" sbxbench.{key}={value}" for key, value in words.items())


@dataclass
class GuestReport:
    """What the guest printed: sbx-blkbench's results {mode: (MB/s, IOPS)},
    its failed steps, /sbx-run's exit status and the device lines."""
    blk: dict[str, tuple[float, float]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    exit_status: int | None = None
    device_lines: list[str] = field(default_factory=list)


def parse_guest(text: str) -> GuestReport:
    report = GuestReport()
    for line in text.replace("\r", "").splitlines():
        if m := _BLK_LINE.search(line):
            report.blk[m.group(1)] = (float(m.group(2)), float(m.group(3)))
        elif m := _FAIL_LINE.search(line):
            report.failures.append(m.group(1).strip())
        elif m := _RUN_EXIT.search(line):
            report.exit_status = int(m.group(1))
        elif m := _DEVICE_LINE.search(line):
            report.device_lines.append(m.group(1).strip())
    return report


def guest_problem(run: WatchedRun, report: GuestReport, timeout: float) -> str | None:
    """Why a boot's results cannot count, or None."""
    if run.spawn_error:
        return run.spawn_error
    if report.failures:
        return "the guest's steps failed: " + "; ".join(report.failures)
    if report.exit_status is None:
        if run.timed_out:
            return f"no SBX-RUN-EXIT within {timeout:.0f} s"
        return f"the VMM exited with status {run.status} before the guest's SBX-RUN-EXIT"
    if report.exit_status != 0:
        return f"the guest's /sbx-run exited with status {report.exit_status}"
    if run.timed_out:
        return f"the VMM did not exit within {timeout:.0f} s of its start after the guest's reboot"
    return None


def boot(command: BootCommand, timeout: float, on_marker: Callable[[str], None] | None = None
         ) -> tuple[WatchedRun, GuestReport]:
    run = run_watched(command.argv, markers=MARKERS, timeout=timeout, env=command.env, on_marker=on_marker)
    return run, parse_guest(run.text())


def output_tail(run: WatchedRun, lines: int = 30) -> str:
    return "\n".join("  | " + line for line in run.text().splitlines()[-lines:])


class VsockTransfers:
    """The host's side of bench/virtio_guest.sh's vsock step, as
    bench/virtio_runner.py played it: the guest connects to the host's port
    5002 and sends `nbytes` zeros (timed from the accept to the last byte);
    then it listens on 1236 and the host connects, sends `nbytes` and
    shuts its side down (timed from the connection until the guest has
    read everything and closed). sbx-vmm and Firecracker: the hybrid Unix
    socket `uds` (the guest's connections arrive at `uds`_5002); QEMU and
    kvmtool: AF_VSOCK, the guest at CID `cid`."""

    def __init__(self, nbytes: int, *, uds: str | None = None, cid: int | None = None,
                 timeout: float = DEFAULT_TIMEOUT_S):
        self.nbytes, self.uds, self.timeout = nbytes, uds, timeout
        self.endpoint = ga.Endpoint(uds=uds) if uds else ga.Endpoint(cid=cid)
        self.seconds: dict[str, float] = {}
        self.errors: list[str] = []
        self.threads: list[threading.Thread] = []
        self.listener: socket.socket | None = None

    def listen(self) -> None:
        """The guest -> host listener, before the VMM starts."""
        if self.uds:
            path = f"{self.uds}_{G2H_PORT}"
            if os.path.exists(path):
                os.unlink(path)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(path)
        else:
            s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
            s.bind((socket.VMADDR_CID_ANY, G2H_PORT))
        s.listen(1)
        s.settimeout(self.timeout)
        self.listener = s
        self._thread("guest->host", self._guest_to_host)

    def on_marker(self, name: str) -> None:
        if name == "h2g":
            self._thread("host->guest", self._host_to_guest)

    def _thread(self, name: str, fn: Callable[[], None]) -> None:
        def run() -> None:
            try:
                fn()
            except Exception as e:  # reported with the boot's results
                self.errors.append(f"{name}: {type(e).__name__}: {e}")
        t = threading.Thread(target=run, name=name, daemon=True)
        t.start()
        self.threads.append(t)

    def _guest_to_host(self) -> None:
        assert self.listener is not None
        conn, _ = self.listener.accept()
        with conn:
            conn.settimeout(SOCKET_TIMEOUT_S)
            buf = bytearray(CHUNK)
            got, started = 0, time.monotonic()
            while got < self.nbytes:
                n = conn.recv_into(buf)
                if n == 0:
                    break
                got += n
            seconds = time.monotonic() - started
        if got != self.nbytes:
            raise RuntimeError(f"{got} of {self.nbytes} bytes arrived")
        self.seconds["guest_to_host"] = seconds

    def _host_to_guest(self) -> None:
        with self.endpoint.connect(H2G_PORT, wait=30) as conn:
            conn.settimeout(SOCKET_TIMEOUT_S)
            chunk = bytes(CHUNK)
            started, sent = time.monotonic(), 0
            while sent < self.nbytes:
                part = chunk[:min(CHUNK, self.nbytes - sent)]
                conn.sendall(part)
                sent += len(part)
            # Until the guest has read everything and closed.
            conn.shutdown(socket.SHUT_WR)
            while conn.recv(65536):
                pass
            self.seconds["host_to_guest"] = time.monotonic() - started

    def finish(self, wait: float = 30.0) -> None:
        """After the boot: ends the accept, waits for the transfers."""
        if self.listener is not None:
            try:
                self.listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.listener.close()
            if self.uds and os.path.exists(f"{self.uds}_{G2H_PORT}"):
                os.unlink(f"{self.uds}_{G2H_PORT}")
        deadline = time.monotonic() + wait
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                self.errors.append(f"{t.name}: still running {wait:.0f} s after the VM exited")

    def mb_per_s(self) -> dict[str, float]:
        """MB/s (10^6 bytes) each way."""
        return {f"{way}_mb_s": self.nbytes / 1e6 / s for way, s in self.seconds.items() if s > 0}


@dataclass
class Prepared:
    """A path ready to run: its command, the measurement of one boot, and
    notes (`seen`: what the guest said about its devices, filled in by the
    first boot that printed it)."""
    command: BootCommand
    measure: Callable[[], dict[str, float]]
    notes: list[str] = field(default_factory=list)
    seen: list[str] = field(default_factory=list)

    def saw(self, report: GuestReport) -> None:
        if not self.seen and report.device_lines:
            self.seen.extend(f"the guest saw: {line}" for line in report.device_lines)


class Workspace:
    """The work folder of a run (disks, sockets, config files): $TMPDIR or /tmp."""

    def __init__(self, workload: str):
        self.dir = tempfile.mkdtemp(prefix=f"sbx-bench-{workload}.")

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def run_booted(workload: str, specs: list[VmmSpec], opts: VirtioOptions, cmdline: str, *,
               paths_of: Callable[[VmmSpec], list[PathSpec]],
               unsupported: Callable[[VmmSpec], str | None],
               path_problem: Callable[[VmmSpec, PathSpec], str | None] | None,
               prepare: Callable[[VmmSpec, PathSpec, BootConfig, Workspace], Prepared | NotApplicable],
               setup: Callable[[Workspace], None] | None,
               summary: Callable[[dict[str, float]], str], unusable: Callable[[VmmSpec], str | None],
               log: Callable[[str], None]) -> dict:
    """The skeleton of blk and vsock: every path's entry (n/a ones with the
    reason), `setup` once (blk: the scratch disk), each runnable path's
    command (`prepare`: the boot workload's command of `cmdline` with the
    workload's device), the rotating rounds, the statuses; the work folder
    is removed at the end. Returns the `vmms` and `runs` parts of a result."""
    vmms, runnable = plan_paths(specs, paths_of, unusable=unusable, log=log, unsupported=unsupported,
                                path_kinds=("sbx", "qemu", "kvmtool", "firecracker", "cloud-hypervisor"),
                                path_problem=path_problem)
    ws = Workspace(workload)
    try:
        by_name = {s.name: s for s in specs}
        prepared: dict[str, Prepared] = {}
        if runnable and setup is not None:
            try:
                setup(ws)
            except Exception as e:  # e.g. no room for the scratch disk: every path failed, said why
                reason = f"the set-up failed: {type(e).__name__}: {e}"
                log(f"FAILED: {reason}")
                fail_paths(vmms, [p.name for paths in runnable.values() for p in paths], reason)
                runnable = {}
        cfg = BootConfig(opts.kernel, opts.initrd, cmdline, opts.cpus, opts.memory_mib, ws.dir)
        for name, paths in runnable.items():
            for p in paths:
                ready = prepare(by_name[name], p, cfg, ws)
                e = next(v for v in vmms if v["name"] == p.name)
                if isinstance(ready, NotApplicable):
                    log(f"{p.name}: n/a ({ready.reason})")
                    e.update(status="n/a", reason=ready.reason, notes=[ready.reason])
                    continue
                prepared[p.name] = ready
                e["argv"] = ready.command.argv
        runs = run_rounds({name: ready.measure for name, ready in prepared.items()}, runs=opts.runs,
                          warmup=opts.warmup, log=log, summary=summary)
        for e in vmms:
            if e["name"] in prepared:
                ready = prepared[e["name"]]
                e["notes"] = list(ready.command.notes) + ready.notes + ready.seen
        finish_statuses(vmms, runs)
        return {"vmms": vmms, "runs": runs}
    finally:
        ws.remove()

