"""Workload `blk`: virtio-blk throughput of a scratch disk, measured in the
guest (bench/virtio_runner.py's blk half).

One fully allocated raw scratch disk of DISK_MIB MiB in the work folder
(level 1's tmpfs /tmp in the harness) is made once and given to every VMM
as its only disk, /dev/vda. With qcow2 in --formats, each VMM also has a
path `NAME-qcow2`: every boot of it gets a fresh qcow2 overlay of that disk
(`qemu-img create -f qcow2 -b DISK -F raw`, 64 KiB clusters), so the
sequential write fills new clusters of the overlay, the read reads them
back, and the random reads hit the overlay's part and the base's. A qcow2
path's ratios are to sbx-qcow2 (`baseline` in its results entry), and
sbx-qcow2's to sbx: qcow2 / raw. Each boot the guest (bench/virtio_guest.sh, steps=blk) runs sbx-blkbench
(tests/guest/tools/sbx-blkbench.c): O_DIRECT, one request at a time.

QEMU's drive gets `cache=none` when the disk's file system takes O_DIRECT
and `cache=writeback` otherwise (tmpfs; --qemu-cache auto, as the
earlier runner): sbx-vmm and kvmtool do buffered I/O on their images, so
on tmpfs both sides go through the host's page cache.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Callable

from .guest_agent import vmrun
from .vmm_commands import BootConfig, NotApplicable
from .vmm_spec import VmmSpec
from .virtio_commands import Devices, device_command, disk_format_problem, not_applicable
from .workload_boot import Figure
from .workload_common import PathSpec, figure_dicts
from .workload_virtio import (Prepared, VirtioOptions, Workspace, boot, guest_cmdline, guest_problem,
                              output_tail, run_booted)

WORKLOAD = "blk"
FORMATS = ("raw", "qcow2")
QEMU_CACHES = ("auto", "none", "writeback")

FIGURES = [
    Figure("seq_write_mb_s", "MB/s", "sbx-blkbench seqwrite: BLK_MIB MiB in 1 MiB O_DIRECT writes, queue depth "
           "1, ending with fdatasync; 10^6 bytes per second, timed in the guest"),
    Figure("seq_read_mb_s", "MB/s", "sbx-blkbench seqread: the same MiB read back in 1 MiB O_DIRECT reads, "
           "queue depth 1; timed in the guest"),
    Figure("rand_read_iops", "IOPS", "sbx-blkbench randread: RAND_SECONDS of 4 KiB O_DIRECT reads at random "
           "aligned offsets, queue depth 1; timed in the guest"),
    Figure("rand_read_mb_s", "MB/s", "the same random 4 KiB reads in 10^6 bytes per second"),
]
# sbx-blkbench mode -> (figure of its MB/s, figure of its IOPS or None)
_MODES = {"seqwrite": ("seq_write_mb_s", None), "seqread": ("seq_read_mb_s", None),
          "randread": ("rand_read_mb_s", "rand_read_iops")}


def figure_list() -> list[dict]:
    return figure_dicts(FIGURES)


def qcow2_baseline(name: str) -> str:
    """The baseline of a qcow2 path's ratios (its `baseline` in the results):
    sbx-vmm's qcow2 path, whose own is sbx-vmm's raw one (qcow2 / raw)."""
    return "sbx" if name == "sbx-qcow2" else "sbx-qcow2"


def paths_of(spec: VmmSpec, formats: tuple[str, ...]) -> list[PathSpec]:
    """Per format a path: the raw one named as the VMM, the qcow2 one NAME-qcow2
    (the only one named as the VMM when raw is not measured)."""
    out = []
    for fmt in formats:
        name = spec.name if fmt == "raw" or "raw" not in formats else f"{spec.name}-qcow2"
        out.append(PathSpec(name, f"{spec.label}, {'raw disk' if fmt == 'raw' else 'qcow2 overlay'}", fmt))
    return out


def path_problem(spec: VmmSpec, path: PathSpec, qemu_img: str | None) -> str | None:
    problem = disk_format_problem(spec, path.mode)
    if problem is None and path.mode == "qcow2" and qemu_img is None:
        problem = "qemu-img (it makes the qcow2 overlays) is not on PATH"
    return problem


def blk_figures(blk: dict[str, tuple[float, float]]) -> dict[str, float]:
    """The figures of sbx-blkbench's lines {mode: (MB/s, IOPS)}; raises when one is missing."""
    missing = [mode for mode in _MODES if mode not in blk]
    if missing:
        raise RuntimeError(f"no sbx-blkbench result for {', '.join(missing)}")
    figs: dict[str, float] = {}
    for mode, (mb_s_id, iops_id) in _MODES.items():
        mb_s, iops = blk[mode]
        figs[mb_s_id] = mb_s
        if iops_id:
            figs[iops_id] = iops
    return figs


