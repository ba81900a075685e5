"""Workload `boot`: the same kernel + initramfs booted to init on each VMM.

Each round boots every VMM once; the order rotates every round (round r
starts with the (r mod k)-th VMM), so no VMM always goes first or last.
Warm-up rounds come first (page cache for binaries and images) and are
kept in the results, marked, but not in the statistics.

Figures, all in milliseconds from the process start on the host's
monotonic clock (FIGURES below has the list, docs/benchmarks.md more):
the host-side ones exist for every VMM; the VMM-reported ones come from
log lines the VMM prints: sbx-vmm's `VM set up in X ms` (vmm/vm.cpp) and
`guest boot time: X ms` (devices/legacy/boot_timer.cpp, the time of
init's write to the boot-timer byte at 0xd0000000, images/initramfs/init),
and Firecracker's `Guest-boot-time = N us` (its boot-timer device, same
convention). Guest-side timestamps: `guest_timestamps()` is the hook.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from typing import Callable

from .process_timing import WatchedRun, run_watched
from .vmm_commands import BootCommand, BootConfig, NotApplicable, boot_command
from .vmm_spec import VmmSpec

MARKER = b"SBX-BOOTED"
WORKLOAD = "boot"


@dataclass(frozen=True)
class Figure:
    id: str
    unit: str
    description: str


FIGURES = [
    Figure("start_to_init", "ms", "process start -> the guest init's first console line (SBX-BOOTED) "
           "read by the host"),
    Figure("start_to_exit", "ms", "process start -> process exit after the guest's reboot"),
    Figure("vmm_setup", "ms", "VMM-reported: its start -> vCPUs start (sbx-vmm 'VM set up in')"),
    Figure("vmm_boot_timer", "ms", "VMM-reported: its start -> init's boot-timer write "
           "(sbx-vmm 'guest boot time', Firecracker 'Guest-boot-time')"),
    Figure("kernel_to_init", "ms", "vmm_boot_timer - vmm_setup: guest kernel entry to init's "
           "boot-timer write"),
    Figure("init_to_console", "ms", "start_to_init - vmm_boot_timer: init's boot-timer write "
           "to its marker line read by the host"),
    Figure("init_to_exit", "ms", "start_to_exit - start_to_init: rest of init, the guest's "
           "reboot and the VMM's exit"),
]
# Stacked-bar segments, first complete one wins; each list sums to start -> exit
# (the last: start -> init).
BREAKDOWNS = [
    ["vmm_setup", "kernel_to_init", "init_to_console", "init_to_exit"],
    ["vmm_boot_timer", "init_to_console", "init_to_exit"],
    ["start_to_init", "init_to_exit"],
    ["start_to_init"],  # a VMM stopped at the marker (Cloud Hypervisor)
]

_VMM_LOG_PATTERNS = {
    "vmm_setup": (re.compile(rb"VM set up in ([0-9]+(?:\.[0-9]+)?) ms"), 1.0),
    "vmm_boot_timer": (re.compile(rb"guest boot time: ([0-9]+(?:\.[0-9]+)?) ms"), 1.0),
}
_FIRECRACKER_TIMER = re.compile(rb"Guest-boot-time\s*=\s*([0-9]+)\s*us")
_GUEST_TIMESTAMP = re.compile(r"^SBX-TS: ([a-z0-9_]+) ([0-9]+(?:\.[0-9]+)?)\s*$", re.MULTILINE)


def figure_list(runs: list[dict]) -> list[dict]:
    """FIGURES as results' `figures`, plus guest timestamps the runs reported."""
    declared = [{"id": f.id, "unit": f.unit, "description": f.description} for f in FIGURES]
    known = {f.id for f in FIGURES}
    extra = sorted({fid for r in runs for fid in r["figures"] if fid not in known})
    return declared + [{"id": fid, "unit": "ms", "description": "guest-side timestamp (SBX-TS line)"}
                       for fid in extra]


def vmm_reported_figures(output: bytes) -> dict[str, float]:
    """Figures the VMM printed itself, in ms (sbx-vmm's and Firecracker's lines)."""
    found: dict[str, float] = {}
    for fid, (pattern, scale) in _VMM_LOG_PATTERNS.items():
        m = pattern.search(output)
        if m:
            found[fid] = float(m.group(1)) * scale
    m = _FIRECRACKER_TIMER.search(output)
    if m and "vmm_boot_timer" not in found:
        found["vmm_boot_timer"] = float(m.group(1)) / 1000.0
    return found


def guest_timestamps(text: str) -> dict[str, float]:
    """Hook for guest-side timestamps: console lines `SBX-TS: NAME MS` (NAME
    lower-case, MS milliseconds on any guest clock) become figures
    `guest_NAME`. Our init prints none today; a guest that wants its own
    phases measured (e.g. from /proc/uptime or dmesg) prints such lines."""
    return {f"guest_{name}": float(ms) for name, ms in _GUEST_TIMESTAMP.findall(text)}


def figures_of(run: WatchedRun) -> dict[str, float]:
    """All figures of one successful boot, derived ones included."""
    figs: dict[str, float] = {"start_to_init": run.marker_s["init"] * 1000.0}
    if run.exit_s is not None:
        figs["start_to_exit"] = run.exit_s * 1000.0
        figs["init_to_exit"] = figs["start_to_exit"] - figs["start_to_init"]
    figs.update(vmm_reported_figures(run.output))
    if "vmm_boot_timer" in figs:
        figs["init_to_console"] = figs["start_to_init"] - figs["vmm_boot_timer"]
        if "vmm_setup" in figs:
            figs["kernel_to_init"] = figs["vmm_boot_timer"] - figs["vmm_setup"]
    figs.update(guest_timestamps(run.text()))
    return figs


