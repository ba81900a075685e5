"""Results files: assembling, statistics, JSON and CSV.

The JSON layout is results.schema.json (next to this file) and
docs/benchmarks.md, "sbx-bench: results format". Raw samples are kept
(`runs`), so `statistics` and `ratios` can always be recomputed from them
(`recompute_statistics`) with other bootstrap settings.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from . import stats
from .vmm_spec import BASELINE

SCHEMA_VERSION = 1
SCHEMA_PATH = Path(__file__).with_name("results.schema.json")


def samples_by_vmm(runs: list[dict]) -> dict[str, dict[str, list[float]]]:
    """{vmm: {figure: [values of the successful, non-warm-up runs, in run order]}}."""
    out: dict[str, dict[str, list[float]]] = {}
    for run in runs:
        if run["warmup"] or not run["ok"]:
            continue
        per_vmm = out.setdefault(run["vmm"], {})
        for fid, value in run["figures"].items():
            per_vmm.setdefault(fid, []).append(value)
    return out


def _figure_order(figures: list[dict], samples: dict[str, dict[str, list[float]]]) -> list[str]:
    order = [f["id"] for f in figures]
    for per_vmm in samples.values():
        order += sorted(fid for fid in per_vmm if fid not in order)
    return list(dict.fromkeys(order))


def own_baselines(doc: dict) -> dict[str, str]:
    """{VMM name: the baseline of its main ratio}: its entry's `baseline`
    (blk's qcow2 paths: sbx-qcow2, whose own is sbx), else the analysis's (sbx)."""
    return {v["name"]: v.get("baseline") or doc["analysis"]["baseline"] for v in doc["vmms"]}


def compute_statistics(doc: dict) -> tuple[list[dict], list[dict]]:
    """The `statistics` and `ratios` arrays of a result from its runs and
    `analysis` settings (resamples, confidence, seed). Ratios: every VMM to
    its baseline (own_baselines: sbx unless its entry names another), and
    every VMM of another kind to each of `extra_baselines` (other sbx-vmm
    paths: restore's sbx-lazy, ...)."""
    analysis = doc["analysis"]
    kw = {"resamples": analysis["bootstrap_resamples"], "confidence": analysis["confidence"],
          "seed": analysis["seed"]}
    samples = samples_by_vmm(doc["runs"])
    units = {f["id"]: f["unit"] for f in doc["figures"]}
    order = _figure_order(doc["figures"], samples)
    rows: list[dict] = []
    ratios: list[dict] = []
    names = [v["name"] for v in doc["vmms"]]
    for name in names:
        for fid in order:
            values = samples.get(name, {}).get(fid)
            if not values:
                continue
            summary = stats.summarize(values, label=f"median:{name}:{fid}", **kw)
            rows.append({"vmm": name, "figure": fid, "unit": units.get(fid, "ms"), **summary.as_dict()})
    kinds = {v["name"]: v["kind"] for v in doc["vmms"]}
    own = own_baselines(doc)
    pairs = [(name, own[name]) for name in names if name != own[name]]
    pairs += [(name, base_name) for base_name in analysis.get("extra_baselines", []) for name in names
              if name != base_name and kinds.get(name) != kinds.get(base_name)]
    for name, base_name in pairs:
        baseline = samples.get(base_name, {})
        for fid in order:
            mine, base = samples.get(name, {}).get(fid), baseline.get(fid)
            if not mine or not base:
                continue
            # The main baseline keeps the labels (and so the draws) of files made before extra baselines.
            label = f"ratio:{name}:{fid}" if base_name == BASELINE else f"ratio:{name}/{base_name}:{fid}"
            r = stats.ratio_of_medians(mine, base, label=label, **kw)
            ratios.append({"vmm": name, "baseline": base_name, "figure": fid, **r.as_dict()})
    return rows, ratios


def recompute_statistics(doc: dict) -> dict:
    doc["statistics"], doc["ratios"] = compute_statistics(doc)
    return doc


def new_result(*, workload: str, parameters: dict, figures: list[dict], breakdowns: list[list[str]],
               vmms: list[dict], runs: list[dict], machine: dict, run_facts: dict,
               inputs: dict, resamples: int, confidence: float, seed: int,
               outer_machine: dict | None = None, extra_baselines: list[str] | None = None) -> dict:
    doc = {
        "schema_version": SCHEMA_VERSION,
        "tool": "sbx-bench",
        "workload": workload,
        "parameters": parameters,
        "inputs": inputs,
        "machine": machine,
        "outer_machine": outer_machine,
        "run": run_facts,
        "analysis": {
            "percentile_definition": "Hyndman & Fan (1996) type 7 (linear interpolation; numpy 'linear')",
            "ci_method": "percentile bootstrap of the median (Efron & Tibshirani 1993); "
                         "ratios: both sides resampled independently",
            "bootstrap_resamples": resamples,
            "confidence": confidence,
            "seed": seed,
            "baseline": BASELINE,
        },
        "figures": figures,
        "breakdowns": breakdowns,
        "vmms": vmms,
        "runs": runs,
        "statistics": [],
        "ratios": [],
    }
    if extra_baselines:
        doc["analysis"]["extra_baselines"] = list(extra_baselines)
    return recompute_statistics(doc)


def write_json(doc: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    tmp.replace(path)


def load_json(path: Path) -> dict:
    return json.loads(Path(path).read_text())


CSV_COLUMNS = ["workload", "vmm", "vmm_label", "status", "reason", "figure", "unit", "n",
               "median", "median_ci_low", "median_ci_high", "p5", "p95", "min", "max", "mean",
               "ratio_to_baseline", "ratio_ci_low", "ratio_ci_high"]


def _num(value) -> str:
    if value is None:
        return ""
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def csv_rows(doc: dict) -> list[dict]:
    """One row per VMM x figure. A VMM that is n/a or failed gets one row per
    figure too, with its status and reason and no numbers: never dropped.
    The ratio columns are to the VMM's own baseline only (own_baselines:
    sbx, or its entry's `baseline`)."""
    stats_by = {(s["vmm"], s["figure"]): s for s in doc["statistics"]}
    own = own_baselines(doc)
    ratio_by = {(r["vmm"], r["figure"]): r for r in doc["ratios"] if r["baseline"] == own.get(r["vmm"])}
    figure_ids = list(dict.fromkeys([f["id"] for f in doc["figures"]] + [s["figure"] for s in doc["statistics"]]))
    units = {f["id"]: f["unit"] for f in doc["figures"]}
    rows = []
    for vmm in doc["vmms"]:
        for fid in figure_ids:
            s = stats_by.get((vmm["name"], fid))
            if s is None and vmm["status"] == "ok":
                continue  # this VMM does not report this figure (e.g. QEMU's boot timer)
            r = ratio_by.get((vmm["name"], fid), {})
            ci = (s or {}).get("median_ci") or [None, None]
            rci = r.get("ci") or [None, None]
            row = {"workload": doc["workload"], "vmm": vmm["name"], "vmm_label": vmm["label"],
                   "status": vmm["status"], "reason": vmm["reason"] or "", "figure": fid,
                   "unit": units.get(fid, (s or {}).get("unit", "ms")), "n": (s or {}).get("n", 0)}
            for key in ("median", "p5", "p95", "min", "max", "mean"):
                row[key] = (s or {}).get(key)
            row.update(median_ci_low=ci[0], median_ci_high=ci[1], ratio_to_baseline=r.get("ratio"),
                       ratio_ci_low=rci[0], ratio_ci_high=rci[1])
            rows.append({k: _num(v) if not isinstance(v, str) else v for k, v in row.items()})
    return rows


def csv_text(doc: dict) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(csv_rows(doc))
    return out.getvalue()


def write_csv(doc: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(csv_text(doc))
