"""Workload `snapshot`: saving one running guest to a file, again and again
(bench/snapshot_runner.py's saves).

Each VMM boots one origin (snapshot_origin), fills it and pauses it. Every
round saves with each path once, in rotation: `sbx`, sbx-vmm's compressed
snapshot (the control socket's `snapshot` op with a 500 ms working set),
`sbx-raw` (mode raw), and `qemu` (QMP stop + migrate to a file). Before a
save the origin runs again (so the pause is part of it); afterwards it
stays paused, and the file is deleted.

Figures (FIGURES): the save's time, the file's size and allocated size,
the guest's memory and touched memory, and the write throughput (guest
memory per second of save).
"""

from __future__ import annotations

import os
from typing import Callable

from .snapshot_commands import QEMU_NOTES
from .vmm_spec import VmmSpec
from .workload_boot import Figure
from .workload_common import (PathSpec, figure_dicts, SnapshotOptions, Workspace, fail_paths, finish_statuses,
                              plan_paths, run_rounds, start_origin)

WORKLOAD = "snapshot"

FIGURES = [
    Figure("save_ms", "ms", "the save: sbx-vmm's pause_ms + write_ms (its snapshot reply); QEMU: QMP stop "
           "until query-migrate says completed, host clock"),
    Figure("pause_ms", "ms", "sbx-vmm-reported: pausing the vCPUs and devices"),
    Figure("write_ms", "ms", "sbx-vmm-reported: writing, fsyncing and renaming the file"),
    Figure("migrate_total_ms", "ms", "QEMU-reported: query-migrate total-time"),
    Figure("file_mib", "MiB", "the file's size"),
    Figure("disk_mib", "MiB", "the file's allocated blocks (a raw snapshot is sparse)"),
    Figure("memory_mib", "MiB", "the guest's memory"),
    Figure("touched_mib", "MiB", "sbx-vmm-reported: guest memory that is not zero"),
    Figure("working_set_mib", "MiB", "sbx-vmm-reported: the working set recorded first (compressed only)"),
    Figure("transferred_mib", "MiB", "QEMU-reported: query-migrate ram.transferred"),
    Figure("throughput_mb_s", "MB/s", "guest memory (10^6 bytes) per second of save_ms"),
]
BREAKDOWNS = [["pause_ms", "write_ms"]]
EXTRA_BASELINES = ["sbx-raw"]

SBX_PATHS = [PathSpec("sbx", "sbx-vmm, compressed snapshot", "compressed"),
             PathSpec("sbx-raw", "sbx-vmm, raw snapshot", "raw")]
SBX_NOTES = {
    "compressed": "control socket snapshot op, mode compressed (zstd level 1, a thread per CPU), "
                  "working_set_ms 500 (recorded before the pause, not in save_ms)",
    "raw": "control socket snapshot op, mode raw (memory as is, zero pages as holes)",
}


def paths_of(spec: VmmSpec) -> list[PathSpec]:
    if spec.kind == "sbx":
        return SBX_PATHS
    return [PathSpec(spec.name, f"{spec.label}, migrate to a file", "migrate")]


def figure_list() -> list[dict]:
    return figure_dicts(FIGURES)


def _summary(figs: dict[str, float]) -> str:
    return (f"save {figs.get('save_ms', 0):.1f} ms, file {figs.get('file_mib', 0):.0f} MiB, "
            f"{figs.get('throughput_mb_s', 0):.0f} MB/s")


def _save_once(origin, path: str, mode: str) -> dict[str, float]:
    try:
        return origin.save(path, mode) if mode in ("compressed", "raw") else origin.save(path)
    finally:
        if os.path.exists(path):
            os.unlink(path)


def run_snapshot(specs: list[VmmSpec], opts: SnapshotOptions, *, unusable: Callable[[VmmSpec], str | None],
                 log: Callable[[str], None]) -> dict:
    """Runs the workload; returns the `vmms` and `runs` parts of a result."""
    vmms, runnable = plan_paths(specs, paths_of, unusable=unusable, log=log)
    ws = Workspace(WORKLOAD, opts, log)
    origins = []
    try:
        measure: dict[str, Callable[[], dict]] = {}
        by_name = {s.name: s for s in specs}
        for name, paths in runnable.items():
            spec = by_name[name]
            try:
                origin = start_origin(spec, ws)
            except Exception as e:
                reason = f"the origin did not boot and fill: {type(e).__name__}: {e}"
                log(f"{name}: FAILED: {reason}")
                fail_paths(vmms, [p.name for p in paths], reason)
                continue
            origins.append(origin)
            for p in paths:
                file = ws.guest.path(f"{p.name}.snapshot")
                measure[p.name] = (lambda o=origin, f=file, m=p.mode: _save_once(o, f, m))
                e = next(v for v in vmms if v["name"] == p.name)
                e["argv"] = origin.public_argv()
                e["notes"] = ([SBX_NOTES[p.mode]] if spec.kind == "sbx" else QEMU_NOTES[:1]) + [
                    "argv: the origin; every save is of it, resumed first and paused after"]
        runs = run_rounds(measure, runs=opts.runs, warmup=opts.warmup, log=log, summary=_summary)
        finish_statuses(vmms, runs)
        return {"vmms": vmms, "runs": runs}
    finally:
        for origin in origins:
            origin.close()
        ws.remove()
