"""sbx-bench's command line: run, report, validate, machine.

docs/benchmarks.md, "sbx-bench", is the user's documentation.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import (machine_facts, results, schema_check, stats, workload_blk, workload_density, workload_exec,
               workload_fork, workload_restore, workload_snapshot, workload_vsock)
from .report_markdown import ratio_table, render_report, statistics_table, unavailable_vmms
from .vmm_commands import DEFAULT_CMDLINE, version_command
from .vmm_spec import DEFAULT_VMMS, VmmListError, parse_vmm_list, unusable_reason
from .workload_boot import AGENT_BREAKDOWNS, BREAKDOWNS, WORKLOAD as BOOT, BootOptions, figure_list, run_boot
from .workload_common import SnapshotOptions
from .workload_virtio import DEFAULT_MEMORY_MIB as VIRTIO_MEMORY_MIB, DEFAULT_TIMEOUT_S as VIRTIO_TIMEOUT_S
from .workload_virtio import VirtioOptions

ROOT = Path(__file__).resolve().parents[2]
# workload -> (its run function, module with FIGURES / figure_list, BREAKDOWNS, EXTRA_BASELINES).
# exec saves nothing, but runs the same agent guest with the same options.
SNAPSHOT_RUNNERS = {"restore": (workload_restore.run_restore, workload_restore),
                    "snapshot": (workload_snapshot.run_snapshot, workload_snapshot),
                    "fork": (workload_fork.run_fork, workload_fork),
                    "density": (workload_density.run_density, workload_density),
                    "exec": (workload_exec.run_exec, workload_exec)}
SNAPSHOT_WORKLOADS = tuple(SNAPSHOT_RUNNERS)
# A boot per measurement of bench/virtio_guest.sh's initramfs, with a scratch disk or a vsock device.
VIRTIO_RUNNERS = {"blk": (workload_blk.run_blk, workload_blk), "vsock": (workload_vsock.run_vsock, workload_vsock)}
VIRTIO_WORKLOADS = tuple(VIRTIO_RUNNERS)
WORKLOADS = (BOOT, *SNAPSHOT_WORKLOADS, *VIRTIO_WORKLOADS)
# Options of one workload only: name -> (workloads, default).
WORKLOAD_OPTIONS = {"blk_mib": (("blk",), 128), "rand_seconds": (("blk",), 10), "disk_mib": (("blk",), 256),
                    "formats": (("blk",), ("raw",)), "qemu_cache": (("blk",), "auto"),
                    "vsock_mib": (("vsock",), 64),
                    "budget_mib": (("density",), SnapshotOptions.budget_mib),
                    "max_sandboxes": (("density",), SnapshotOptions.max_sandboxes)}
# FILL_MIB when --fill-mib is not given: bench/snapshot's 1024; a fork's N
# guests (QEMU's each with its own copy) must fit beside each other; exec
# measures the agent, not memory; density's template is an idle guest.
DEFAULT_FILL_MIB = {"restore": 1024, "snapshot": 1024, "fork": 256, "exec": 0, "density": 0}


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: must be at least 1")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text}: must be at least 0")
    return value


def _cpu_list(text: str) -> tuple[int, ...]:
    try:
        cpus = tuple(sorted({int(part) for part in text.split(",")}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text}: a comma-separated list of CPU numbers, e.g. 0 or 0,1")
    if any(c < 0 for c in cpus):
        raise argparse.ArgumentTypeError(f"{text}: CPU numbers are at least 0")
    return cpus


def _formats(text: str) -> tuple[str, ...]:
    formats = tuple(dict.fromkeys(f for f in text.split(",") if f))
    bad = [f for f in formats if f not in workload_blk.FORMATS]
    if bad or not formats:
        raise argparse.ArgumentTypeError(f"{text}: a comma-separated list of {', '.join(workload_blk.FORMATS)}")
    return formats


def _probability(text: str) -> float:
    value = float(text)
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"{text}: a confidence level is between 0 and 1, e.g. 0.95")
    return value


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="sbx-bench", description="Benchmarks of sbx-vmm against other "
                                 "VMMs, with bootstrap statistics (docs/benchmarks.md, 'sbx-bench').")
    sub = ap.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a workload and write a results file")
    run.add_argument("workload", choices=WORKLOADS)
    run.add_argument("--vmm", default=DEFAULT_VMMS,
                     help="comma-separated: sbx[=PATH], qemu[=PATH], kvmtool=PATH, firecracker=PATH, "
                          f"cloud-hypervisor=PATH (default {DEFAULT_VMMS})")
    run.add_argument("--runs", type=_positive, default=5, help="measured rounds (default 5)")
    run.add_argument("--warmup", type=_non_negative, default=1, help="warm-up rounds first (default 1)")
    run.add_argument("--out", type=Path, help="results JSON (default build/bench-WORKLOAD.json)")
    run.add_argument("--csv", type=Path, help="statistics CSV (default: --out with .csv)")
    run.add_argument("--kernel", help="guest kernel, e.g. \"$(images/build vmlinux)\"")
    run.add_argument("--initrd", help="guest initramfs, e.g. \"$(images/build initramfs)\" (boot) or "
                                      "\"$(images/build minimal)\" (restore, snapshot, fork, density, exec: needs "
                                      "sbx-agent); blk, vsock: one with bench/virtio_guest.sh as /sbx-run and "
                                      "the guest tools (bench/virtio makes it)")
    run.add_argument("--cmdline", help="guest kernel command line (default: sbx-vmm's for boot, "
                                       "bench/snapshot's for the others)")
    run.add_argument("--cpus", type=_positive, default=1)
    run.add_argument("--memory", type=_positive, help="MiB (default: 256 for boot, blk and vsock, FILL_MIB + 512 "
                                                      "for the others)")
    run.add_argument("--timeout", type=float, help="seconds per boot (boot: default 120; blk, vsock: 300)")
    run.add_argument("--fill-mib", type=_non_negative,
                     help="restore, snapshot, fork, density, exec: MiB of random data the guest writes before "
                          "the save or the execs (default 1024; fork 256; density, exec 0)")
    run.add_argument("--forks", type=_positive, default=4, help="fork: children per round (default 4)")
    run.add_argument("--execs", type=_positive, default=20,
                     help="exec: execs of `true` per round on fresh connections, and as many on one "
                          "connection (default 20)")
    run.add_argument("--budget-mib", type=_positive,
                     help="density: stop adding children before the sum of their Pss passes this many MiB "
                          f"(default {SnapshotOptions.budget_mib}; at most MemAvailable)")
    run.add_argument("--max-sandboxes", type=_positive,
                     help=f"density: children at most (default {SnapshotOptions.max_sandboxes})")
    run.add_argument("--vmm-cpus", type=_cpu_list,
                     help="restore, snapshot, fork, density, exec: run every VMM process on these CPUs, e.g. 0 "
                          "(bench/snapshot does for fork in the nested harness)")
    run.add_argument("--blk-mib", type=_positive, help="blk: MiB written and read sequentially (default 128)")
    run.add_argument("--rand-seconds", type=_positive, help="blk: seconds of 4 KiB random reads (default 10)")
    run.add_argument("--disk-mib", type=_positive, help="blk: the scratch disk's MiB (default 256)")
    run.add_argument("--formats", type=_formats,
                     help="blk: disk formats, comma-separated: raw, qcow2 (a fresh overlay of the raw disk per "
                          "boot; paths NAME-qcow2) (default raw)")
    run.add_argument("--qemu-cache", choices=workload_blk.QEMU_CACHES,
                     help="blk: QEMU's drive cache (default auto: none when the disk's file system takes "
                          "O_DIRECT, else writeback)")
    run.add_argument("--vsock-mib", type=_positive, help="vsock: MiB sent each way (default 64)")
    run.add_argument("--bootstrap", type=_non_negative, default=stats.DEFAULT_RESAMPLES,
                     help=f"bootstrap resamples (default {stats.DEFAULT_RESAMPLES}; 0: no intervals)")
    run.add_argument("--seed", type=int, default=stats.DEFAULT_SEED,
                     help=f"bootstrap seed (default {stats.DEFAULT_SEED})")
    run.add_argument("--confidence", type=_probability, default=stats.DEFAULT_CONFIDENCE,
                     help=f"of the intervals (default {stats.DEFAULT_CONFIDENCE})")
    run.add_argument("--confinement", action="store_true",
                     help="also sbx-vmm with --seccomp off and jailed (needs root for the jail)")
    run.add_argument("--agent", action="store_true",
                     help="boot: the minimal image (--initrd \"$(images/build minimal)\") with a vsock device; "
                          "also times the agent's first answered health (start_to_agent, init_to_agent); "
                          "default --out build/bench-boot-agent.json")
    run.add_argument("--outer-machine", type=Path,
                     help="JSON of `sbx-bench machine` taken outside the nested harness")
    run.add_argument("--test-generic-sbx", action="store_true",
                     help="TEST ONLY: run sbx=PATH as a plain command without boot arguments "
                          "(the unit tests' fake VMM); results are not a benchmark")

    rep = sub.add_parser("report", help="Markdown + PNG report of one or more results files")
    rep.add_argument("results", nargs="+", type=Path)
    rep.add_argument("--out", type=Path, help="directory (default: next to the first file, NAME-report)")

    val = sub.add_parser("validate", help="check results files against results.schema.json")
    val.add_argument("results", nargs="+", type=Path)

    mac = sub.add_parser("machine", help="print this machine's facts as JSON")
    mac.add_argument("--out", type=Path)
    return ap


def _log(text: str) -> None:
    print(text, flush=True)


def _usage_error(text: str) -> int:
    print(f"sbx-bench: {text}", file=sys.stderr)
    return 2


def _check_run_args(args: argparse.Namespace) -> str | None:
    """Why these `run` arguments cannot work, or None."""
    snapshot_workload = args.workload in SNAPSHOT_WORKLOADS
    if args.workload != BOOT and args.test_generic_sbx:
        return "--test-generic-sbx is for the boot workload only"
    if args.workload != BOOT and args.confinement:
        return "--confinement is for the boot workload only"
    if args.workload != BOOT and args.agent:
        return ("--agent is for the boot workload only (restore, snapshot, fork, density and exec always have "
                "the agent)")
    if args.agent and args.test_generic_sbx:
        return "--agent needs each VMM's own command line with a vsock device: not with --test-generic-sbx"
    if not snapshot_workload and (args.vmm_cpus or args.fill_mib is not None):
        return "--fill-mib and --vmm-cpus are for restore, snapshot, fork, density and exec"
    for name, (workloads, _) in WORKLOAD_OPTIONS.items():
        if getattr(args, name) is not None and args.workload not in workloads:
            return f"--{name.replace('_', '-')} is for the {' and '.join(workloads)} workload only"
    if args.workload == "blk" and (args.blk_mib or 128) > (args.disk_mib or 256):
        return "--blk-mib exceeds the scratch disk's --disk-mib"
    if args.workload in VIRTIO_WORKLOADS and not (args.kernel and args.initrd):
        return (f"run {args.workload} needs --kernel and --initrd: the initramfs with bench/virtio_guest.sh as "
                "/sbx-run and the guest tools (bench/virtio makes it and passes both)")
    if not args.test_generic_sbx and not (args.kernel and args.initrd):
        image = "minimal" if snapshot_workload or args.agent else "initramfs"
        wrapper = {"boot": "bench/boot", "exec": None}.get(args.workload, "bench/snapshot")
        return (f"run {args.workload} needs --kernel and --initrd, e.g. --kernel \"$(images/build vmlinux)\" "
                f"--initrd \"$(images/build {image})\"" + (f" ({wrapper} passes them)" if wrapper else ""))
    for name in ("kernel", "initrd"):
        path = getattr(args, name)
        if path and not Path(path).is_file():
            return f"--{name} {path}: no such file"
    return None


def _measure_boot(args: argparse.Namespace, specs: list) -> dict:
    cmdline = args.cmdline or DEFAULT_CMDLINE
    memory = args.memory or 256
    timeout = args.timeout if args.timeout is not None else 120.0
    opts = BootOptions(kernel=args.kernel or "", initrd=args.initrd or "", cmdline=cmdline,
                       cpus=args.cpus, memory_mib=memory, runs=args.runs, warmup=args.warmup,
                       timeout_s=timeout, confinement=args.confinement, agent=args.agent)
    measured = run_boot(specs, opts, unusable=unusable_reason, log=_log)
    return {"vmms": measured["vmms"], "runs": measured["runs"],
            "figures": figure_list(measured["runs"], agent=args.agent),
            "breakdowns": AGENT_BREAKDOWNS if args.agent else BREAKDOWNS, "extra_baselines": [],
            "parameters": {"runs": args.runs, "warmup": args.warmup, "cpus": args.cpus, "memory_mib": memory,
                           "timeout_s": timeout, "cmdline": measured["cmdline"], "confinement": args.confinement,
                           "generic_sbx": args.test_generic_sbx, "agent": args.agent}}


def _own_options(args: argparse.Namespace) -> dict:
    """The workload's own WORKLOAD_OPTIONS, as given or their defaults."""
    return {name: getattr(args, name) if getattr(args, name) is not None else default
            for name, (workloads, default) in WORKLOAD_OPTIONS.items() if args.workload in workloads}


