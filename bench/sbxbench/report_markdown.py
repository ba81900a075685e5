"""`sbx-bench report`: results files -> one Markdown report (+ PNG plots).

Per results file: a table per workload (VMM, figure, median [CI], p5-p95,
n), the ratios to sbx-vmm with their CIs, the VMMs that were n/a or failed
and why, and the machine facts. A banner at the top says when any input
ran on nested, PVM or no hardware KVM: then only ratios mean anything.
"""

from __future__ import annotations

import datetime
from pathlib import Path

from .report_plots import render_plots
from .vmm_spec import BASELINE

REPORT_NAME = "report.md"


def _fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return "—"
    if unit == "ms":
        size = abs(value)
        return f"{value:.0f}" if size >= 1000 else f"{value:.1f}" if size >= 10 else f"{value:.2f}"
    return f"{value:.4g}"


def _ci(ci: list | None, unit: str) -> str:
    return "—" if not ci else f"[{_fmt(ci[0], unit)}, {_fmt(ci[1], unit)}]"


def _labels(doc: dict) -> dict[str, str]:
    return {v["name"]: v["label"] for v in doc["vmms"]}


def banner(docs: list[dict]) -> list[str]:
    kinds = sorted({d["machine"]["kvm"]["kind"] for d in docs} - {"hardware"})
    if not kinds:
        return []
    return ["> **⚠ NOT A HARDWARE-KVM RUN — ONLY RATIOS COUNT.** KVM kind: "
            f"{', '.join(kinds)}. Under the nested harness (QEMU TCG level 1) or PVM every "
            "time is 10–50x native and moved by other load; compare the ratio tables of one "
            "run, never absolute times, and never numbers across runs.", ""]


def statistics_table(doc: dict) -> list[str]:
    conf = doc["analysis"]["confidence"]
    labels = _labels(doc)
    lines = [f"| VMM | figure | median [{conf:.0%} CI] | p5–p95 | n |", "|---|---|---|---|---|"]
    for s in doc["statistics"]:
        unit = s["unit"]
        lines.append(f"| {labels.get(s['vmm'], s['vmm'])} | {s['figure']} ({unit}) | "
                     f"**{_fmt(s['median'], unit)}** {_ci(s['median_ci'], unit)} | "
                     f"{_fmt(s['p5'], unit)}–{_fmt(s['p95'], unit)} | {s['n']} |")
    return lines


def ratio_table(doc: dict) -> list[str]:
    if not doc["ratios"]:
        has_base = any(v["name"] == BASELINE and v["status"] == "ok" for v in doc["vmms"])
        return ["No ratios: " + ("only one VMM has data." if has_base
                                 else f"the baseline ({BASELINE}) has no data in this run."), ""]
    conf = doc["analysis"]["confidence"]
    labels = _labels(doc)
    base = labels.get(BASELINE, BASELINE)
    several = len({r["baseline"] for r in doc["ratios"]}) > 1
    if several:
        lines = [f"Ratio of medians, VMM / baseline (> 1: slower than the baseline for times, faster for "
                 f"MB/s and IOPS); {conf:.0%} CI by resampling both sides.", "",
                 f"| VMM | baseline | figure | ratio [{conf:.0%} CI] | n / n baseline |", "|---|---|---|---|---|"]
    else:
        lines = [f"Ratio of medians, VMM / {base} (> 1: slower than {base} for times, faster for MB/s and "
                 f"IOPS); {conf:.0%} CI by resampling both sides.", "",
                 f"| VMM | figure | ratio [{conf:.0%} CI] | n / n {base} |", "|---|---|---|---|"]
    for r in doc["ratios"]:
        value = "—" if r["ratio"] is None else f"**{r['ratio']:.2f}x**"
        interval = f"[{r['ci'][0]:.2f}x, {r['ci'][1]:.2f}x]" if r["ci"] else ""
        against = f" {labels.get(r['baseline'], r['baseline'])} |" if several else ""
        lines.append(f"| {labels.get(r['vmm'], r['vmm'])} |{against} {r['figure']} | {value} "
                     f"{interval} | {r['n']} / {r['n_baseline']} |")
    return lines + [""]


def unavailable_vmms(doc: dict) -> list[str]:
    bad = [v for v in doc["vmms"] if v["status"] != "ok"]
    if not bad:
        return []
    lines = ["| VMM | status | reason |", "|---|---|---|"]
    lines += [f"| {v['label']} | {v['status']} | {v['reason'] or ''} |" for v in bad]
    return lines + [""]


