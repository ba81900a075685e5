"""The origin guest of the snapshot workloads: booted, filled with FILL_MIB
of random data and saved, by sbx-vmm or by QEMU (bench/snapshot_runner.py's
first half). Between saves an origin is paused, so it does not run
beside another VMM's measurement. The exec workload runs its execs in an
origin that is never saved, resumed for its rounds only.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from typing import Callable

from . import guest_agent as ga
from . import qmp as qmpmod
from .guest_agent import redacted
from .snapshot_commands import GUEST_CID, Guest, qemu_argv, sbx_origin_argv
from .vmm_spec import VmmSpec

BOOT_AGENT_S = 600        # snapshot_runner.py: the origin's agent within 600 s
WORKING_SET_MS = 500      # the compressed snapshot records the guest's last 500 ms of writes
MIB = 1 << 20


@dataclass(frozen=True)
class Setup:
    """`cid`: the guest's vsock CID under QEMU (vhost-vsock: one guest per
    CID on a host); sbx-vmm's guest is reached on its Unix socket."""
    guest: Guest
    fill_mib: int
    vmm_cpus: tuple[int, ...] | None
    log: Callable[[str], None]
    cid: int = GUEST_CID


def file_sizes(path: str) -> tuple[int, int]:
    """(apparent size, allocated bytes) of a snapshot file."""
    st = os.stat(path)
    return st.st_size, st.st_blocks * 512


def sbx_save_figures(reply: dict, file_bytes: int, disk_bytes: int) -> dict[str, float]:
    """Figures of the control socket's `snapshot` reply (docs/vmm-control.md:
    memory_bytes, zero_bytes, working_set_bytes, pause_ms, write_ms)."""
    save_ms = float(reply["pause_ms"]) + float(reply["write_ms"])
    memory_mib = reply["memory_bytes"] / MIB
    return {"save_ms": save_ms, "pause_ms": float(reply["pause_ms"]), "write_ms": float(reply["write_ms"]),
            "memory_mib": memory_mib, "touched_mib": (reply["memory_bytes"] - reply["zero_bytes"]) / MIB,
            "working_set_mib": reply.get("working_set_bytes", 0) / MIB,
            "file_mib": file_bytes / MIB, "disk_mib": disk_bytes / MIB,
            "throughput_mb_s": memory_mib * 1.048576 / (save_ms / 1000) if save_ms > 0 else 0.0}


def qemu_save_figures(seconds: float, memory_mib: int, file_bytes: int, disk_bytes: int,
                      info: dict) -> dict[str, float]:
    """Figures of a QEMU save: host-timed (stop until query-migrate says
    completed) plus what its last query-migrate reported."""
    return {"save_ms": seconds * 1000.0, "memory_mib": float(memory_mib),
            "file_mib": file_bytes / MIB, "disk_mib": disk_bytes / MIB,
            "throughput_mb_s": memory_mib * 1.048576 / seconds if seconds > 0 else 0.0,
            **qmpmod.migrate_figures(info)}


def describe_save(name: str, figs: dict[str, float]) -> str:
    shown = ("save_ms", "file_mib", "disk_mib", "touched_mib", "throughput_mb_s")
    return f"{name}: " + " ".join(f"{k}={figs[k]:.1f}" for k in shown if k in figs)


def boot_and_fill(who: str, proc: subprocess.Popen, agent: ga.Agent, setup: Setup) -> None:
    """Waits for the origin's agent, then writes FILL_MIB of random data in it."""
    seconds = agent.wait(BOOT_AGENT_S, alive=lambda: proc.poll() is None)
    setup.log(f"{who} origin: the agent answered {seconds:.1f} s after the start")
    if setup.fill_mib > 0:
        ga.fill(agent, setup.fill_mib)
        setup.log(f"{who} origin: {setup.fill_mib} MiB of random data written")


