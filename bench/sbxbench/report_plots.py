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

import textwrap
from pathlib import Path
from typing import Callable

from .results import samples_by_vmm
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


def _wrapped(labels: list[str]) -> list[str]:
    """Long VMM labels ("sbx-vmm, compressed snapshot") on several lines."""
    return [textwrap.fill(label, 18) for label in labels]


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
    ax.bar(_wrapped(labels), medians, yerr=[low, high], capsize=6, color="tab:blue")
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


AGENT_SEGMENTS = ("init_to_agent", "start_to_agent")  # boot --agent's last segments


def plot_boot_breakdown(plt, doc: dict, out_dir: Path, stem: str) -> list[tuple[Path, str]]:
    """Stacked bars per VMM: the medians of the finest breakdown it reports
    (sbx-vmm: VM set-up, kernel to init, init to console, then init to
    exit, or with --agent init to the agent's first answer)."""
    labels, per_vmm = [], []
    for vmm in _ok_vmms(doc):
        segments = _breakdown_for(doc, vmm["name"])
        if segments:
            labels.append(vmm["label"])
            per_vmm.append({fid: _stat(doc, vmm["name"], fid)["median"] for fid in segments})
    if not labels:
        return []
    # Segments in time order: a breakdown's last segment (init_to_exit, init_to_agent) goes on top of all.
    lasts = {list(d)[-1] for d in per_vmm}
    order = list(dict.fromkeys([fid for d in per_vmm for fid in d if fid not in lasts] + sorted(lasts)))
    segments = [(fid, [d.get(fid, 0.0) for d in per_vmm]) for fid in order]
    path = out_dir / f"{stem}-breakdown.png"
    to_agent = bool(lasts & set(AGENT_SEGMENTS))
    stacked_bars(plt, path, labels=labels, segments=segments, ylabel="ms (median of each segment)",
                 title=_title(doc, "Boot: where the time goes, process start to "
                                   + ("the agent's first answer" if to_agent else "exit")))
    what = ", to the agent (init_to_agent: userspace to the agent)" if to_agent else ""
    return [(path, f"Boot-time breakdown per VMM{what} (medians of each segment; their sum need not "
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


def grouped_bars_with_ci(plt, path: Path, *, groups: list[str], series: list[tuple[str, list[dict | None]]],
                         title: str, ylabel: str, log_scale: bool = False) -> None:
    """Per group (x), one bar per series: a statistic's median with its CI
    (None: no bar). With `log_scale`, a log scale when the medians span over 20x."""
    fig, ax = plt.subplots(figsize=(max(6.5, 1.6 * len(groups) + 3.5), 4.8))
    _grouped_bars(ax, groups=groups, series=series, title=title, ylabel=ylabel, log_scale=log_scale)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def grouped_bar_panels(plt, path: Path, *, groups: list[str],
                       panels: list[tuple[str, str, list[tuple[str, list[dict | None]]]]], title: str) -> None:
    """Side by side, one panel per (panel title, y label, series) over the
    same groups: grouped_bars_with_ci's bars, for figures of different units."""
    widths = [max(4.0, len(groups) * max(1.3, 0.7 * len(series)) + 1.5) for _, _, series in panels]
    fig, axes = plt.subplots(1, len(panels), figsize=(sum(widths) + 1.0, 5.2), squeeze=False,
                             gridspec_kw={"width_ratios": widths})
    for ax, (name, ylabel, series) in zip(axes[0], panels):
        _grouped_bars(ax, groups=groups, series=series, title=name, ylabel=ylabel)
        ax.legend(fontsize=7, loc="lower left")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _grouped_bars(ax, *, groups: list[str], series: list[tuple[str, list[dict | None]]], title: str,
                  ylabel: str, log_scale: bool = False) -> None:
    width = 0.8 / max(1, len(series))
    values = [s["median"] for _, stats in series for s in stats if s and s["median"] > 0]
    for index, (name, stats) in enumerate(series):
        xs = [g + (index - (len(series) - 1) / 2) * width for g in range(len(groups))]
        shown = [(x, s) for x, s in zip(xs, stats) if s]
        if not shown:
            continue
        medians = [s["median"] for _, s in shown]
        low = [m - (s["median_ci"][0] if s["median_ci"] else m) for m, (_, s) in zip(medians, shown)]
        high = [(s["median_ci"][1] if s["median_ci"] else m) - m for m, (_, s) in zip(medians, shown)]
        ax.bar([x for x, _ in shown], medians, width=width, yerr=[low, high], capsize=4, label=name)
    if log_scale and values and max(values) / min(values) > 20:
        ax.set_yscale("log")
        ylabel += " (log scale)"
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(_wrapped(groups), fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)


def plot_grouped(figures: list[str], name: str, title: str, caption: str, log_scale: bool = False) -> Callable:
    """Per VMM (or path), the medians of several figures of one unit, with CIs."""
    def plot(plt, doc: dict, out_dir: Path, stem: str) -> list[tuple[Path, str]]:
        vmms = [v for v in _ok_vmms(doc) if any(_stat(doc, v["name"], f) for f in figures)]
        if not vmms:
            return []
        units = {f["id"]: f["unit"] for f in doc["figures"]}
        series = [(fid, [_stat(doc, v["name"], fid) for v in vmms]) for fid in figures]
        path = out_dir / f"{stem}-{name}.png"
        conf = doc["analysis"]["confidence"]
        grouped_bars_with_ci(plt, path, groups=[v["label"] for v in vmms], series=series,
                             ylabel=f"{units.get(figures[0], 'ms')}, median", log_scale=log_scale,
                             title=_title(doc, f"{title} (bars: median, {conf:.0%} bootstrap CI)"))
        return [(path, caption)]
    return plot


def per_k_series(doc: dict, vmm: str, prefix: str) -> list[tuple[int, dict]]:
    """(k, statistic) of the figures PREFIX1, PREFIX2, ... up to the first
    missing one (fork's answer_k, density's pss_total_k)."""
    points = []
    while (s := _stat(doc, vmm, f"{prefix}{len(points) + 1}")) is not None:
        points.append((len(points) + 1, s))
    return points


def _errorbar_line(ax, points: list[tuple[int, dict]], **style) -> None:
    """Medians against k, their CIs as error bars."""
    medians = [s["median"] for _, s in points]
    low = [s["median"] - (s["median_ci"][0] if s["median_ci"] else s["median"]) for _, s in points]
    high = [(s["median_ci"][1] if s["median_ci"] else s["median"]) - s["median"] for _, s in points]
    ax.errorbar([k for k, _ in points], medians, yerr=[low, high], capsize=4, **style)


def plot_fork_answers(plt, doc: dict, out_dir: Path, stem: str) -> list[tuple[Path, str]]:
    """Fork: median time to the k-th child's first answer against k, per VMM."""
    lines = [(v["label"], points) for v in _ok_vmms(doc) if (points := per_k_series(doc, v["name"], "answer_"))]
    if not lines:
        return []
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for label, points in lines:
        _errorbar_line(ax, points, marker="o", label=label)
    ax.set_xlabel("k: the k-th child to answer")
    ax.set_xticks(sorted({k for _, points in lines for k, _ in points}))
    ax.set_ylabel("ms from the first process start, median")
    ax.set_ylim(bottom=0)
    ax.set_title(_title(doc, f"Fork of {doc['parameters'].get('forks', '?')}: time to the k-th answering child"),
                 fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = out_dir / f"{stem}-answers.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return [(path, "Fork: median time from the first child's start to the k-th child's first agent "
                   "answer, with bootstrap CIs (the last point: all answered)")]


def density_curves(doc: dict) -> list[tuple[str, list[tuple[int, dict]], list[tuple[int, dict]]]]:
    """Density: per VMM with data, its label and the (k, statistic) series of
    pss_total_k and rss_total_k."""
    curves = []
    for vmm in _ok_vmms(doc):
        pss, rss = per_k_series(doc, vmm["name"], "pss_total_"), per_k_series(doc, vmm["name"], "rss_total_")
        if pss:
            curves.append((vmm["label"], pss, rss))
    return curves


def plot_density_curve(plt, doc: dict, out_dir: Path, stem: str) -> list[tuple[Path, str]]:
    """Density: the sums of Pss (solid) and Rss (dashed) against the number
    of sandboxes running, a colour per VMM, and the budget."""
    curves = density_curves(doc)
    if not curves:
        return []
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for index, (label, pss, rss) in enumerate(curves):
        colour = f"C{index % 10}"
        _errorbar_line(ax, pss, marker="o", color=colour, label=f"{label}: Pss")
        if rss:
            _errorbar_line(ax, rss, marker="s", linestyle="--", color=colour, alpha=0.7, label=f"{label}: Rss")
    budget = doc["parameters"].get("budget_mib")
    if budget:
        ax.axhline(budget, color="grey", linestyle=":", label=f"budget {budget} MiB (sum of Pss)")
    ks = sorted({k for _, pss, rss in curves for k, _ in pss + rss})
    ax.set_xticks(ks if len(ks) <= 20 else ks[::max(1, len(ks) // 10)])
    ax.set_xlabel("sandboxes running (children of one saved guest)")
    ax.set_ylabel("MiB, sum over the VMM processes, median")
    ax.set_ylim(bottom=0)
    ax.set_title(_title(doc, "Density: memory of k idle sandboxes from one warm template"), fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    path = out_dir / f"{stem}-curve.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return [(path, "Density curve: the sums of Pss (solid) and Rss (dashed) of the VMM processes "
                   "(/proc/PID/smaps_rollup) with k sandboxes running, per VMM, medians over the rounds that "
                   "reached k with bootstrap CIs; the dotted line is the budget on the sum of Pss")]


def ecdf_panels(plt, path: Path, *, panels: list[tuple[str, list[tuple[str, list[float]]]]], title: str,
                xlabel: str) -> None:
    """Side by side, one panel per (name, [(label, samples)]): each sample's
    empirical distribution function (fraction of samples <= x), log x when
    a panel's samples span over 20x."""
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels) + 1.5, 4.5), sharey=True, squeeze=False)
    for ax, (name, lines) in zip(axes[0], panels):
        values = [v for _, samples in lines for v in samples if v > 0]
        for label, samples in lines:
            xs = sorted(samples)
            ax.step(xs, [(i + 1) / len(xs) for i in range(len(xs))], where="post", label=label)
        if values and max(values) / min(values) > 20:
            ax.set_xscale("log")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel(xlabel)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    axes[0][0].set_ylabel("fraction of samples <= x")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_exec_distribution(plt, doc: dict, out_dir: Path, stem: str) -> list[tuple[Path, str]]:
    """Exec: the distribution of every exec's round trip per VMM, fresh
    connection and reused connection side by side."""
    samples = samples_by_vmm(doc["runs"])
    panels = []
    for figure, name in (("fresh_round_trip", "fresh connection: connect + hello + exec"),
                         ("reused_round_trip", "one reused connection: exec")):
        lines = []
        for vmm in _ok_vmms(doc):
            values = samples.get(vmm["name"], {}).get(figure)
            s = _stat(doc, vmm["name"], figure)
            if values and s:
                lines.append((f"{vmm['label']} (median {s['median']:.2f} ms, n {len(values)})", values))
        if lines:
            panels.append((name, lines))
    if not panels:
        return []
    path = out_dir / f"{stem}-latency.png"
    ecdf_panels(plt, path, panels=panels, xlabel="ms", title=_title(doc, "Exec of `true` through sbx-agent: "
                                                                    "round trip of every exec"))
    return [(path, "Exec latency distribution per VMM: the empirical CDF of every exec's round trip "
                   "(fresh_round_trip, reused_round_trip) over the measured rounds")]


