#!/usr/bin/env python3
"""bench/sbx --jail-compare, the summary: the sandbox life cycle through
`sbx` with every VMM jailed (sbxd --jail on, the default: namespaces,
pivot_root, its own uid; docs/security.md) beside the same with
--jail off, measured in rounds of one run each, on then off and off then
on in turn, in one level-1 run (bench/sbx_session.sh). seccomp stays on in
both (sbxd never turns it off); bench/boot --confinement measures it on
sbx-vmm alone.

Reads LOGDIR/jail-{on,off}-ROUND.json (sbx_runner.py --lifecycle-only),
writes the markdown table to LOGDIR/sbx-table.md and the JSON to
JSON_PATH. Per operation: each side's median, the ratio of medians with a
bootstrap 95 % interval (bench/sbxbench/stats.py), and the median of the
per-round ratios: a round's two runs are minutes apart, so their ratio
cancels load that drifts across the run.

Usage: sbx_jail.py LOGDIR JSON_PATH
"""

import glob
import json
import os
import re
import statistics
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sbx_runner import OPERATIONS, fmt  # noqa: E402
from sbxbench.stats import ratio_of_medians  # noqa: E402

MODES = ("on", "off")


def rounds_of(logdir):
    """{mode: {round: {op: seconds}}} and {mode: {op: failures}}."""
    samples = {m: {} for m in MODES}
    failures = {m: {key: 0 for key, _ in OPERATIONS} for m in MODES}
    for path in glob.glob(os.path.join(logdir, "jail-*-*.json")):
        m = re.fullmatch(r"jail-(on|off)-(\d+)\.json", os.path.basename(path))
        if not m:
            continue
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        mode, round_no = m.group(1), int(m.group(2))
        samples[mode][round_no] = {key: s[0] for key, s in data.get("samples", {}).items() if s}
        for key, _ in OPERATIONS:
            failures[mode][key] += data.get("failures", {}).get(key, 0)
    return samples, failures


def compare(samples, key):
    on = [r[key] for _, r in sorted(samples["on"].items()) if key in r]
    off = [r[key] for _, r in sorted(samples["off"].items()) if key in r]
    paired = [samples["on"][n][key] / samples["off"][n][key] for n in sorted(samples["on"])
              if key in samples["on"][n] and key in samples["off"].get(n, {}) and samples["off"][n][key] > 0]
    ratio = ratio_of_medians(on, off, label=f"jail/{key}")
    return {"on": on, "off": off,
            "on_median": statistics.median(on) if on else None,
            "off_median": statistics.median(off) if off else None,
            "ratio": ratio.ratio, "ratio_ci": list(ratio.ci) if ratio.ci else None,
            "paired_ratios": paired, "paired_median": statistics.median(paired) if paired else None}


def format_table(rows, failures):
    lines = ["| operation | jail on, median s | jail off, median s | on / off [95 % CI] | per-round on / off, median | runs on, off |",
             "|---|---|---|---|---|---|"]
    for key, label in OPERATIONS:
        r = rows[key]
        ratio = "—" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        if r["ratio_ci"]:
            ratio += f" [{r['ratio_ci'][0]:.2f}, {r['ratio_ci'][1]:.2f}]"
        paired = "—" if r["paired_median"] is None else f"{r['paired_median']:.2f}x"
        runs = ", ".join(f"{len(r[m])}" + (f" ({failures[m][key]} failed)" if failures[m][key] else "") for m in MODES)
        lines.append(f"| {label} | {fmt(r['on_median'])} | {fmt(r['off_median'])} | {ratio} | {paired} | {runs} |")
    return "\n".join(lines)


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    logdir, json_path = sys.argv[1:]
    samples, failures = rounds_of(logdir)
    rows = {key: compare(samples, key) for key, _ in OPERATIONS}
    rounds = len(set(samples["on"]) | set(samples["off"]))
    text = "\n\n".join([
        "sbx benchmark, the jail's cost: the life cycle through `sbx` with sbxd --jail on "
        "(the default) and --jail off, in alternating rounds in one nested-harness run "
        "(absolute times 10-50x native; only ratios mean anything). seccomp is on in both.",
        f"{rounds} rounds, one run of each per round",
        format_table(rows, failures)])
    with open(os.path.join(logdir, "sbx-table.md"), "w", encoding="utf-8") as f:
        f.write(text + "\n")
    with open(json_path, "w", encoding="utf-8") as f:
        json.dump({"note": "nested harness: absolute times 10-50x native; compare ratios within one run",
                   "rounds": rounds, "operations": rows, "failures": failures,
                   "samples": samples}, f, indent=2)
        f.write("\n")
    print(text, flush=True)
    return 0 if all(rows[key]["on"] and rows[key]["off"] for key, _ in OPERATIONS) else 1


if __name__ == "__main__":
    sys.exit(main())
