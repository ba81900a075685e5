"""sbx-bench's command line: run, report, validate, machine.

docs/benchmarks.md, "sbx-bench", is the user's documentation.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import machine_facts, results, schema_check, stats
from .report_markdown import ratio_table, render_report, statistics_table, unavailable_vmms
from .vmm_commands import DEFAULT_CMDLINE, version_command
from .vmm_spec import DEFAULT_VMMS, VmmListError, parse_vmm_list, unusable_reason
from .workload_boot import BREAKDOWNS, WORKLOAD as BOOT, BootOptions, figure_list, run_boot

ROOT = Path(__file__).resolve().parents[2]
WORKLOADS = (BOOT,)


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
    run.add_argument("--initrd", help="guest initramfs, e.g. \"$(images/build initramfs)\"")
    run.add_argument("--cmdline", default=DEFAULT_CMDLINE, help="guest kernel command line")
    run.add_argument("--cpus", type=_positive, default=1)
    run.add_argument("--memory", type=_positive, default=256, help="MiB")
    run.add_argument("--timeout", type=float, default=120.0, help="seconds per boot (default 120)")
    run.add_argument("--bootstrap", type=_non_negative, default=stats.DEFAULT_RESAMPLES,
                     help=f"bootstrap resamples (default {stats.DEFAULT_RESAMPLES}; 0: no intervals)")
    run.add_argument("--seed", type=int, default=stats.DEFAULT_SEED,
                     help=f"bootstrap seed (default {stats.DEFAULT_SEED})")
    run.add_argument("--confidence", type=_probability, default=stats.DEFAULT_CONFIDENCE,
                     help=f"of the intervals (default {stats.DEFAULT_CONFIDENCE})")
    run.add_argument("--confinement", action="store_true",
                     help="also sbx-vmm with --seccomp off and jailed (needs root for the jail)")
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


def command_run(args: argparse.Namespace, argv: list[str]) -> int:
    try:
        specs = parse_vmm_list(args.vmm, root=ROOT, generic_sbx=args.test_generic_sbx)
    except VmmListError as e:
        print(f"sbx-bench: {e}", file=sys.stderr)
        return 2
    if not args.test_generic_sbx and not (args.kernel and args.initrd):
        print("sbx-bench: run boot needs --kernel and --initrd, e.g. --kernel \"$(images/build vmlinux)\" "
              "--initrd \"$(images/build initramfs)\" (bench/boot passes them)", file=sys.stderr)
        return 2
    for name in ("kernel", "initrd"):
        path = getattr(args, name)
        if path and not Path(path).is_file():
            print(f"sbx-bench: --{name} {path}: no such file", file=sys.stderr)
            return 2
    out = args.out or ROOT / "build" / f"bench-{args.workload}.json"
    csv_path = args.csv or out.with_suffix(".csv")
    outer = json.loads(args.outer_machine.read_text()) if args.outer_machine else None

    opts = BootOptions(kernel=args.kernel or "", initrd=args.initrd or "", cmdline=args.cmdline,
                       cpus=args.cpus, memory_mib=args.memory, runs=args.runs, warmup=args.warmup,
                       timeout_s=args.timeout, confinement=args.confinement)
    _log(f"sbx-bench: {args.workload}, VMMs {', '.join(s.name for s in specs)}, "
         f"{args.warmup} warm-up + {args.runs} rounds")
    measured = run_boot(specs, opts, unusable=unusable_reason, log=_log)
    versions = {s.name: machine_facts.command_output(version_command(s)) for s in specs}
    for vmm in measured["vmms"]:
        base = vmm["name"] if vmm["name"] in versions else vmm["kind"]
        vmm["version"] = versions.get(base)
    doc = results.new_result(
        workload=args.workload,
        parameters={"runs": args.runs, "warmup": args.warmup, "cpus": args.cpus,
                    "memory_mib": args.memory, "timeout_s": args.timeout, "cmdline": args.cmdline,
                    "confinement": args.confinement, "generic_sbx": args.test_generic_sbx},
        figures=figure_list(measured["runs"]),
        breakdowns=BREAKDOWNS, vmms=measured["vmms"], runs=measured["runs"],
        machine=machine_facts.machine_facts(ROOT), run_facts=machine_facts.run_facts(ROOT, argv),
        inputs={"kernel": machine_facts.file_facts(args.kernel),
                "initrd": machine_facts.file_facts(args.initrd)},
        resamples=args.bootstrap, confidence=args.confidence, seed=args.seed, outer_machine=outer)
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