def make_disk(path: str, mib: int) -> None:
    """A fully allocated scratch image (no holes that read as zeros without touching memory)."""
    with open(path, "wb") as f:
        os.posix_fallocate(f.fileno(), 0, mib << 20)


def make_overlay(qemu_img: str, base: str, path: str) -> None:
    if os.path.exists(path):
        os.unlink(path)
    subprocess.run([qemu_img, "create", "-q", "-f", "qcow2", "-b", base, "-F", "raw", path], check=True,
                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)


def _summary(figs: dict[str, float]) -> str:
    return (f"seq write {figs['seq_write_mb_s']:.1f} MB/s, seq read {figs['seq_read_mb_s']:.1f} MB/s, "
            f"4K random read {figs['rand_read_iops']:.0f} IOPS")


class _Run:
    """One run of the workload: the scratch disk and each path's boot."""

    def __init__(self, opts: VirtioOptions, log: Callable[[str], None]):
        self.opts, self.log = opts, log
        self.qemu_img = shutil.which("qemu-img")
        self.disk = ""
        self.qemu_cache = opts.qemu_cache

    def setup(self, ws: Workspace) -> None:
        self.disk = ws.path("disk.img")
        make_disk(self.disk, self.opts.disk_mib)
        if self.qemu_cache == "auto":
            self.qemu_cache = "none" if vmrun.direct_io_works(self.disk) else "writeback"

    def prepare(self, spec: VmmSpec, path: PathSpec, cfg: BootConfig, ws: Workspace) -> Prepared | NotApplicable:
        disk = self.disk if path.mode == "raw" else ws.path(f"{path.name}.qcow2")
        command = device_command(spec, cfg, Devices(disk=disk, disk_format=path.mode, qemu_cache=self.qemu_cache))
        if isinstance(command, NotApplicable):
            return command
        if path.mode == "raw":
            notes = [f"/dev/vda: the raw scratch disk, {self.opts.disk_mib} MiB, fully allocated, the same file "
                     "for every VMM"]
        else:
            notes = ["/dev/vda: a fresh qcow2 overlay of the raw scratch disk every boot (qemu-img create -f "
                     "qcow2 -b DISK -F raw, 64 KiB clusters)"]
        ready = Prepared(command, lambda: {}, notes)
        ready.measure = lambda: self.measure(ready, disk if path.mode == "qcow2" else None)
        return ready

    def measure(self, ready: Prepared, overlay: str | None) -> dict[str, float]:
        try:
            if overlay:
                assert self.qemu_img is not None
                make_overlay(self.qemu_img, self.disk, overlay)
            run, report = boot(ready.command, self.opts.timeout_s)
            problem = guest_problem(run, report, self.opts.timeout_s)
            if problem is None:
                ready.saw(report)
                try:
                    return blk_figures(report.blk)
                except RuntimeError as e:
                    problem = str(e)
            self.log("  last output:\n" + output_tail(run))
            raise RuntimeError(problem)
        finally:
            if overlay and os.path.exists(overlay):
                os.unlink(overlay)


def run_blk(specs: list[VmmSpec], opts: VirtioOptions, *, unusable: Callable[[VmmSpec], str | None],
            log: Callable[[str], None]) -> dict:
    """Runs the workload; returns the `vmms` and `runs` parts of a result and
    the parameters only known once it ran (QEMU's cache mode)."""
    state = _Run(opts, log)
    cmdline = guest_cmdline(opts.cmdline, {"steps": "blk", "blk_mib": opts.blk_mib, "rand_s": opts.rand_seconds})
    measured = run_booted(
        WORKLOAD, specs, opts, cmdline, paths_of=lambda s: paths_of(s, opts.formats),
        unsupported=lambda s: not_applicable(s, kernel=opts.kernel, vsock=False),
        path_problem=lambda s, p: path_problem(s, p, state.qemu_img),
        prepare=state.prepare, setup=state.setup, summary=_summary, unusable=unusable, log=log)
    if "raw" in opts.formats:
        for e in measured["vmms"]:
            if e["name"].endswith("-qcow2"):
                e["baseline"] = qcow2_baseline(e["name"])
    return {**measured, "cmdline": cmdline, "qemu_cache": state.qemu_cache}
