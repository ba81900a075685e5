"""QEMU's QMP, just enough to save a guest to a file and load it again,
as bench/snapshot_runner.py did: QMP `stop` + `migrate` to `exec:cat > FILE`
(QEMU 7.2, Debian 12, has no `file:` migration URI), polled with
`query-migrate`; and a QEMU started with `-incoming defer`, given
`migrate-incoming exec:cat FILE`, polled with `query-status`, then `cont`
(a state saved from a stopped VM arrives paused). QMP reference: QEMU's
qapi/migration.json and qapi/run-state.json.
"""

from __future__ import annotations

import json
import socket
import time

# No bandwidth limit for a save to a file (the guest is stopped, so there is
# no downtime to protect): QEMU's default max-bandwidth would cap the save
# (libvirt's `virsh save` lifts it the same way). Bytes per second.
SAVE_BANDWIDTH = 1 << 40
POLL_S = 0.005


class QmpError(RuntimeError):
    pass


class Qmp:
    """One QMP connection to QEMU's `-qmp unix:PATH,server=on,wait=off`."""

    def __init__(self, path: str, timeout: float = 60, alive=None):
        deadline = time.monotonic() + timeout
        while True:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                self.sock.connect(path)
                break
            except OSError:
                self.sock.close()
                if time.monotonic() > deadline or (alive is not None and not alive()):
                    raise
                time.sleep(POLL_S)
        self.sock.settimeout(600)
        self.file = self.sock.makefile("rb")
        json.loads(self.file.readline())  # the greeting
        self.cmd("qmp_capabilities")

    def cmd(self, name: str, **arguments):
        """The `return` of one command; events in between are skipped."""
        message = {"execute": name}
        if arguments:
            message["arguments"] = arguments
        self.sock.sendall(json.dumps(message).encode() + b"\n")
        while True:
            line = self.file.readline()
            if not line:
                raise QmpError(f"QMP {name}: QEMU closed the connection")
            reply = json.loads(line)
            if "return" in reply:
                return reply["return"]
            if "error" in reply:
                raise QmpError(f"QMP {name}: {reply['error']}")

    def quit(self) -> None:
        try:
            self.cmd("quit")
        except (OSError, QmpError, ValueError):
            pass  # QEMU may close before its answer
        self.close()

    def close(self) -> None:
        try:
            self.file.close()
            self.sock.close()
        except OSError:
            pass


def lift_bandwidth_limit(qmp: Qmp) -> None:
    qmp.cmd("migrate-set-parameters", **{"max-bandwidth": SAVE_BANDWIDTH})


def save_to_file(qmp: Qmp, path: str, timeout: float = 600) -> dict:
    """`stop`, `migrate exec:cat > PATH`, poll until completed. Returns
    {seconds (host clock, stop included), info (the last query-migrate)}."""
    start = time.monotonic()
    qmp.cmd("stop")
    qmp.cmd("migrate", uri=f"exec:cat > {path}")
    while True:
        info = qmp.cmd("query-migrate")
        status = info.get("status")
        if status == "completed":
            return {"seconds": time.monotonic() - start, "info": info}
        if status in ("failed", "cancelled"):
            raise QmpError(f"QEMU's migration to a file: {info}")
        if time.monotonic() - start > timeout:
            raise QmpError(f"QEMU's migration to a file took over {timeout:.0f} s: {info}")
        time.sleep(POLL_S)


def load_incoming(qmp: Qmp, path: str, started: float, timeout: float = 300) -> float:
    """`migrate-incoming exec:cat PATH` on a QEMU started with `-incoming
    defer`, then `cont` once the state is in; returns the seconds from
    `started` (the process start, time.monotonic) until `query-status` says running."""
    qmp.cmd("migrate-incoming", uri=f"exec:cat {path}")
    while True:
        status = qmp.cmd("query-status").get("status")
        if status == "running":
            return time.monotonic() - started
        if status == "paused":
            migration = qmp.cmd("query-migrate").get("status")
            if migration == "completed":
                qmp.cmd("cont")  # the source was stopped for the save: the state arrives paused
                continue
            if migration in ("failed", "cancelled"):
                raise QmpError(f"QEMU's incoming migration: {qmp.cmd('query-migrate')}")
        elif status not in ("inmigrate", "prelaunch"):
            raise QmpError(f"QEMU's incoming migration: status {status}; {qmp.cmd('query-migrate')}")
        if time.monotonic() - started > timeout:
            raise QmpError(f"QEMU's incoming migration: not running after {timeout:.0f} s "
                           f"(status {status}; {qmp.cmd('query-migrate')})")
        time.sleep(POLL_S)


def migrate_figures(info: dict) -> dict[str, float]:
    """QEMU-reported figures of a completed `query-migrate`: `total-time`
    (ms) and the RAM bytes it transferred (qapi/migration.json MigrationInfo, MigrationStats)."""
    figs: dict[str, float] = {}
    if isinstance(info.get("total-time"), (int, float)):
        figs["migrate_total_ms"] = float(info["total-time"])
    ram = info.get("ram") or {}
    if isinstance(ram.get("transferred"), (int, float)):
        figs["transferred_mib"] = ram["transferred"] / (1 << 20)
    return figs
