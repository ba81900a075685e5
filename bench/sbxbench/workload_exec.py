"""Workload `exec`: the round trip of an exec of `true` through sbx-agent,
on a fresh connection each and on one reused connection (bench/
agent_runner.py's measurement, issue 17).

Prepared once per VMM: its guest, an origin (snapshot_origin) that is
booted until its agent answers and never saved (no fill unless
--fill-mib), each VMM's in a work folder of its own. sbx-vmm (`sbx`) is
reached on its hybrid vsock Unix socket, QEMU (`qemu`) over AF_VSOCK
through vhost-vsock (docs/agent-protocol.md, "Transport"); no process
is started per exec. The guests stay paused outside their own rounds, so
an idle one does not run beside another VMM's measurement. Every round
resumes each VMM's guest in rotation, waits for one answered `health`
(untimed), then times EXECS execs of `true` on a fresh connection each
(connect, hello, exec: docs/agent-protocol.md, "Session" and "exec"),
then EXECS on one connection opened (untimed) after them, and pauses
the guest again.

Figures (FIGURES), ms on the host's monotonic clock, one sample per exec:
each exec is a run entry of its own (`sample`: its index in the round;
sample i holds the i-th fresh exec and the i-th reused one), so the
statistics are over all execs of the measured rounds.
"""

from __future__ import annotations

import time
from typing import Callable

from . import guest_agent as ga
from . import stats
from .snapshot_commands import GUEST_CID, QEMU_NOTES
from .snapshot_origin import ORIGINS
from .virtio_commands import VHOST_VSOCK, vhost_vsock_problem
from .vmm_spec import VmmSpec
from .workload_boot import Figure
from .workload_common import (PathSpec, figure_dicts, SnapshotOptions, Workspace, fail_paths, finish_statuses,
                              plan_paths, run_rounds, start_origin)

WORKLOAD = "exec"
EXEC_ARGV = ["true"]
REPLY_TIMEOUT_S = 60   # agent_runner.py's socket timeout
RESUMED_AGENT_S = 120  # a resumed guest's agent answers health within this

FIGURES = [
    Figure("fresh_round_trip", "ms", "a new connection per exec: connect to the agent's port (sbx-vmm: "
           "CONNECT 52 on the hybrid socket; QEMU: AF_VSOCK connect) + hello + exec of `true` until "
           "its exit message"),
    Figure("fresh_connect", "ms", "of fresh_round_trip: the connection (sbx-vmm: until its 'OK' line)"),
    Figure("fresh_hello", "ms", "of fresh_round_trip: hello sent -> the agent's hello"),
    Figure("fresh_exec", "ms", "of fresh_round_trip: exec request sent -> exit message"),
    Figure("reused_round_trip", "ms", "exec of `true` on one authenticated connection kept for the "
           "round's execs: request sent -> exit message"),
]
BREAKDOWNS = [["fresh_connect", "fresh_hello", "fresh_exec"]]


def figure_list() -> list[dict]:
    return figure_dicts(FIGURES)


def not_applicable(spec: VmmSpec, vhost_vsock: str = VHOST_VSOCK) -> str | None:
    """Why `spec` cannot run the exec workload, or None (QEMU: also
    without `vhost_vsock` on this host)."""
    if spec.generic:
        return "--test-generic-sbx is for the boot workload only"
    if spec.kind not in ORIGINS:
        return (f"the exec workload reaches sbx-agent over vsock under sbx-vmm (its hybrid socket) and "
                f"QEMU (vhost-vsock) only; sbx-bench gives {spec.label} no vsock device")
    return vhost_vsock_problem(spec, vhost_vsock)


def paths_of(spec: VmmSpec) -> list[PathSpec]:
    if spec.kind == "sbx":
        return [PathSpec(spec.name, f"{spec.label}, hybrid vsock", "hybrid")]
    return [PathSpec(spec.name, f"{spec.label}, vhost-vsock", "vhost-vsock")]


def fresh_figures(started: float, connected: float, greeted: float, exited: float) -> dict[str, float]:
    """The fresh_* figures from the clock's readings (s -> ms)."""
    return {"fresh_round_trip": (exited - started) * 1000.0, "fresh_connect": (connected - started) * 1000.0,
            "fresh_hello": (greeted - connected) * 1000.0, "fresh_exec": (exited - greeted) * 1000.0}


def exec_true(sock) -> None:
    """One exec of `true` on an authenticated session; raises unless it exits 0."""
    final = ga.exec_argv(sock, EXEC_ARGV)
    if final.get("type") != "exit" or final.get("code") != 0:
        raise RuntimeError(f"exec of {' '.join(EXEC_ARGV)}: {final}")


