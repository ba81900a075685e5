"""What the snapshot workloads (restore, snapshot, fork) and exec share:
their options, the results' `vmms` entries (one per measured path, n/a
ones with the reason), the rotating rounds of boot's workload, and the
origin guests' set-up. blk and vsock (workload_virtio) use the entries,
the rounds and the statuses too.

A "path" is one way of doing the workload, a VMM of its own in the results:
e.g. restore's `sbx` (eager), `sbx-lazy`, `sbx-private` and `qemu`. The
first sbx-vmm path is named `sbx`, the baseline of every ratio; the other
sbx-vmm paths are extra baselines for the other VMMs (results.py).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable, Collection

from . import guest_agent as ga
from .snapshot_commands import EXTRA_MIB, GUEST_CID, SNAPSHOT_CMDLINE, Guest, not_applicable
from .snapshot_origin import ORIGINS, Setup
from .vmm_spec import VmmSpec
from .workload_boot import Figure, rotation


@dataclass(frozen=True)
class SnapshotOptions:
    kernel: str
    image: str          # the minimal image: busybox + sbx-agent (images/build minimal)
    cpus: int
    memory_mib: int | None  # None: fill_mib + 512
    fill_mib: int
    runs: int
    warmup: int
    cmdline: str = SNAPSHOT_CMDLINE
    forks: int = 4
    execs: int = 20
    vmm_cpus: tuple[int, ...] | None = None
    budget_mib: int = 2048   # density: the sum of its children's Pss may not pass it
    max_sandboxes: int = 16  # density: children at most

    @property
    def guest_memory_mib(self) -> int:
        return self.memory_mib if self.memory_mib is not None else self.fill_mib + EXTRA_MIB


@dataclass(frozen=True)
class PathSpec:
    """One measured path of a VMM: its name in the results, its label and
    the words that tell the workload what to do (e.g. the restore mode)."""
    name: str
    label: str
    mode: str


def figure_dicts(figures: list[Figure]) -> list[dict]:
    return [{"id": f.id, "unit": f.unit, "description": f.description} for f in figures]


def entry(spec: VmmSpec, name: str, label: str, *, status: str = "ok", reason: str | None = None,
          argv: list[str] | None = None, notes: list[str] | None = None) -> dict:
    """A `vmms` entry of results.schema.json (version filled in by the CLI)."""
    return {"name": name, "kind": spec.kind, "label": label, "path": spec.path, "status": status,
            "reason": reason, "argv": argv, "notes": list(notes or [])}


def plan_paths(specs: list[VmmSpec], paths_of: Callable[[VmmSpec], list[PathSpec]], *,
               unusable: Callable[[VmmSpec], str | None], log: Callable[[str], None],
               unsupported: Callable[[VmmSpec], str | None] = not_applicable,
               path_kinds: Collection[str] = tuple(ORIGINS),
               path_problem: Callable[[VmmSpec, PathSpec], str | None] | None = None
               ) -> tuple[list[dict], dict[str, list[PathSpec]]]:
    """The `vmms` entries of every VMM's paths, in --vmm order (paths_of
    for the kinds in `path_kinds`, the others one path named as the VMM);
    the ones that cannot run (`unsupported`: the workload's reason,
    `unusable`: the binary's, `path_problem`: one path's) are n/a with the
    reason (also in notes). Returns the entries and {VMM name: its
    runnable paths}; a VMM none of whose paths can run is not in it."""
    vmms: list[dict] = []
    runnable: dict[str, list[PathSpec]] = {}
    for spec in specs:
        reason = unsupported(spec) or unusable(spec)
        paths = paths_of(spec) if spec.kind in path_kinds else []
        if not paths:
            paths = [PathSpec(spec.name, spec.label, "")]
        for p in paths:
            why = reason or (path_problem(spec, p) if path_problem else None)
            vmms.append(entry(spec, p.name, p.label, status="n/a" if why else "ok", reason=why,
                              notes=[why] if why else []))
            if why and not reason:
                log(f"{p.name}: n/a ({why})")
            elif not why:
                runnable.setdefault(spec.name, []).append(p)
        if reason:
            log(f"{spec.name}: n/a ({reason})")
    return vmms, runnable


def fail_paths(vmms: list[dict], names: list[str], reason: str) -> None:
    for e in vmms:
        if e["name"] in names and e["status"] == "ok":
            e.update(status="failed", reason=reason)


def finish_statuses(vmms: list[dict], runs: list[dict]) -> None:
    """A path whose every measured run failed is `failed`, with the last error."""
    for e in vmms:
        mine = [r for r in runs if r["vmm"] == e["name"] and not r["warmup"]]
        if e["status"] == "ok" and mine and not any(r["ok"] for r in mine):
            e.update(status="failed", reason=f"all {len(mine)} runs failed: {mine[-1]['error']}")


Measured = dict[str, float] | list[dict[str, float]]


def run_rounds(measure: dict[str, Callable[[], Measured]], *, runs: int, warmup: int,
               log: Callable[[str], None], summary: Callable[[Any], str]) -> list[dict]:
    """warmup + runs rounds; each measures every path once, round r starting
    with the (r mod k)-th (workload_boot.rotation). A measurement gives its
    figures, or a list of samples (exec: one per exec), each a run entry of
    its own with its index as `sample`. A measurement that raises is a
    failed run with the error; the next one still runs."""
    out: list[dict] = []
    names = list(measure)
    for index in range(warmup + runs):
        is_warmup = index < warmup
        tag = f"warm-up {index + 1}/{warmup}" if is_warmup else f"run {index - warmup + 1}/{runs}"
        for position, name in enumerate(rotation(names, index)):
            started = time.monotonic()
            try:
                figures, error = measure[name](), None
                if isinstance(figures, list) and not figures:
                    raise RuntimeError("the measurement gave no samples")
            except Exception as e:  # every failure is a failed run, reported, never a crash
                figures, error = {}, f"{type(e).__name__}: {e}"
            run = {"vmm": name, "round": index, "position": position, "warmup": is_warmup,
                   "ok": error is None, "error": error}
            if isinstance(figures, list):
                out += [{**run, "sample": i, "figures": sample} for i, sample in enumerate(figures)]
            else:
                out.append({**run, "figures": figures})
            took = time.monotonic() - started
            if error is None:
                log(f"{tag} {name:<12} {summary(figures)} ({took:.1f} s)")
            else:
                log(f"{tag} {name:<12} FAILED after {took:.1f} s: {error}")
    return out


class Workspace:
    """The work folder (sockets, logs, snapshot files: on a local file
    system, e.g. level 1's tmpfs /tmp) and the guest every VMM runs
    (`cid`: its vsock CID under QEMU, snapshot_origin.Setup)."""

    def __init__(self, workload: str, opts: SnapshotOptions, log: Callable[[str], None], cid: int = GUEST_CID):
        self.dir = tempfile.mkdtemp(prefix=f"sbx-bench-{workload}.")
        token = ga.new_token()
        self.guest = Guest(kernel=opts.kernel, image=opts.image, cpus=opts.cpus,
                           memory_mib=opts.guest_memory_mib, cmdline=opts.cmdline, token=token,
                           workdir=self.dir)
        self.setup = Setup(guest=self.guest, fill_mib=opts.fill_mib, vmm_cpus=opts.vmm_cpus, log=log,
                           cid=cid)
        self.log = log

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def start_origin(spec: VmmSpec, ws: Workspace):
    """A booted, filled and paused origin of spec's kind (snapshot_origin)."""
    origin = ORIGINS[spec.kind](spec, ws.setup)
    try:
        origin.start()
    except BaseException:
        origin.close()
        raise
    return origin
