"""Workload `fork`: N guests started at once from one saved guest.

Prepared once per VMM: the origin (snapshot_origin) is booted, filled and
saved, then stopped. sbx-vmm (path `sbx`) starts N restores of its raw
snapshot with `--restore-mode private` (copy-on-write, docs/vmm-control.md
"Restore"), each with its own vsock CID and socket, as tests/guest/
fork_session.sh does. QEMU (`qemu`) starts N `-incoming defer` QEMUs,
each given the same migration file and its own CID: every child loads its
own copy of the memory, which is the point of the comparison. Every round
starts each VMM's N children once, in rotation; they are stopped after it.

Figures (figure_list): ms from the first child's process start until the
k-th child first answered the agent's health (k = 1..N) and until all
had; and the memory of the N VMM processes (sums of Rss and Pss from
/proc/PID/smaps_rollup, proc(5)): when all have answered, and again after
every child has read its FILL_MIB of data (the same pages in every child).

child_command, wait_child, stop_children and run_children_of_origin serve
any workload made of children of the saved origin.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Callable

from . import guest_agent as ga
from . import qmp as qmpmod
from .guest_agent import redacted
from .snapshot_commands import FORK_CID_BASE, QEMU_NOTES, qemu_argv, sbx_restore_argv
from .vmm_spec import VmmSpec
from .workload_boot import Figure
from .workload_common import (PathSpec, figure_dicts, SnapshotOptions, Workspace, fail_paths, finish_statuses,
                              plan_paths, run_rounds, start_origin)
from .workload_restore import QEMU_LOAD_S, RESTORE_AGENT_S

WORKLOAD = "fork"
MIB_PER_KIB = 1 / 1024
QEMU_CHILD_MARGIN_MIB = 64  # beyond its migration file's size, per QEMU child


def figure_list(forks: int) -> list[dict]:
    figs = [Figure("spawn_ms", "ms", f"first process start -> the last of the {forks} processes started")]
    figs += [Figure(f"answer_{k}", "ms", f"first process start -> the first agent health answer of child "
                    f"{k} of {forks} in answer order (polled every 5 ms)") for k in range(1, forks + 1)]
    figs += [
        Figure("all_answered", "ms", f"first process start -> all {forks} children answered (= answer_{forks})"),
        Figure("rss_mib", "MiB", "sum of the children's VMM processes' Rss when all answered"),
        Figure("pss_mib", "MiB", "sum of their Pss (shared pages split between their users)"),
        Figure("pss_to_rss", "ratio", "pss_mib / rss_mib: 1 = nothing shared"),
        Figure("rss_touched_mib", "MiB", "sum of Rss after every child read its FILL_MIB of data"),
        Figure("pss_touched_mib", "MiB", "sum of Pss after every child read its FILL_MIB of data"),
        Figure("pss_to_rss_touched", "ratio", "pss_touched_mib / rss_touched_mib"),
    ]
    return figure_dicts(figs)


def paths_of(spec: VmmSpec) -> list[PathSpec]:
    if spec.kind == "sbx":
        return [PathSpec("sbx", "sbx-vmm, private restores", "private")]
    return [PathSpec(spec.name, f"{spec.label}, -incoming", "incoming")]


def memory_figures(per_process: list[dict[str, int]], suffix: str = "") -> dict[str, float]:
    """Sums of Rss and Pss (KiB, smaps_rollup) over the children; none
    when one is unreadable."""
    if not per_process or any("Rss" not in m or "Pss" not in m for m in per_process):
        return {}
    rss = sum(m["Rss"] for m in per_process) * MIB_PER_KIB
    pss = sum(m["Pss"] for m in per_process) * MIB_PER_KIB
    ratio_id = "pss_to_rss" + (suffix and "_touched")
    return {f"rss{suffix}_mib": rss, f"pss{suffix}_mib": pss, ratio_id: pss / rss if rss else 0.0}


def answer_figures(spawn_s: float, answered_s: list[float]) -> dict[str, float]:
    """answer_k: the k-th smallest time to an answer (s -> ms)."""
    figs = {"spawn_ms": spawn_s * 1000.0}
    ordered = sorted(answered_s)
    for k, seconds in enumerate(ordered, start=1):
        figs[f"answer_{k}"] = seconds * 1000.0
    figs["all_answered"] = ordered[-1] * 1000.0
    return figs


def mem_available_mib(meminfo: str | None = None) -> int | None:
    if meminfo is None:
        try:
            with open("/proc/meminfo") as f:
                meminfo = f.read()
        except OSError:
            return None
    for line in meminfo.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) // 1024
    return None


def qemu_memory_problem(forks: int, file_bytes: int, available_mib: int | None) -> str | None:
    """Why N QEMU children would not fit: each loads the whole migration stream
    into memory of its own."""
    need = forks * (file_bytes / (1 << 20) + QEMU_CHILD_MARGIN_MIB)
    if available_mib is not None and need > available_mib:
        return (f"{forks} QEMU children need about {need:.0f} MiB (each loads its own copy of the "
                f"{file_bytes >> 20} MiB migration file), MemAvailable is {available_mib} MiB: use a "
                "smaller --fill-mib or --forks")
    return None


class Child:
    """One child VMM process and how to reach its agent."""

    def __init__(self, proc, agent: ga.Agent, logs: list[str], qmp_path: str | None = None,
                 control: str | None = None, started: float = 0.0):
        self.proc, self.agent, self.logs = proc, agent, logs
        self.qmp_path, self.control, self.started = qmp_path, control, started
        self.qmp: qmpmod.Qmp | None = None
        self.answered: float | None = None
        self.error: str | None = None

    def alive(self) -> bool:
        return self.proc.poll() is None


@dataclass(frozen=True)
class ChildCommand:
    """How child i of a saved origin starts: its argv, vsock endpoint, logs
    (the VMM's, its console) and its QMP or control socket."""
    argv: list[str]
    endpoint: ga.Endpoint
    logs: list[str]
    qmp_path: str | None
    control: str | None

    def spawn(self, ws: Workspace) -> Child:
        started = time.monotonic()
        proc = ga.spawn(self.argv, self.logs[0], ws.setup.vmm_cpus)
        return Child(proc, ga.Agent(self.endpoint, ws.guest.token), self.logs, self.qmp_path, self.control,
                     started)


def child_command(spec: VmmSpec, ws: Workspace, snapshot: str, i: int) -> ChildCommand:
    """Child i (1..) of the saved origin: sbx-vmm a private restore, QEMU an
    -incoming load; vsock CID FORK_CID_BASE + i and sockets of its own."""
    g = ws.guest
    cid, console, log_path = FORK_CID_BASE + i, g.path(f"fork{i}-console.log"), g.path(f"fork{i}.log")
    if spec.kind == "sbx":
        uds, control = g.path(f"fork{i}.sock"), g.path(f"fork{i}-control.sock")
        return ChildCommand(sbx_restore_argv(spec, snapshot, "private", cid=cid, vsock_uds=uds, console=console,
                                             control=control), ga.Endpoint(uds=uds), [log_path, console],
                            None, control)
    qmp_path = g.path(f"fork{i}-qmp.sock")
    if os.path.exists(qmp_path):
        os.unlink(qmp_path)
    return ChildCommand(qemu_argv(spec, g, console=console, qmp=qmp_path, cid=cid, incoming=True),
                        ga.Endpoint(cid=cid), [log_path, console], qmp_path, None)


def wait_child(child: Child, t0: float, snapshot: str) -> None:
    """(QEMU: QMP, migrate-incoming, cont, then) the agent's first answer,
    as child.answered, seconds from t0; raises when it does not come within
    the restore workload's limits (QEMU_LOAD_S, RESTORE_AGENT_S)."""
    if child.qmp_path is not None:
        child.qmp = qmpmod.Qmp(child.qmp_path, alive=child.alive)
        qmpmod.load_incoming(child.qmp, snapshot, t0, QEMU_LOAD_S)
    child.agent.wait(RESTORE_AGENT_S, alive=child.alive)
    child.answered = time.monotonic() - t0


def _wait_all(children: list[Child], t0: float, snapshot: str) -> None:
    """wait_child for each child in a thread; a failure is its `error`."""
    def one(child: Child) -> None:
        try:
            wait_child(child, t0, snapshot)
        except Exception as e:
            child.error = f"{type(e).__name__}: {e}"
    threads = [threading.Thread(target=one, args=(c,), daemon=True) for c in children]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def fork_once(spec: VmmSpec, ws: Workspace, snapshot: str, forks: int, fill_mib: int) -> dict[str, float]:
    commands = [child_command(spec, ws, snapshot, i) for i in range(1, forks + 1)]
    children: list[Child] = []
    t0 = time.monotonic()
    try:
        for command in commands:
            children.append(command.spawn(ws))
        spawn_s = time.monotonic() - t0
        _wait_all(children, t0, snapshot)
        failed = [(i, c) for i, c in enumerate(children, start=1) if c.answered is None]
        if failed:
            for _, c in failed:
                ga.log_tails(c.logs, ws.log, lines=10)
            raise RuntimeError("; ".join(f"child {i}: {c.error}" for i, c in failed))
        figs = answer_figures(spawn_s, [c.answered for c in children])
        figs.update(memory_figures([ga.memory_kib(c.proc.pid) for c in children]))
        if fill_mib > 0:
            for c in children:
                ga.touch_fill(c.agent)
            figs.update(memory_figures([ga.memory_kib(c.proc.pid) for c in children], "_touched"))
        return figs
    finally:
        stop_children(children)


def stop_children(children: list[Child]) -> None:
    """sbx-vmm: the control socket's stop op; QEMU: QMP quit."""
    for c in children:
        if c.qmp is not None:
            c.qmp.quit()
        elif c.control is not None and c.alive():
            try:
                ga.control(c.control, {"op": "stop"})
            except (OSError, RuntimeError, ValueError):
                ga.kill(c.proc)
        else:
            ga.kill(c.proc)
    for c in children:
        ga.stop(c.proc)


def _summary(figs: dict[str, float]) -> str:
    text = f"first answer {figs['answer_1']:.1f} ms, all {figs['all_answered']:.1f} ms"
    for suffix in ("", "_touched"):
        if f"rss{suffix}_mib" in figs:
            text += (f", {'after reading the fill ' if suffix else ''}PSS {figs[f'pss{suffix}_mib']:.0f} "
                     f"of RSS {figs[f'rss{suffix}_mib']:.0f} MiB")
    return text


def run_fork(specs: list[VmmSpec], opts: SnapshotOptions, *, unusable: Callable[[VmmSpec], str | None],
             log: Callable[[str], None]) -> dict:
    """Runs the workload; returns the `vmms` and `runs` parts of a result."""
    def problem(spec: VmmSpec, snapshot: str) -> str | None:
        if spec.kind != "qemu":
            return None
        return qemu_memory_problem(opts.forks, os.path.getsize(snapshot), mem_available_mib())
    return run_children_of_origin(
        WORKLOAD, specs, opts, unusable=unusable, log=log, summary=_summary, problem=problem,
        measure=lambda spec, ws, snapshot: fork_once(spec, ws, snapshot, opts.forks, opts.fill_mib),
        notes=lambda spec, ws, snapshot: child_argv_and_notes(spec, ws, snapshot, str(opts.forks)))


def run_children_of_origin(workload: str, specs: list[VmmSpec], opts: SnapshotOptions, *,
                           unusable: Callable[[VmmSpec], str | None], log: Callable[[str], None],
                           summary: Callable[[dict], str],
                           measure: Callable[[VmmSpec, Workspace, str], dict],
                           notes: Callable[[VmmSpec, Workspace, str], tuple[list[str], list[str]]],
                           problem: Callable[[VmmSpec, str], str | None] = lambda spec, snapshot: None,
                           path_problem: Callable[[VmmSpec, PathSpec], str | None] | None = None) -> dict:
    """A workload of children of each VMM's saved origin (fork, density):
    the origin prepared once per VMM (prepare_origin), then `measure(spec,
    ws, snapshot)` once per round in rotation; `problem` (given the saved
    file) and `path_problem` (before the origin boots) make a path n/a,
    `notes` gives its argv and notes. Returns the `vmms` and `runs` parts
    of a result."""
    vmms, runnable = plan_paths(specs, paths_of, unusable=unusable, log=log, path_problem=path_problem)
    ws = Workspace(workload, opts, log)
    try:
        measures: dict[str, Callable[[], dict]] = {}
        by_name = {s.name: s for s in specs}
        for name, paths in runnable.items():
            spec, path = by_name[name], paths[0]
            try:
                snapshot = prepare_origin(spec, ws)
            except Exception as e:
                reason = f"the origin could not be saved: {type(e).__name__}: {e}"
                log(f"{name}: FAILED: {reason}")
                fail_paths(vmms, [path.name], reason)
                continue
            e = next(v for v in vmms if v["name"] == path.name)
            why = problem(spec, snapshot)
            if why:
                log(f"{name}: n/a ({why})")
                e.update(status="n/a", reason=why, notes=[why])
                continue
            measures[path.name] = (lambda s=spec, f=snapshot: measure(s, ws, f))
            e["argv"], e["notes"] = notes(spec, ws, snapshot)
        runs = run_rounds(measures, runs=opts.runs, warmup=opts.warmup, log=log, summary=summary)
        finish_statuses(vmms, runs)
        return {"vmms": vmms, "runs": runs}
    finally:
        ws.remove()


def prepare_origin(spec: VmmSpec, ws: Workspace) -> str:
    """The saved origin: sbx-vmm's raw snapshot, QEMU's migration file."""
    origin = start_origin(spec, ws)
    try:
        if spec.kind == "sbx":
            path = ws.guest.path(f"{spec.name}.raw")
            figs = origin.save(path, "raw")
        else:
            path = ws.guest.path(f"{spec.name}.migration")
            figs = origin.save(path)
        ws.log(f"{spec.name}: saved, {figs['save_ms']:.0f} ms, {figs['file_mib']:.0f} MiB")
        return path
    finally:
        origin.close()


def child_argv_and_notes(spec: VmmSpec, ws: Workspace, snapshot: str, count: str) -> tuple[list[str], list[str]]:
    """Child 1's argv (the token redacted) and the notes of `count` children
    (e.g. "4", "up to 16")."""
    command = child_command(spec, ws, snapshot, 1)
    argv = redacted(command.argv, ws.guest.token)
    if spec.kind == "sbx":
        notes = [f"{count} children of the raw snapshot, --restore-mode private (copy-on-write); child i "
                 f"has vsock CID {FORK_CID_BASE} + i; argv: child 1", "stopped with the control socket's stop op"]
    else:
        notes = [f"{count} children loading the same migration file, each into its own memory (no sharing); "
                 f"child i has vsock CID {FORK_CID_BASE} + i; argv: child 1", QEMU_NOTES[1]]
    if ws.setup.vmm_cpus:
        notes.append(f"every VMM process on CPUs {','.join(map(str, ws.setup.vmm_cpus))}")
    return argv, notes