def notes_list(doc: dict) -> list[str]:
    """Each VMM's notes: how it was run, and where it deviates."""
    lines = [f"- {v['label']}: " + "; ".join(v["notes"])
             for v in doc["vmms"] if v["notes"] and v["status"] == "ok"]
    return lines + [""] if lines else []


def failed_runs(doc: dict) -> list[str]:
    failed = [r for r in doc["runs"] if not r["ok"] and not r["warmup"]]
    if not failed:
        return []
    return [f"Failed runs (not in the statistics): {len(failed)} — "
            + "; ".join(f"{r['vmm']} round {r['round']}: {r['error']}" for r in failed[:10]), ""]


def machine_table(doc: dict) -> list[str]:
    m = doc["machine"]
    cpu = m["cpu"]
    git = doc["run"]["git"]
    rows = [
        ("date", doc["run"]["date"]),
        ("CPU", f"{cpu['model']} ({cpu['logical_cpus']} logical CPUs"
                + (", hypervisor flag set" if cpu["hypervisor_flag"] else "") + ")"),
        ("memory", f"{m['memory_mib']} MiB"),
        ("host kernel", m["kernel_release"]),
        ("KVM", f"{m['kvm']['kind']} — {m['kvm']['detail']}"),
        ("git commit", f"{git['commit']}{' (uncommitted changes)' if git['dirty'] else ''}"),
        ("command line", "`" + " ".join(doc["run"]["command_line"]) + "`"),
    ]
    outer = doc.get("outer_machine")
    if outer:
        rows.append(("outer machine", f"{outer['cpu']['model']}, {outer['cpu']['logical_cpus']} CPUs, "
                                      f"{outer['memory_mib']} MiB, kernel {outer['kernel_release']}, "
                                      f"KVM {outer['kvm']['kind']}"))
    for name, f in doc["inputs"].items():
        if f:
            rows.append((name, f"`{f['path']}` ({f['size_bytes']} bytes, sha256 {f['sha256_prefix']}…)"))
    for v in doc["vmms"]:
        rows.append((f"{v['label']} version", v["version"] or "unknown"))
    return ["| fact | value |", "|---|---|"] + [f"| {k} | {str(val).replace('|', '/')} |" for k, val in rows]


def parameters_line(doc: dict) -> str:
    p = doc["parameters"]
    a = doc["analysis"]
    shown = ", ".join(f"{k} {v}" for k, v in p.items() if k not in ("runs", "warmup", "cmdline") and v is not None)
    text = (f"{p['runs']} runs after {p['warmup']} warm-up round(s), order rotated every round; {shown}. "
            f"Bootstrap: {a['bootstrap_resamples']} resamples, seed {a['seed']}; percentiles: "
            f"{a['percentile_definition']}.")
    if "cmdline" in p:
        text += f" Kernel command line: `{p['cmdline']}`."
    return text


def workload_section(doc: dict, source: str, out_dir: Path, stem: str) -> list[str]:
    lines = [f"## {doc['workload']} — {source}", "", parameters_line(doc), ""] + notes_list(doc)
    lines += statistics_table(doc) + [""]
    lines += unavailable_vmms(doc) + failed_runs(doc)
    lines += [f"### Ratios to {_labels(doc).get(BASELINE, BASELINE)}", ""] + ratio_table(doc)
    plots = render_plots(doc, out_dir, stem)
    if plots is None:
        lines += ["(No plots: python3-matplotlib is not installed.)", ""]
    for path, caption in plots or []:
        lines += [f"![{caption}]({path.name})", "", f"*{caption}*", ""]
    lines += ["### Machine", ""] + machine_table(doc) + [""]
    return lines


def render_report(docs: list[tuple[str, dict]], out_dir: Path) -> Path:
    """Writes report.md (and the PNGs) into out_dir; returns the Markdown path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    lines = ["# sbx-bench report", "",
             f"Generated {now} from {', '.join('`' + s + '`' for s, _ in docs)}.", ""]
    lines += banner([d for _, d in docs])
    for index, (source, doc) in enumerate(docs, start=1):
        lines += workload_section(doc, source, out_dir, f"{doc['workload']}-{index}")
    path = out_dir / REPORT_NAME
    path.write_text("\n".join(lines).rstrip() + "\n")
    return path
