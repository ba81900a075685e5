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
convention). Guest-side timestamps: console lines `SBX-TS: NAME MS`, the
guest's own clock (images/initramfs/init prints `init` and, in agent mode,
`agent_start`), become figures guest_NAME (`guest_timestamps()`).

With --agent (BootOptions.agent) the guest is the minimal image (busybox
+ sbx-agent) with a vsock device (virtio_commands.device_command: the
hybrid Unix socket of sbx-vmm and Firecracker, vhost-vsock with a CID of
its own per VMM for QEMU and kvmtool) and the agent's token on the
command line; from the process start the host polls the agent's `health`
(guest_agent.AgentWatch) and, once it answered, stops the guest with an
exec of `reboot -f`. Figures: AGENT_FIGURES (start_to_agent, init_to_agent
instead of the exit ones) and the guest_* ones.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, replace
from typing import Callable

from . import guest_agent as ga
from .process_timing import WatchedRun, run_watched
from .virtio_commands import (GUEST_CID, VHOST_VSOCK, Devices, device_command, hybrid_vsock,
                              not_applicable as vsock_not_applicable)
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
_BY_ID = {f.id: f for f in FIGURES}
# --agent: the agent's figures instead of the exit ones (the guest's exit
# follows the host's reboot request there, so it measures nothing of the boot).
AGENT_FIGURES = [
    _BY_ID["start_to_init"],
    Figure("start_to_agent", "ms", "process start -> the first answered agent health over vsock (polled "
           "every 5 ms from the process start), host clock"),
    Figure("init_to_agent", "ms", "start_to_agent - start_to_init: the init's marker read by the host -> "
           "the agent answered (userspace to agent)"),
    *(_BY_ID[fid] for fid in ("vmm_setup", "vmm_boot_timer", "kernel_to_init", "init_to_console")),
]
# Guest-side figures (SBX-TS lines, guest clock: CLOCK_MONOTONIC, from the
# kernel's start), in this order before any other guest_NAME.
GUEST_FIGURES = {
    "guest_init": "guest clock, SBX-TS: init: kernel start -> /init's first command done (its /proc mount)",
    "guest_agent_start": "guest clock, SBX-TS: agent_start: kernel start -> /init starts the agent",
    "guest_init_to_agent_start": "guest_agent_start - guest_init: /init's start -> its start of the agent",
}
# Stacked-bar segments, first complete one wins; each list sums to start -> exit
# (the last: start -> init).
BREAKDOWNS = [
    ["vmm_setup", "kernel_to_init", "init_to_console", "init_to_exit"],
    ["vmm_boot_timer", "init_to_console", "init_to_exit"],
    ["start_to_init", "init_to_exit"],
    ["start_to_init"],  # a VMM stopped at the marker (Cloud Hypervisor)
]
# --agent: each list sums to start -> agent.
AGENT_BREAKDOWNS = [
    ["vmm_setup", "kernel_to_init", "init_to_console", "init_to_agent"],
    ["vmm_boot_timer", "init_to_console", "init_to_agent"],
    ["start_to_init", "init_to_agent"],
    ["start_to_agent"],
]
CLOUD_HYPERVISOR_AGENT = ("sbx-bench gives Cloud Hypervisor no vsock device: its virtio devices are virtio-pci on "
                          "x86 (our guest kernel has no CONFIG_VIRTIO_PCI), and it restarts the VM at the "
                          "guest's reboot")

_VMM_LOG_PATTERNS = {
    "vmm_setup": (re.compile(rb"VM set up in ([0-9]+(?:\.[0-9]+)?) ms"), 1.0),
    "vmm_boot_timer": (re.compile(rb"guest boot time: ([0-9]+(?:\.[0-9]+)?) ms"), 1.0),
}
_FIRECRACKER_TIMER = re.compile(rb"Guest-boot-time\s*=\s*([0-9]+)\s*us")
_GUEST_TIMESTAMP = re.compile(r"^SBX-TS: ([a-z0-9_]+) ([0-9]+(?:\.[0-9]+)?)\s*$", re.MULTILINE)