class SbxOrigin:
    """sbx-vmm booting the guest; saves through its control socket."""

    def __init__(self, spec: VmmSpec, setup: Setup):
        g = setup.guest
        self.setup, self.spec = setup, spec
        self.control_path = g.path("control.sock")
        self.log_path, self.console = g.path("sbx-boot.log"), g.path("sbx-console.log")
        self.argv = sbx_origin_argv(spec, g, vsock_uds=g.path("v.sock"), control=self.control_path,
                                    console=self.console)
        self.agent = ga.Agent(ga.Endpoint(uds=g.path("v.sock")), g.token)
        self.proc: subprocess.Popen | None = None

    def public_argv(self) -> list[str]:
        return redacted(self.argv, self.setup.guest.token)

    def start(self) -> None:
        """Boots and fills the guest, then pauses it."""
        self.proc = ga.spawn(self.argv, self.log_path, self.setup.vmm_cpus)
        proc = self.proc
        try:
            boot_and_fill("sbx-vmm", proc, self.agent, self.setup)
            ga.control(self.control_path, {"op": "pause"})
        except Exception:
            ga.log_tails([self.log_path, self.console], self.setup.log)
            raise

    def save(self, path: str, mode: str) -> dict[str, float]:
        """One snapshot (`snapshot` op, docs/vmm-control.md) of the running
        guest: resumed first, so the pause is part of it and the compressed
        one records its working set; paused again afterwards."""
        if ga.control(self.control_path, {"op": "status"}).get("state") == "paused":
            ga.control(self.control_path, {"op": "resume"})
        reply = ga.control(self.control_path, {
            "op": "snapshot", "path": path, "mode": mode,
            "working_set_ms": WORKING_SET_MS if mode == "compressed" else 0})
        return sbx_save_figures(reply, *file_sizes(path))

    def resume(self) -> None:
        ga.control(self.control_path, {"op": "resume"})

    def pause(self) -> None:
        ga.control(self.control_path, {"op": "pause"})

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def close(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                ga.control(self.control_path, {"op": "stop"})
            except (OSError, RuntimeError, ValueError):
                ga.kill(self.proc)
        ga.stop(self.proc)
        self.proc = None


class QemuOrigin:
    """QEMU booting the guest; saves with QMP migrate to a file."""

    def __init__(self, spec: VmmSpec, setup: Setup):
        g = setup.guest
        self.setup, self.spec = setup, spec
        self.qmp_path = g.path("qmp.sock")
        self.log_path, self.console = g.path("qemu-boot.log"), g.path("qemu-console.log")
        self.argv = qemu_argv(spec, g, console=self.console, qmp=self.qmp_path, cid=setup.cid)
        self.agent = ga.Agent(ga.Endpoint(cid=setup.cid), g.token)
        self.proc: subprocess.Popen | None = None
        self.qmp: qmpmod.Qmp | None = None

    def public_argv(self) -> list[str]:
        return redacted(self.argv, self.setup.guest.token)

    def start(self) -> None:
        self.proc = ga.spawn(self.argv, self.log_path, self.setup.vmm_cpus)
        proc = self.proc
        try:
            boot_and_fill("QEMU", proc, self.agent, self.setup)
            self.qmp = qmpmod.Qmp(self.qmp_path, alive=lambda: proc.poll() is None)
            qmpmod.lift_bandwidth_limit(self.qmp)
            self.qmp.cmd("stop")
        except Exception:
            ga.log_tails([self.log_path, self.console], self.setup.log)
            raise

    def save(self, path: str) -> dict[str, float]:
        """`cont` (after a save the origin is in postmigrate; QMP cont runs it
        again), then stop + migrate to the file."""
        assert self.qmp is not None
        if self.qmp.cmd("query-status").get("status") != "running":
            self.qmp.cmd("cont")
        saved = qmpmod.save_to_file(self.qmp, path)
        return qemu_save_figures(saved["seconds"], self.setup.guest.memory_mib, *file_sizes(path),
                                 saved["info"])

    def resume(self) -> None:
        assert self.qmp is not None
        self.qmp.cmd("cont")

    def pause(self) -> None:
        assert self.qmp is not None
        self.qmp.cmd("stop")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def close(self) -> None:
        quitting = self.qmp is not None
        if self.qmp is not None:
            self.qmp.quit()
            self.qmp = None
        if self.proc is not None:
            if not quitting:
                ga.kill(self.proc)
            ga.stop(self.proc)
            self.proc = None


ORIGINS = {"sbx": SbxOrigin, "qemu": QemuOrigin}