def _measure_snapshot_workload(args: argparse.Namespace, specs: list) -> dict:
    runner, module = SNAPSHOT_RUNNERS[args.workload]
    fill = args.fill_mib if args.fill_mib is not None else DEFAULT_FILL_MIB[args.workload]
    given = _own_options(args)
    opts = SnapshotOptions(kernel=args.kernel, image=args.initrd, cpus=args.cpus, memory_mib=args.memory,
                           fill_mib=fill, runs=args.runs, warmup=args.warmup, forks=args.forks,
                           execs=args.execs, vmm_cpus=args.vmm_cpus,
                           **({"cmdline": args.cmdline} if args.cmdline else {}), **given)
    measured = runner(specs, opts, unusable=unusable_reason, log=_log)
    parameters = {"runs": args.runs, "warmup": args.warmup, "cpus": args.cpus,
                  "memory_mib": opts.guest_memory_mib, "fill_mib": fill, "cmdline": opts.cmdline,
                  "vmm_cpus": list(opts.vmm_cpus) if opts.vmm_cpus else None, **given}
    if args.workload == "fork":
        parameters["forks"] = args.forks
        figures = workload_fork.figure_list(args.forks)
    elif args.workload == "density":
        figures = workload_density.figure_list(opts.max_sandboxes)
    else:
        figures = module.figure_list()
    if args.workload == "exec":
        parameters["execs"] = args.execs
    return {**measured, "figures": figures, "breakdowns": getattr(module, "BREAKDOWNS", []),
            "extra_baselines": getattr(module, "EXTRA_BASELINES", []), "parameters": parameters}


