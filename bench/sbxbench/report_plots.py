"""PNG plots of results files, with matplotlib's Agg backend (Debian's
python3-matplotlib). Only the report needs matplotlib; without it the report
is written without plots and says so.

Each workload has a list of plot functions in PLOTTERS; a plot function
takes (doc, out_dir, stem) and returns the PNG paths it wrote with a
caption each. Adding a plot for a new workload (restore latency per path,
exec latency distribution, density curve) is one function here plus its
entry in PLOTTERS; `bar_chart_with_ci` and `stacked_bars` are the shared
pieces.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from .vmm_spec import BASELINE


def matplotlib_pyplot():
    """pyplot on the Agg backend, or None when matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _stat(doc: dict, vmm: str, figure: str) -> dict | None:
    return next((s for s in doc["statistics"] if s["vmm"] == vmm and s["figure"] == figure), None)


def _ok_vmms(doc: dict) -> list[dict]:
    return [v for v in doc["vmms"] if v["status"] == "ok"]


def _title(doc: dict, text: str) -> str:
    kind = doc["machine"]["kvm"]["kind"]
    return text + ("" if kind == "hardware" else f"\n({kind} KVM: compare ratios only)")


def stacked_bars(plt, path: Path, *, labels: list[str], segments: list[tuple[str, list[float]]],
                 title: str, ylabel: str) -> None:
    """One bar per label, made of the named segments (values per label)."""
    fig, ax = plt.subplots(figsize=(max(6.5, 1.4 * len(labels) + 3.5), 4.8))
    bottoms = [0.0] * len(labels)
    for name, values in segments:
        ax.bar(labels, values, bottom=bottoms, label=name)
        bottoms = [b + v for b, v in zip(bottoms, values)]
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def bar_chart_with_ci(plt, path: Path, *, labels: list[str], medians: list[float],
                      intervals: list[tuple[float, float] | None], title: str, ylabel: str) -> None:
    """Medians as bars with their confidence intervals as error bars."""
    low = [m - (ci[0] if ci else m) for m, ci in zip(medians, intervals)]
    high = [(ci[1] if ci else m) - m for m, ci in zip(medians, intervals)]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(labels) + 2.5), 4.5))
    ax.bar(labels, medians, yerr=[low, high], capsize=6, color="tab:blue")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _breakdown_for(doc: dict, vmm: str) -> list[str] | None:
    for segments in doc.get("breakdowns", []):
        if all(_stat(doc, vmm, fid) for fid in segments):
            return segments
    return None


def plot_boot_breakdown(plt, doc: dict, out_dir: Path, stem: str) -> list[tuple[Path, str]]:
    """Stacked bars per VMM: the medians of the finest breakdown it reports
    (sbx-vmm: VM set-up, kernel to init, init to console, init to exit)."""
    labels, per_vmm = [], []
    for vmm in _ok_vmms(doc):
        segments = _breakdown_for(doc, vmm["name"])
        if segments:
            labels.append(vmm["label"])
            per_vmm.append({fid: _stat(doc, vmm["name"], fid)["median"] for fid in segments})
    if not labels:
        return []
    # Segments in time order: a breakdown's last segment (init_to_exit) goes on top of all.
    lasts = {list(d)[-1] for d in per_vmm}
    order = list(dict.fromkeys([fid for d in per_vmm for fid in d if fid not in lasts] + sorted(lasts)))
    segments = [(fid, [d.get(fid, 0.0) for d in per_vmm]) for fid in order]
    path = out_dir / f"{stem}-breakdown.png"
    stacked_bars(plt, path, labels=labels, segments=segments, ylabel="ms (median of each segment)",
                 title=_title(doc, "Boot: where the time goes, process start to exit"))
    return [(path, "Boot-time breakdown per VMM (medians of each segment; their sum need not "
                   "equal the median total)")]


def plot_figure_medians(figure: str) -> Callable:
    """A plot of one figure's median per VMM with its bootstrap CI."""
    def plot(plt, doc: dict, out_dir: Path, stem: str) -> list[tuple[Path, str]]:
        rows = [(v["label"], _stat(doc, v["name"], figure)) for v in _ok_vmms(doc)]
        rows = [(label, s) for label, s in rows if s]
        if not rows:
            return []
        path = out_dir / f"{stem}-{figure}.png"
        conf = doc["analysis"]["confidence"]
        bar_chart_with_ci(plt, path, labels=[label for label, _ in rows],
                          medians=[s["median"] for _, s in rows],
                          intervals=[tuple(s["median_ci"]) if s["median_ci"] else None for _, s in rows],
                          ylabel=rows[0][1]["unit"],
                          title=_title(doc, f"{figure}: median, {conf:.0%} bootstrap CI"))
        return [(path, f"{figure}: median per VMM with its {conf:.0%} CI (baseline {BASELINE})")]
    return plot


PLOTTERS: dict[str, list[Callable]] = {
    "boot": [plot_boot_breakdown, plot_figure_medians("start_to_init")],
    # "restore": [plot_restore_per_path], "exec": [plot_exec_distribution],
    # "density": [plot_density_curve]: one function each when those workloads exist.
}


def render_plots(doc: dict, out_dir: Path, stem: str) -> list[tuple[Path, str]] | None:
    """Writes the workload's PNGs; None when matplotlib is missing."""
    plt = matplotlib_pyplot()
    if plt is None:
        return None
    written: list[tuple[Path, str]] = []
    for plotter in PLOTTERS.get(doc["workload"], []):
        written += plotter(plt, doc, out_dir, stem)
    return written
