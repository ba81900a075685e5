"""Workload `restore`: one saved guest restored again and again, by every
restore path of every VMM (bench/snapshot_runner.py's restores).

Prepared once per VMM: the origin (snapshot_origin) is booted, filled and
saved, then stopped. sbx-vmm saves a compressed snapshot (with a 500 ms
working set) and a raw one; its paths are `sbx` (eager, compressed),
`sbx-lazy` (lazy, compressed) and `sbx-private` (private, raw; docs/
vmm-control.md, "Restore"). QEMU's one path, `qemu`, loads its migration
file (`-incoming defer` + `migrate-incoming`, qmp.py). Every round
restores each path once, in rotation; after each restore the guest is
rebooted (sbx-vmm) or QEMU quit, so the next restore has the vsock free.

Figures, ms from the restoring process's start (FIGURES): first guest
instruction, first answered agent `health` (polled every 5 ms), all
memory loaded.
"""

from __future__ import annotations

import os
import time
from typing import Callable

from . import guest_agent as ga
from . import qmp as qmpmod
from .snapshot_commands import GUEST_CID, QEMU_NOTES, qemu_argv, sbx_restore_argv
from .vmm_spec import VmmSpec
from .workload_boot import Figure
from .workload_common import (PathSpec, figure_dicts, SnapshotOptions, Workspace, fail_paths, finish_statuses,
                              plan_paths, run_rounds, start_origin)

WORKLOAD = "restore"
RESTORE_AGENT_S = 120     # snapshot_runner.py: a restored agent answers within 120 s
SET_UP_LINE_S = 60        # ... and sbx-vmm's "VM set up in" line appears within 60 s
LAZY_LOADED_S = 120       # ... and the lazy loader's "fully loaded" line within 120 s
QEMU_LOAD_S = 300         # ... QEMU's incoming migration is running within 300 s

FIGURES = [
    Figure("to_first_instruction", "ms", "process start -> the guest's first instruction (sbx-vmm: its "
           "'VM set up in' line, from its own start; QEMU: query-status running after migrate-incoming "
           "and cont, host clock)"),
    Figure("to_agent", "ms", "process start -> the first answered agent health request over vsock "
           "(polled every 5 ms), host clock"),
    Figure("to_fully_loaded", "ms", "all guest memory loaded: eager and QEMU at the first instruction; "
           "lazy: the loader's 'fully loaded from the snapshot' line (from the loader's start); "
           "private: none, pages load on first touch"),
    Figure("first_instruction_to_agent", "ms", "to_agent - to_first_instruction"),
]
BREAKDOWNS = [["to_first_instruction", "first_instruction_to_agent"]]
EXTRA_BASELINES = ["sbx-lazy", "sbx-private"]

SBX_PATHS = [PathSpec("sbx", "sbx-vmm, eager restore", "eager"),
             PathSpec("sbx-lazy", "sbx-vmm, lazy restore", "lazy"),
             PathSpec("sbx-private", "sbx-vmm, private restore", "private")]
SNAPSHOT_OF_MODE = {"eager": "compressed", "lazy": "compressed", "private": "raw"}
SBX_NOTES = {
    "eager": "restores the compressed snapshot: all memory read and decompressed before the first instruction",
    "lazy": "restores the compressed snapshot (500 ms working set recorded): userfaultfd, the working "
            "set first, then the rest in the background",
    "private": "restores the raw snapshot mapped copy-on-write (MAP_PRIVATE): pages read on first touch",
}


def paths_of(spec: VmmSpec) -> list[PathSpec]:
    if spec.kind == "sbx":
        return SBX_PATHS
    return [PathSpec(spec.name, f"{spec.label}, -incoming", "incoming")]


def figure_list() -> list[dict]:
    return figure_dicts(FIGURES)


def restore_figures(*, to_agent_s: float, first_instruction_ms: float | None,
                    fully_loaded_ms: float | None) -> dict[str, float]:
    figs = {"to_agent": to_agent_s * 1000.0}
    if first_instruction_ms is not None:
        figs["to_first_instruction"] = first_instruction_ms
        figs["first_instruction_to_agent"] = figs["to_agent"] - first_instruction_ms
    if fully_loaded_ms is not None:
        figs["to_fully_loaded"] = fully_loaded_ms
    return figs


def sbx_restore_once(spec: VmmSpec, ws: Workspace, mode: str, snapshot: str) -> dict[str, float]:
    """One sbx-vmm restore (snapshot_runner.py's restore_sbx)."""
    g = ws.guest
    log_path, console = g.path(f"sbx-restore-{mode}.log"), g.path(f"sbx-restore-{mode}-console.log")
    control, uds = g.path("restore-control.sock"), g.path("v.sock")
    argv = sbx_restore_argv(spec, snapshot, mode, cid=GUEST_CID, vsock_uds=uds, console=console,
                            control=control)
    agent = ga.Agent(ga.Endpoint(uds=uds), g.token)
    t0 = time.monotonic()
    proc = ga.spawn(argv, log_path, ws.setup.vmm_cpus)
    try:
        try:
            agent.wait(RESTORE_AGENT_S, alive=lambda: proc.poll() is None)
        except (TimeoutError, RuntimeError):
            ga.log_tails([log_path, console], ws.log)
            ga.diagnose_sbx(proc, kernel=g.kernel, image=g.image, sbx_vmm=spec.path, control_path=control,
                            log=ws.log)
            raise
        to_agent = time.monotonic() - t0
        setup_ms = ga.wait_for_line(log_path, ga.VM_SET_UP, SET_UP_LINE_S)
        if setup_ms is None:
            raise RuntimeError(f"no 'VM set up in' line in sbx-vmm's log within {SET_UP_LINE_S} s")
        loaded = None
        if mode == "eager":
            loaded = setup_ms
        elif mode == "lazy":
            loaded = ga.wait_for_line(log_path, ga.LAZY_LOADED, LAZY_LOADED_S)
            if loaded is None:
                ws.log(f"sbx-vmm lazy restore: no 'fully loaded' line within {LAZY_LOADED_S} s")
        return restore_figures(to_agent_s=to_agent, first_instruction_ms=setup_ms, fully_loaded_ms=loaded)
    finally:
        if proc.poll() is None:
            agent.reboot()
        ga.stop(proc)  # the next restore needs the vsock path free