def fresh_exec(agent: ga.Agent) -> dict[str, float]:
    """Connect (once, no retry), hello, exec `true`; the connection is
    closed after its exit message, outside the time."""
    started = time.perf_counter()
    sock = agent.connect(wait=0.0, timeout=REPLY_TIMEOUT_S)
    try:
        connected = time.perf_counter()
        agent.hello(sock)
        greeted = time.perf_counter()
        exec_true(sock)
        exited = time.perf_counter()
    finally:
        sock.close()
    return fresh_figures(started, connected, greeted, exited)


def reused_execs(agent: ga.Agent, execs: int) -> list[float]:
    """ms of each of `execs` execs of `true` on one connection."""
    times = []
    with agent.session(wait=0.0, timeout=REPLY_TIMEOUT_S) as sock:
        for _ in range(execs):
            started = time.perf_counter()
            exec_true(sock)
            times.append((time.perf_counter() - started) * 1000.0)
    return times


def exec_samples(fresh: list[dict[str, float]], reused: list[float]) -> list[dict[str, float]]:
    """One sample per exec: the i-th fresh exec's figures with the i-th reused one."""
    if len(fresh) != len(reused):
        raise ValueError(f"{len(fresh)} fresh execs, {len(reused)} reused")
    return [{**f, "reused_round_trip": r} for f, r in zip(fresh, reused)]


def exec_round(origin, execs: int, log: Callable[[str], None]) -> list[dict[str, float]]:
    """One round on a paused guest: resume, one untimed health, the execs, pause."""
    origin.resume()
    try:
        origin.agent.wait(RESUMED_AGENT_S, alive=origin.alive)
        fresh = [fresh_exec(origin.agent) for _ in range(execs)]
        return exec_samples(fresh, reused_execs(origin.agent, execs))
    finally:
        try:
            origin.pause()
        except Exception as e:  # the round's own error, if any, matters more
            log(f"  could not pause the guest again: {type(e).__name__}: {e}")


def _summary(samples: list[dict[str, float]]) -> str:
    fresh = stats.median([s["fresh_round_trip"] for s in samples])
    reused = stats.median([s["reused_round_trip"] for s in samples])
    return f"{len(samples)} execs: median fresh {fresh:.2f} ms, reused {reused:.2f} ms"


def run_exec(specs: list[VmmSpec], opts: SnapshotOptions, *, unusable: Callable[[VmmSpec], str | None],
             log: Callable[[str], None]) -> dict:
    """Runs the workload; returns the `vmms` and `runs` parts of a result."""
    vmms, runnable = plan_paths(specs, paths_of, unusable=unusable, log=log, unsupported=not_applicable)
    by_name = {s.name: s for s in specs}
    workspaces: list[Workspace] = []
    origins = []
    try:
        measure: dict[str, Callable[[], list[dict[str, float]]]] = {}
        qemu_guests = 0
        for name, paths in runnable.items():
            spec, path = by_name[name], paths[0]
            # One folder per guest (its sockets); QEMU guests one CID each (vhost-vsock).
            ws = Workspace(WORKLOAD, opts, log, cid=GUEST_CID + qemu_guests)
            workspaces.append(ws)
            if spec.kind == "qemu":
                qemu_guests += 1
            try:
                origin = start_origin(spec, ws)
            except Exception as e:
                reason = f"the guest did not come up: {type(e).__name__}: {e}"
                log(f"{name}: FAILED: {reason}")
                fail_paths(vmms, [path.name], reason)
                continue
            origins.append(origin)
            measure[path.name] = (lambda o=origin: exec_round(o, opts.execs, log))
            e = next(v for v in vmms if v["name"] == path.name)
            e["argv"], e["notes"] = origin.public_argv(), _notes(spec, ws, opts, origin.agent.endpoint)
        runs = run_rounds(measure, runs=opts.runs, warmup=opts.warmup, log=log, summary=_summary)
        finish_statuses(vmms, runs)
        return {"vmms": vmms, "runs": runs}
    finally:
        for origin in origins:
            origin.close()
        for ws in workspaces:
            ws.remove()


def _notes(spec: VmmSpec, ws: Workspace, opts: SnapshotOptions, endpoint: ga.Endpoint) -> list[str]:
    notes = [f"exec of `true` (argv, no shell) through {endpoint.describe()}; per round {opts.execs} execs on a fresh "
             f"connection each (connect + hello + exec), then {opts.execs} on one connection",
             "one guest booted once (its agent answered health), paused outside its own rounds; "
             "each round resumes it and waits for one answered health first"]
    if spec.kind == "qemu":
        notes.append(QEMU_NOTES[2])
    if opts.fill_mib > 0:
        notes.append(f"the guest wrote {opts.fill_mib} MiB of random data into a tmpfs after its boot")
    if ws.setup.vmm_cpus:
        notes.append(f"every VMM process on CPUs {','.join(map(str, ws.setup.vmm_cpus))}")
    return notes
