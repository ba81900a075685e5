"""Workload `density`: how many idle sandboxes from one warm template fit
in a memory budget, and their Pss and Rss per sandbox.

Prepared once per VMM as fork is (workload_fork.prepare_origin): the origin
booted (FILL_MIB, by default 0: an idle guest), saved and stopped; the
saved guest is the warm template. A round starts fork's children of it one
at a time (sbx-vmm: `--restore-mode private` restores of the raw snapshot;
QEMU: `-incoming` loads of the migration file, each into memory of its
own), each with its own vsock CID and socket. Once child k's agent has
answered health, Rss and Pss of every running child's VMM process are read
from /proc/PID/smaps_rollup (proc(5): Pss splits each shared page between
the processes that map it) and summed. A child whose sum of Pss passes the
budget is stopped and not counted; so is the round at --max-sandboxes
children. Then every counted child must answer health once more, and all
are stopped. A child that does not answer within the restore workload's
limits (QMP load 300 s, agent 120 s) fails the round.

Figures (figure_list): `fit`, the children running and answering when the
budget or the cap stopped the round; Pss and Rss per sandbox with `fit`
running, the first child's Pss alone, the mean Pss each child after the
first added; and the curve: the sums of Pss and Rss with k children,
k = 1..fit (`pss_total_K`, `rss_total_K`), which the report plots.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol

from . import guest_agent as ga
from .vmm_spec import VmmSpec
from .workload_boot import Figure
from .workload_common import PathSpec, SnapshotOptions, Workspace, figure_dicts
from .workload_fork import (child_argv_and_notes, child_command, mem_available_mib, memory_figures,
                            run_children_of_origin, stop_children, wait_child)

WORKLOAD = "density"
HEALTH_S = 30  # the last health of each counted child (guest_agent.Agent.health's socket timeout)


def figure_list(max_sandboxes: int) -> list[dict]:
    figs = [
        Figure("fit", "sandboxes", "children running and answering when the budget (the sum of their Pss) or "
               "--max-sandboxes stopped the round"),
        Figure("stopped_by_budget", "boolean", "1: the next child took the sum of Pss over the budget; "
               "0: --max-sandboxes stopped the round"),
        Figure("pss_per_sandbox_mib", "MiB", "sum of the children's Pss with `fit` running / fit"),
        Figure("rss_per_sandbox_mib", "MiB", "sum of the children's Rss with `fit` running / fit"),
        Figure("first_pss_mib", "MiB", "Pss of the first child, alone"),
        Figure("marginal_pss_mib", "MiB", "(sum of Pss with `fit` running - first_pss_mib) / (fit - 1): "
               "the mean Pss each child after the first added (fit >= 2)"),
    ]
    for k in range(1, max_sandboxes + 1):
        figs += [Figure(f"pss_total_{k}", "MiB", f"sum of Pss of the VMM processes with {k} children running "
                        "(/proc/PID/smaps_rollup)"),
                 Figure(f"rss_total_{k}", "MiB", f"sum of Rss of the VMM processes with {k} children running")]
    return figure_dicts(figs)


@dataclass(frozen=True)
class Point:
    """Sums over the running children's VMM processes, MiB."""
    pss_mib: float
    rss_mib: float


def density_figures(curve: list[Point], by_budget: bool) -> dict[str, float]:
    """A round's figures from its curve: curve[k - 1] with k children running."""
    fit = len(curve)
    last = curve[-1]
    figs = {"fit": float(fit), "stopped_by_budget": 1.0 if by_budget else 0.0,
            "pss_per_sandbox_mib": last.pss_mib / fit, "rss_per_sandbox_mib": last.rss_mib / fit,
            "first_pss_mib": curve[0].pss_mib}
    if fit > 1:
        figs["marginal_pss_mib"] = (last.pss_mib - curve[0].pss_mib) / (fit - 1)
    for k, point in enumerate(curve, start=1):
        figs[f"pss_total_{k}"] = point.pss_mib
        figs[f"rss_total_{k}"] = point.rss_mib
    return figs


class Children(Protocol):
    """What a round does with its children (VmmChildren; the unit tests' fakes)."""

    def start(self, k: int) -> Any: ...                  # child k (1..), its process started
    def wait(self, child: Any) -> None: ...              # its first agent answer; raises when none comes
    def alive(self, child: Any) -> bool: ...
    def memory(self, child: Any) -> dict[str, int]: ...  # smaps_rollup fields, KiB ({}: unreadable)
    def answers(self, child: Any) -> None: ...           # one more health; raises when none comes
    def explain(self, child: Any) -> None: ...           # says why it failed (its logs' last lines)
    def stop(self, children: list) -> None: ...