def qemu_restore_once(spec: VmmSpec, ws: Workspace, snapshot: str) -> dict[str, float]:
    """One QEMU `-incoming defer` restore (snapshot_runner.py's second half of qemu())."""
    g = ws.guest
    log_path, console, qmp_path = g.path("qemu-restore.log"), g.path("qemu-restore-console.log"), \
        g.path("qmp-restore.sock")
    argv = qemu_argv(spec, g, console=console, qmp=qmp_path, incoming=True)
    if os.path.exists(qmp_path):
        os.unlink(qmp_path)
    agent = ga.Agent(ga.Endpoint(cid=GUEST_CID), g.token)
    qmp = None
    t0 = time.monotonic()
    proc = ga.spawn(argv, log_path, ws.setup.vmm_cpus)
    alive = lambda: proc.poll() is None  # noqa: E731
    try:
        qmp = qmpmod.Qmp(qmp_path, alive=alive)
        running = qmpmod.load_incoming(qmp, snapshot, t0, QEMU_LOAD_S)
        agent.wait(RESTORE_AGENT_S, alive=alive)
        to_agent = time.monotonic() - t0
        return restore_figures(to_agent_s=to_agent, first_instruction_ms=running * 1000.0,
                               fully_loaded_ms=running * 1000.0)
    except Exception:
        ga.log_tails([log_path, console], ws.log)
        raise
    finally:
        if qmp is not None:
            qmp.quit()
        else:
            ga.kill(proc)
        ga.stop(proc)


def _summary(figs: dict[str, float]) -> str:
    parts = [f"{k.removeprefix('to_')} {figs[k]:.1f} ms" for k in ("to_first_instruction", "to_agent",
                                                                   "to_fully_loaded") if k in figs]
    return ", ".join(parts)


def _prepare(spec: VmmSpec, ws: Workspace, paths: list[PathSpec]) -> dict[str, Callable[[], dict]]:
    """Saves the origin; returns the measurement of each path."""
    origin = start_origin(spec, ws)
    try:
        if spec.kind == "sbx":
            files = {}
            for kind in ("compressed", "raw"):
                files[kind] = ws.guest.path(f"{spec.name}.{kind}")
                figs = origin.save(files[kind], kind)
                ws.log(f"{spec.name}: {kind} snapshot, {figs['save_ms']:.0f} ms, {figs['file_mib']:.0f} MiB")
            return {p.name: (lambda m=p.mode: sbx_restore_once(spec, ws, m, files[SNAPSHOT_OF_MODE[m]]))
                    for p in paths}
        snap = ws.guest.path(f"{spec.name}.migration")
        figs = origin.save(snap)
        ws.log(f"{spec.name}: migration file, {figs['save_ms']:.0f} ms, {figs['file_mib']:.0f} MiB")
        return {paths[0].name: lambda: qemu_restore_once(spec, ws, snap)}
    finally:
        origin.close()


def run_restore(specs: list[VmmSpec], opts: SnapshotOptions, *, unusable: Callable[[VmmSpec], str | None],
                log: Callable[[str], None]) -> dict:
    """Runs the workload; returns the `vmms` and `runs` parts of a result."""
    vmms, runnable = plan_paths(specs, paths_of, unusable=unusable, log=log)
    ws = Workspace(WORKLOAD, opts, log)
    try:
        measure: dict[str, Callable[[], dict]] = {}
        by_name = {s.name: s for s in specs}
        for name, paths in runnable.items():
            spec = by_name[name]
            try:
                measure.update(_prepare(spec, ws, paths))
            except Exception as e:
                reason = f"the origin could not be saved: {type(e).__name__}: {e}"
                log(f"{name}: FAILED: {reason}")
                fail_paths(vmms, [p.name for p in paths], reason)
                continue
            for e in vmms:
                if e["name"] in measure and e["argv"] is None:
                    e["argv"], e["notes"] = _argv_and_notes(spec, ws, e["name"], paths)
        runs = run_rounds(measure, runs=opts.runs, warmup=opts.warmup, log=log, summary=_summary)
        finish_statuses(vmms, runs)
        return {"vmms": vmms, "runs": runs}
    finally:
        ws.remove()


def _argv_and_notes(spec: VmmSpec, ws: Workspace, name: str, paths: list[PathSpec]) -> tuple[list[str], list[str]]:
    g = ws.guest
    mode = next(p.mode for p in paths if p.name == name)
    if spec.kind == "sbx":
        argv = sbx_restore_argv(spec, g.path(f"{spec.name}.{SNAPSHOT_OF_MODE[mode]}"), mode, cid=GUEST_CID,
                                vsock_uds=g.path("v.sock"), console=g.path(f"sbx-restore-{mode}-console.log"),
                                control=g.path("restore-control.sock"))
        return argv, [SBX_NOTES[mode], "after each restore the guest reboots (the agent's exec of reboot)"]
    argv = qemu_argv(spec, g, console=g.path("qemu-restore-console.log"), qmp=g.path("qmp-restore.sock"),
                     incoming=True)
    return ([a.replace(g.token, "<token>") for a in argv],
            QEMU_NOTES + ["fully loaded = first instruction: an incoming migration loads all memory "
                          "before the guest runs"])