def _measure_virtio_workload(args: argparse.Namespace, specs: list) -> dict:
    runner, module = VIRTIO_RUNNERS[args.workload]
    given = _own_options(args)
    opts = VirtioOptions(kernel=args.kernel, initrd=args.initrd, cpus=args.cpus,
                         memory_mib=args.memory or VIRTIO_MEMORY_MIB, runs=args.runs, warmup=args.warmup,
                         timeout_s=args.timeout if args.timeout is not None else VIRTIO_TIMEOUT_S,
                         **({"cmdline": args.cmdline} if args.cmdline else {}), **given)
    measured = runner(specs, opts, unusable=unusable_reason, log=_log)
    parameters = {"runs": args.runs, "warmup": args.warmup, "cpus": args.cpus, "memory_mib": opts.memory_mib,
                  "cmdline": measured["cmdline"], "timeout_s": opts.timeout_s,
                  **{k: list(v) if isinstance(v, tuple) else v for k, v in given.items()}}
    if "qemu_cache" in measured:
        parameters["qemu_cache"] = measured["qemu_cache"]
    return {"vmms": measured["vmms"], "runs": measured["runs"], "figures": module.figure_list(),
            "breakdowns": [], "extra_baselines": [], "parameters": parameters}


def _version_of(vmm: dict, versions: dict[str, str | None]) -> str | None:
    """A path's VMM version: its own name's, else the longest VMM name it
    extends (`sbx@b-qcow2`: sbx@b's), else its kind's."""
    if vmm["name"] in versions:
        return versions[vmm["name"]]
    base = max((n for n in versions if vmm["name"].startswith(n + "-")), key=len, default=vmm["kind"])
    return versions.get(base)