def _sums(ops: Children, children: list) -> Point:
    for j, child in enumerate(children, start=1):
        if not ops.alive(child):
            ops.explain(child)
            raise RuntimeError(f"child {j} exited while {len(children)} were started")
    sums = memory_figures([ops.memory(c) for c in children])
    if not sums:
        raise RuntimeError(f"the memory of a child's VMM process is unreadable (/proc/PID/smaps_rollup) with "
                           f"{len(children)} started")
    return Point(sums["pss_mib"], sums["rss_mib"])


def _grow(ops: Children, children: list, budget_mib: float, max_sandboxes: int) -> tuple[list[Point], bool]:
    """Starts children one at a time into `children` (the caller stops them)
    until one takes the sum of Pss over the budget or max_sandboxes run.
    Returns the curve of the counted ones and whether the budget stopped it."""
    curve: list[Point] = []
    for k in range(1, max_sandboxes + 1):
        children.append(ops.start(k))
        try:
            ops.wait(children[-1])
        except Exception as e:
            raise RuntimeError(f"child {k} never answered ({k - 1} running and answering): "
                               f"{type(e).__name__}: {e}") from e
        point = _sums(ops, children)
        if point.pss_mib > budget_mib:
            if not curve:
                raise RuntimeError(f"the first child alone has Pss {point.pss_mib:.1f} MiB, over the budget of "
                                   f"{budget_mib:g} MiB")
            return curve, True
        curve.append(point)
    return curve, False


def density_round(ops: Children, *, budget_mib: float, max_sandboxes: int) -> dict[str, float]:
    """One round: children until the budget or the cap, the counted ones
    asked once more, then every child stopped, also on an error."""
    children: list = []
    try:
        curve, by_budget = _grow(ops, children, budget_mib, max_sandboxes)
        over = children[len(curve):]  # the child that passed the budget
        if over:
            ops.stop(over)
            del children[len(curve):]
        for j, child in enumerate(children, start=1):
            try:
                ops.answers(child)
            except Exception as e:
                ops.explain(child)
                raise RuntimeError(f"child {j} of {len(children)} no longer answers: {type(e).__name__}: {e}") from e
        return density_figures(curve, by_budget)
    finally:
        ops.stop(children)


class VmmChildren:
    """Fork's children of one saved origin (workload_fork), started one at a time."""

    def __init__(self, spec: VmmSpec, ws: Workspace, snapshot: str):
        self.spec, self.ws, self.snapshot = spec, ws, snapshot

    def start(self, k: int):
        return child_command(self.spec, self.ws, self.snapshot, k).spawn(self.ws)

    def wait(self, child) -> None:
        try:
            wait_child(child, child.started, self.snapshot)
        except Exception:
            self.explain(child)
            raise

    def explain(self, child) -> None:
        ga.log_tails(child.logs, self.ws.log, lines=10)

    def alive(self, child) -> bool:
        return child.alive()

    def memory(self, child) -> dict[str, int]:
        return ga.memory_kib(child.proc.pid)

    def answers(self, child) -> None:
        child.agent.health(timeout=HEALTH_S)

    def stop(self, children: list) -> None:
        stop_children(children)


def budget_problem(budget_mib: int, available_mib: int | None) -> str | None:
    """Why the budget cannot be given to the children on this host."""
    if available_mib is not None and budget_mib > available_mib:
        return (f"--budget-mib {budget_mib} is over MemAvailable ({available_mib} MiB): the children would "
                "push the host into swap or the OOM killer; use a smaller --budget-mib")
    return None


def _summary(figs: dict[str, float]) -> str:
    return (f"{figs['fit']:.0f} fit ({'budget' if figs['stopped_by_budget'] else 'cap'}), Pss "
            f"{figs['pss_per_sandbox_mib']:.1f} MiB per sandbox (first {figs['first_pss_mib']:.1f}), Rss "
            f"{figs['rss_per_sandbox_mib']:.1f}")


def run_density(specs: list[VmmSpec], opts: SnapshotOptions, *, unusable: Callable[[VmmSpec], str | None],
                log: Callable[[str], None]) -> dict:
    """Runs the workload; returns the `vmms` and `runs` parts of a result."""
    def notes(spec: VmmSpec, ws: Workspace, snapshot: str) -> tuple[list[str], list[str]]:
        argv, text = child_argv_and_notes(spec, ws, snapshot, f"up to {opts.max_sandboxes}")
        return argv, text + [f"started one at a time until the sum of their Pss passes {opts.budget_mib} MiB "
                             "(that child stopped, not counted) or the cap"]

    def path_problem(spec: VmmSpec, path: PathSpec) -> str | None:
        return budget_problem(opts.budget_mib, mem_available_mib())

    return run_children_of_origin(
        WORKLOAD, specs, opts, unusable=unusable, log=log, summary=_summary, notes=notes,
        path_problem=path_problem,
        measure=lambda spec, ws, snapshot: density_round(VmmChildren(spec, ws, snapshot), budget_mib=opts.budget_mib,
                                                         max_sandboxes=opts.max_sandboxes))