def figure_list(runs: list[dict], agent: bool = False) -> list[dict]:
    """FIGURES (--agent: AGENT_FIGURES) as results' `figures`, plus the
    guest timestamps the runs reported (GUEST_FIGURES first)."""
    figures = AGENT_FIGURES if agent else FIGURES
    declared = [{"id": f.id, "unit": f.unit, "description": f.description} for f in figures]
    known = {f.id for f in figures}
    seen = {fid for r in runs for fid in r["figures"] if fid not in known}
    extra = [fid for fid in GUEST_FIGURES if fid in seen] + sorted(seen - set(GUEST_FIGURES))
    return declared + [{"id": fid, "unit": "ms",
                        "description": GUEST_FIGURES.get(fid, "guest-side timestamp (SBX-TS line)")}
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
    """Guest-side timestamps: console lines `SBX-TS: NAME MS` (NAME
    lower-case, MS milliseconds on the guest's clock; images/initramfs/init
    prints `init` and `agent_start`, CLOCK_MONOTONIC) become figures
    `guest_NAME`; a name's first line counts (the agent's restarts print
    agent_start again). With both of /init's: guest_init_to_agent_start."""
    figs: dict[str, float] = {}
    for name, ms in _GUEST_TIMESTAMP.findall(text):
        figs.setdefault(f"guest_{name}", float(ms))
    if "guest_init" in figs and "guest_agent_start" in figs:
        figs["guest_init_to_agent_start"] = figs["guest_agent_start"] - figs["guest_init"]
    return figs


def figures_of(run: WatchedRun, agent_s: float | None = None) -> dict[str, float]:
    """All figures of one successful boot, derived ones included; with
    `agent_s` (--agent: seconds to the first answered health) the agent's
    instead of the exit's."""
    figs: dict[str, float] = {"start_to_init": run.marker_s["init"] * 1000.0}
    if agent_s is not None:
        figs["start_to_agent"] = agent_s * 1000.0
        figs["init_to_agent"] = figs["start_to_agent"] - figs["start_to_init"]
    elif run.exit_s is not None:
        figs["start_to_exit"] = run.exit_s * 1000.0
        figs["init_to_exit"] = figs["start_to_exit"] - figs["start_to_init"]
    figs.update(vmm_reported_figures(run.output))
    if "vmm_boot_timer" in figs:
        figs["init_to_console"] = figs["start_to_init"] - figs["vmm_boot_timer"]
        if "vmm_setup" in figs:
            figs["kernel_to_init"] = figs["vmm_boot_timer"] - figs["vmm_setup"]
    figs.update(guest_timestamps(run.text()))
    return figs


def agent_failure(run: WatchedRun, watch: ga.AgentWatch) -> str | None:
    """Why an --agent boot has no figures, or None. Its exit does not
    count: it follows the host's reboot request (or SIGKILL)."""
    if run.spawn_error:
        return run.spawn_error
    if watch.answered_s is None:
        why = f"agent: {watch.error or 'no answer'}"
        if b"SBX-AGENT-START" not in run.output:
            why += (" (no SBX-AGENT-START on the console: --agent needs the minimal image, "
                    "--initrd \"$(images/build minimal)\")")
        return why
    if "init" not in run.marker_s:
        return f"the agent answered, but the host read no {MARKER.decode()} line"
    return None


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
    agent: bool = False
    vhost_vsock: str = VHOST_VSOCK


def agent_not_applicable(spec: VmmSpec, kernel: str, vhost_vsock: str = VHOST_VSOCK) -> str | None:
    """Why `spec` cannot boot with --agent (a vsock device the host reaches), or None."""
    if spec.generic:
        return "--agent needs the VMM's own command line with a vsock device, not --test-generic-sbx"
    if spec.kind == "cloud-hypervisor":
        return CLOUD_HYPERVISOR_AGENT
    return vsock_not_applicable(spec, kernel=kernel, vsock=True, vhost_vsock=vhost_vsock, wrapper="bench/boot")


@dataclass(frozen=True)
class AgentBoot:
    """An --agent boot: the command, and the agent the host polls."""
    command: BootCommand
    agent: ga.Agent


def agent_boot(spec: VmmSpec, cfg: BootConfig, token: str, *, uds_dir: str, cid: int) -> AgentBoot | NotApplicable:
    """`spec`'s boot command of `cfg` (its command line with the token)
    plus a vsock device (virtio_commands.device_command): sbx-vmm and
    Firecracker with the hybrid socket `uds_dir`/NAME.vsock, QEMU and
    kvmtool vhost-vsock with guest CID `cid`, which must be this VMM's own."""
    uds = os.path.join(uds_dir, f"{spec.name}.vsock") if hybrid_vsock(spec.kind) else None
    built = device_command(spec, cfg, Devices(vsock=True, vsock_uds=uds, cid=cid))
    if isinstance(built, NotApplicable):
        return built
    endpoint = ga.Endpoint(uds=uds) if uds else ga.Endpoint(cid=cid)
    how = (f"the minimal image's sbx-agent reached through {endpoint.describe()}: health polled every "
           f"{ga.POLL_S * 1000:.0f} ms from the process start, then an exec of `reboot -f` stops the guest")
    return AgentBoot(replace(built, notes=list(built.notes) + [how]), ga.Agent(endpoint, token))


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


@dataclass
class BootPlan:
    """Every VMM's `vmms` entry (n/a ones with the reason), the commands of
    the ones that run, and with --agent their agents and the token."""
    vmms: list[dict]
    commands: dict[str, BootCommand]
    agents: dict[str, ga.Agent]
    token: str | None
    cmdline: str  # as recorded: the token as <token>


def plan_boot(specs: list[VmmSpec], opts: BootOptions, *, workdir: str, jail_dir: str | None,
              unusable: Callable[[VmmSpec], str | None], log: Callable[[str], None]) -> BootPlan:
    """The commands of `specs` (confinement variants included) booting
    `opts`; with --agent each has a vsock device (agent_boot; QEMU and
    kvmtool a CID of their own, from 3 on) and the agent's token on its
    command line (a fresh one per run), kept out of the recorded argv."""
    token = ga.new_token() if opts.agent else None
    cmdline = ga.token_cmdline(opts.cmdline, token) if token else opts.cmdline
    cfg = BootConfig(opts.kernel, opts.initrd, cmdline, opts.cpus, opts.memory_mib, workdir)
    vhost_cids = itertools.count(GUEST_CID)  # vhost-vsock: one guest per CID on a host
    plan = BootPlan([], {}, {}, token, ga.redacted([cmdline], token)[0])
    for spec in specs:
        entry = {"name": spec.name, "kind": spec.kind, "label": spec.label, "path": spec.path,
                 "status": "ok", "reason": None, "argv": None, "notes": []}
        problem = (agent_not_applicable(spec, opts.kernel, opts.vhost_vsock) if token else None) or unusable(spec)
        if problem is not None:
            built: BootCommand | NotApplicable = NotApplicable(problem)
        elif token:
            # A jailed sbx-vmm sees only its jail's folder: its socket goes there.
            uds_dir = jail_dir if jail_dir and "--jail" in spec.extra_args else workdir
            cid = GUEST_CID if hybrid_vsock(spec.kind) else next(vhost_cids)
            booted = agent_boot(spec, cfg, token, uds_dir=uds_dir, cid=cid)
            if isinstance(booted, AgentBoot):
                plan.agents[spec.name] = booted.agent
                built = booted.command
            else:
                built = booted
        else:
            built = boot_command(spec, cfg)
        if isinstance(built, NotApplicable):
            entry.update(status="n/a", reason=built.reason)
            log(f"{spec.name}: n/a ({built.reason})")
        else:
            plan.commands[spec.name] = built
            entry.update(argv=ga.redacted(built.argv, token), notes=list(built.notes))
        plan.vmms.append(entry)
    return plan


def run_boot(specs: list[VmmSpec], opts: BootOptions, *, unusable: Callable[[VmmSpec], str | None],
             log: Callable[[str], None]) -> dict:
    """Runs the workload; returns the `vmms` and `runs` parts of a result
    (results.schema.json) and the kernel command line as recorded."""
    workdir = tempfile.mkdtemp(prefix="sbx-bench-boot.")
    jail_dir, jail_problem = (_make_jail_dir() if opts.confinement else (None, None))
    try:
        all_specs = specs + (confinement_variants(specs, jail_dir) if opts.confinement else [])
        plan = plan_boot(all_specs, opts, workdir=workdir, jail_dir=jail_dir, unusable=unusable, log=log)
        vmms = plan.vmms
        if opts.confinement and jail_problem:
            vmms.append({"name": "sbx-jailed", "kind": "sbx", "label": "sbx-vmm, jailed",
                         "path": None, "status": "n/a", "reason": jail_problem, "argv": None, "notes": []})
        runs = _rounds(list(plan.commands), plan.commands, opts, log, plan.agents)
        for entry in vmms:
            mine = [r for r in runs if r["vmm"] == entry["name"] and not r["warmup"]]
            if entry["status"] == "ok" and mine and not any(r["ok"] for r in mine):
                entry.update(status="failed", reason=f"all {len(mine)} runs failed: {mine[-1]['error']}")
        return {"vmms": vmms, "runs": runs, "cmdline": plan.cmdline}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        if jail_dir:
            shutil.rmtree(jail_dir, ignore_errors=True)


def _boot_once(command: BootCommand, opts: BootOptions, agent: ga.Agent | None
               ) -> tuple[WatchedRun, str | None, dict[str, float], str]:
    """One boot: its output, its error (None: it counts), its figures and
    what the log line says after the init's time."""
    if agent is None:
        watched = run_watched(command.argv, markers={"init": MARKER}, timeout=opts.timeout_s,
                              stop_at="init" if command.stop_at_marker else None, env=command.env)
        error = failure_of(watched, command, opts.timeout_s)
        figures = figures_of(watched) if error is None else {}
        said = (f", exit {figures['start_to_exit']:9.1f} ms" if "start_to_exit" in figures
                else ", stopped at the marker")
        return watched, error, figures, said
    watch = ga.AgentWatch(agent, opts.timeout_s)
    watched = run_watched(command.argv, markers={"init": MARKER}, timeout=opts.timeout_s, env=command.env,
                          on_spawn=watch.on_spawn)
    finished = watch.join()
    error = agent_failure(watched, watch)
    figures = figures_of(watched, watch.answered_s) if error is None else {}
    said = f", agent {figures['start_to_agent']:9.1f} ms" if error is None else ""
    if watch.killed:
        said += f", VMM killed {watch.grace_s:.0f} s after the guest's reboot request"
    elif watched.status not in (0, None):
        said += f", VMM exit status {watched.status} after the reboot request"
    if not finished:
        said += ", the agent watch still runs"
    return watched, error, figures, said


def _rounds(names: list[str], commands: dict[str, BootCommand], opts: BootOptions,
            log: Callable[[str], None], agents: dict[str, ga.Agent] | None = None) -> list[dict]:
    runs: list[dict] = []
    total = opts.warmup + opts.runs
    for index in range(total):
        warmup = index < opts.warmup
        tag = f"warm-up {index + 1}/{opts.warmup}" if warmup else f"run {index - opts.warmup + 1}/{opts.runs}"
        for position, name in enumerate(rotation(names, index)):
            watched, error, figures, said = _boot_once(commands[name], opts, (agents or {}).get(name))
            runs.append({"vmm": name, "round": index, "position": position, "warmup": warmup,
                         "ok": error is None, "error": error, "figures": figures})
            if error is None:
                log(f"{tag} {name:<16} init {figures['start_to_init']:9.1f} ms{said}")
            else:
                log(f"{tag} {name:<16} FAILED: {error}")
                tail = watched.text()[-2000:]
                if tail:
                    log("  last output:\n" + "\n".join("  | " + line for line in tail.splitlines()))
    return runs