def plot_unit_panels(panels: list[tuple[str, list[str]]], name: str, title: str, caption: str) -> Callable:
    """Per VMM (or path), the medians of several figures with CIs, a panel
    per (panel title, figures of one unit): e.g. blk's MB/s beside its IOPS."""
    def plot(plt, doc: dict, out_dir: Path, stem: str) -> list[tuple[Path, str]]:
        wanted = [fid for _, figures in panels for fid in figures]
        vmms = [v for v in _ok_vmms(doc) if any(_stat(doc, v["name"], f) for f in wanted)]
        if not vmms:
            return []
        units = {f["id"]: f["unit"] for f in doc["figures"]}
        shown = [(panel, f"{units.get(figures[0], '')}, median",
                  [(fid, [_stat(doc, v["name"], fid) for v in vmms]) for fid in figures])
                 for panel, figures in panels]
        path = out_dir / f"{stem}-{name}.png"
        conf = doc["analysis"]["confidence"]
        grouped_bar_panels(plt, path, groups=[v["label"] for v in vmms], panels=shown,
                           title=_title(doc, f"{title} (bars: median, {conf:.0%} bootstrap CI)"))
        return [(path, caption)]
    return plot


PLOTTERS: dict[str, list[Callable]] = {
    "boot": [plot_boot_breakdown, plot_figure_medians("start_to_init"), plot_figure_medians("start_to_agent")],
    "restore": [plot_grouped(["to_first_instruction", "to_agent", "to_fully_loaded"], "paths",
                             "Restore latency per path, from the process start",
                             "Restore latency per path: to the first instruction, the first agent answer "
                             "and all memory loaded (no bar: not reported, e.g. a private restore loads on touch)",
                             log_scale=True)],
    "snapshot": [plot_figure_medians("save_ms"), plot_figure_medians("file_mib")],
    "fork": [plot_fork_answers,
             plot_grouped(["rss_mib", "pss_mib", "rss_touched_mib", "pss_touched_mib"], "memory",
                          "Memory of the fork's VMM processes (sums)",
                          "Fork: sums of the children's Rss and Pss (smaps_rollup), when all answered and after "
                          "each read its data; Pss well under Rss is shared memory")],
    "exec": [plot_exec_distribution,
             plot_grouped(["fresh_connect", "fresh_hello", "fresh_exec", "reused_round_trip"], "parts",
                          "Exec: a fresh round trip's parts, a reused one",
                          "Exec: medians of a fresh connection's connect, hello and exec, beside an exec "
                          "on a reused connection", log_scale=True)],
    "blk": [plot_unit_panels([("sequential, 1 MiB requests", ["seq_write_mb_s", "seq_read_mb_s"]),
                              ("random 4 KiB reads", ["rand_read_iops"])], "throughput",
                             "virtio-blk in the guest: O_DIRECT, queue depth 1",
                             "virtio-blk per VMM and disk format: sequential write and read MB/s (10^6 bytes/s) "
                             "and 4 KiB random-read IOPS, timed in the guest; whiskers: the median's CI")],
    "vsock": [plot_grouped(["guest_to_host_mb_s", "host_to_guest_mb_s"], "throughput",
                           "virtio-vsock each way",
                           "virtio-vsock per VMM: guest -> host and host -> guest MB/s (10^6 bytes/s), "
                           "timed on the host; whiskers: the median's CI")],
    "density": [plot_density_curve,
                plot_grouped(["first_pss_mib", "marginal_pss_mib", "pss_per_sandbox_mib", "rss_per_sandbox_mib"],
                             "per-sandbox", "Density: memory per sandbox",
                             "Density: the first child's Pss alone, the mean Pss each later child added, and Pss "
                             "and Rss per sandbox with `fit` running"),
                plot_figure_medians("fit")],
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