def command_run(args: argparse.Namespace, argv: list[str]) -> int:
    try:
        specs = parse_vmm_list(args.vmm, root=ROOT, generic_sbx=args.test_generic_sbx)
    except VmmListError as e:
        return _usage_error(str(e))
    problem = _check_run_args(args)
    if problem:
        return _usage_error(problem)
    out = args.out or ROOT / "build" / f"bench-{args.workload}{'-agent' if args.agent else ''}.json"
    csv_path = args.csv or out.with_suffix(".csv")
    outer = json.loads(args.outer_machine.read_text()) if args.outer_machine else None

    _log(f"sbx-bench: {args.workload}, VMMs {', '.join(s.name for s in specs)}, "
         f"{args.warmup} warm-up + {args.runs} rounds")
    measure = (_measure_boot if args.workload == BOOT else
               _measure_virtio_workload if args.workload in VIRTIO_WORKLOADS else _measure_snapshot_workload)
    measured = measure(args, specs)
    versions = {s.name: machine_facts.command_output(version_command(s)) for s in specs}
    for vmm in measured["vmms"]:
        vmm["version"] = _version_of(vmm, versions)
    doc = results.new_result(
        workload=args.workload, parameters=measured["parameters"], figures=measured["figures"],
        breakdowns=measured["breakdowns"], vmms=measured["vmms"], runs=measured["runs"],
        machine=machine_facts.machine_facts(ROOT), run_facts=machine_facts.run_facts(ROOT, argv),
        inputs={"kernel": machine_facts.file_facts(args.kernel),
                "initrd": machine_facts.file_facts(args.initrd)},
        resamples=args.bootstrap, confidence=args.confidence, seed=args.seed, outer_machine=outer,
        extra_baselines=measured["extra_baselines"])
    results.write_json(doc, out)
    results.write_csv(doc, csv_path)
    problems = schema_check.validate(doc)
    print("\n" + "\n".join(statistics_table(doc) + [""] + unavailable_vmms(doc) + ratio_table(doc)))
    print(f"results: {out}\nCSV: {csv_path}\nreport: {Path(sys.argv[0]).name} report {out}")
    if problems:
        print("sbx-bench: the results do not match the schema:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    if not doc["statistics"]:
        print("sbx-bench: no successful runs", file=sys.stderr)
        return 1
    return 0


def command_report(args: argparse.Namespace) -> int:
    docs = []
    for path in args.results:
        doc = results.load_json(path)
        problems = schema_check.validate(doc)
        if problems:
            print(f"sbx-bench: {path} is not a valid results file:\n  " + "\n  ".join(problems[:20]),
                  file=sys.stderr)
            return 1
        docs.append((path.name, doc))
    first = args.results[0]
    out_dir = args.out or first.with_name(first.stem + "-report")
    report = render_report(docs, out_dir)
    print(report)
    return 0


def command_validate(args: argparse.Namespace) -> int:
    status = 0
    for path in args.results:
        problems = schema_check.validate(results.load_json(path))
        print(f"{path}: {'valid' if not problems else 'INVALID'}")
        for p in problems:
            print(f"  {p}")
        status |= bool(problems)
    return status


def command_machine(args: argparse.Namespace) -> int:
    text = json.dumps(machine_facts.machine_facts(ROOT), indent=1) + "\n"
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv if argv is None else argv)
    args = build_parser().parse_args(argv[1:])
    if args.command == "run":
        return command_run(args, argv)
    if args.command == "report":
        return command_report(args)
    if args.command == "validate":
        return command_validate(args)
    return command_machine(args)