def failure_of(run: WatchedRun, command: BootCommand, timeout: float) -> str | None:
    if run.spawn_error:
        return run.spawn_error
    if run.timed_out:
        return f"no {'marker' if 'init' not in run.marker_s else 'exit'} within {timeout:.0f} s"
    if "init" not in run.marker_s:
        return f"exited with status {run.status} before the marker"
    if not command.stop_at_marker and run.status != 0:
        return f"exit status {run.status}"
    return None


def rotation(names: list[str], round_index: int) -> list[str]:
    """Round r starts with the (r mod k)-th of the k names."""
    if not names:
        return []
    k = round_index % len(names)
    return names[k:] + names[:k]


@dataclass
class BootOptions:
    kernel: str
    initrd: str
    cmdline: str
    cpus: int
    memory_mib: int
    runs: int
    warmup: int
    timeout_s: float
    confinement: bool = False


def confinement_variants(specs: list[VmmSpec], jail_dir: str | None) -> list[VmmSpec]:
    """With --confinement: sbx-vmm also with its seccomp filters off and
    jailed (docs/security.md), in the same rotation, as VMMs of their own."""
    base = next((s for s in specs if s.name == "sbx"), None)
    if base is None or base.generic:
        return []
    extra = [base.variant("sbx-seccomp-off", "sbx-vmm, seccomp off", ("--seccomp", "off"))]
    if jail_dir:
        extra.append(base.variant("sbx-jailed", "sbx-vmm, jailed",
                                  ("--jail", jail_dir, "--jail-user", "4242:4343")))
    return extra


def _make_jail_dir() -> tuple[str | None, str | None]:
    path = tempfile.mkdtemp(prefix="sbx-bench-jail.")
    try:
        os.chown(path, 4242, 4343)
    except OSError as e:
        shutil.rmtree(path, ignore_errors=True)
        return None, f"cannot make the jail's folder ({e.strerror}; needs root)"
    return path, None


def run_boot(specs: list[VmmSpec], opts: BootOptions, *, unusable: Callable[[VmmSpec], str | None],
             log: Callable[[str], None]) -> dict:
    """Runs the workload; returns the `vmms` and `runs` parts of a result
    (results.schema.json) plus the workload's parameters and figures."""
    workdir = tempfile.mkdtemp(prefix="sbx-bench-boot.")
    jail_dir, jail_problem = (_make_jail_dir() if opts.confinement else (None, None))
    try:
        all_specs = specs + (confinement_variants(specs, jail_dir) if opts.confinement else [])
        cfg = BootConfig(opts.kernel, opts.initrd, opts.cmdline, opts.cpus, opts.memory_mib, workdir)
        vmms: list[dict] = []
        commands: dict[str, BootCommand] = {}
        for spec in all_specs:
            entry = {"name": spec.name, "kind": spec.kind, "label": spec.label, "path": spec.path,
                     "status": "ok", "reason": None, "argv": None, "notes": []}
            problem = unusable(spec)
            built = boot_command(spec, cfg) if problem is None else NotApplicable(problem)
            if isinstance(built, NotApplicable):
                entry.update(status="n/a", reason=built.reason)
                log(f"{spec.name}: n/a ({built.reason})")
            else:
                commands[spec.name] = built
                entry.update(argv=built.argv, notes=list(built.notes))
            vmms.append(entry)
        if opts.confinement and jail_problem:
            vmms.append({"name": "sbx-jailed", "kind": "sbx", "label": "sbx-vmm, jailed",
                         "path": None, "status": "n/a", "reason": jail_problem, "argv": None, "notes": []})
        runs = _rounds(list(commands), commands, opts, log)
        for entry in vmms:
            mine = [r for r in runs if r["vmm"] == entry["name"] and not r["warmup"]]
            if entry["status"] == "ok" and mine and not any(r["ok"] for r in mine):
                entry.update(status="failed", reason=f"all {len(mine)} runs failed: {mine[-1]['error']}")
        return {"vmms": vmms, "runs": runs}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        if jail_dir:
            shutil.rmtree(jail_dir, ignore_errors=True)


def _rounds(names: list[str], commands: dict[str, BootCommand], opts: BootOptions,
            log: Callable[[str], None]) -> list[dict]:
    runs: list[dict] = []
    total = opts.warmup + opts.runs
    for index in range(total):
        warmup = index < opts.warmup
        tag = f"warm-up {index + 1}/{opts.warmup}" if warmup else f"run {index - opts.warmup + 1}/{opts.runs}"
        for position, name in enumerate(rotation(names, index)):
            command = commands[name]
            watched = run_watched(command.argv, markers={"init": MARKER}, timeout=opts.timeout_s,
                                  stop_at="init" if command.stop_at_marker else None, env=command.env)
            error = failure_of(watched, command, opts.timeout_s)
            figures = figures_of(watched) if error is None else {}
            runs.append({"vmm": name, "round": index, "position": position, "warmup": warmup,
                         "ok": error is None, "error": error, "figures": figures})
            if error is None:
                exit_text = (f", exit {figures['start_to_exit']:9.1f} ms" if "start_to_exit" in figures
                             else ", stopped at the marker")
                log(f"{tag} {name:<16} init {figures['start_to_init']:9.1f} ms{exit_text}")
            else:
                log(f"{tag} {name:<16} FAILED: {error}")
                tail = watched.text()[-2000:]
                if tail:
                    log("  last output:\n" + "\n".join("  | " + line for line in tail.splitlines()))
    return runs
