"""Workload `vsock`: virtio-vsock throughput between the host and the guest,
each way (bench/virtio_runner.py's vsock half).

Every VMM's guest has one vsock device (CID 3) and nothing else. Each boot
the guest (bench/virtio_guest.sh, steps=vsock) sends VSOCK_MIB MiB of zeros
to the host's port 5002 (`sbx-vsock -s zero:N connect 2 5002`), then
listens on 1236 and reads until the host closes (`sbx-vsock -s none -o null
-k listen 1236`). The host times both ends (workload_virtio.VsockTransfers):
guest -> host from its accept to the last byte, host -> guest from its
connection until the guest has read everything and closed. sbx-vmm (and
Firecracker) are reached through the hybrid vsock Unix socket, QEMU (and
kvmtool) through vhost-vsock with AF_VSOCK: what a user of either gets.
"""

from __future__ import annotations

from typing import Callable

from .vmm_commands import BootConfig, NotApplicable
from .vmm_spec import VmmSpec
from .virtio_commands import GUEST_CID, Devices, device_command, hybrid_vsock, not_applicable
from .workload_boot import Figure
from .workload_common import PathSpec, figure_dicts
from .workload_virtio import (G2H_PORT, H2G_PORT, Prepared, VirtioOptions, VsockTransfers, Workspace, boot,
                              guest_cmdline, guest_problem, output_tail, run_booted)

WORKLOAD = "vsock"

FIGURES = [
    Figure("guest_to_host_mb_s", "MB/s", "VSOCK_MIB MiB from the guest (sbx-vsock connect 2 5002) to the host's "
           "listener: 10^6 bytes per second from the host's accept to the last byte"),
    Figure("host_to_guest_mb_s", "MB/s", "VSOCK_MIB MiB from the host to the guest's listener (port 1236): "
           "10^6 bytes per second from the host's connection until the guest has read it all and closed"),
]


def figure_list() -> list[dict]:
    return figure_dicts(FIGURES)


def paths_of(spec: VmmSpec) -> list[PathSpec]:
    how = "hybrid vsock" if hybrid_vsock(spec.kind) else "vhost-vsock"
    return [PathSpec(spec.name, f"{spec.label}, {how}", how)]


def _summary(figs: dict[str, float]) -> str:
    return (f"guest->host {figs['guest_to_host_mb_s']:.1f} MB/s, "
            f"host->guest {figs['host_to_guest_mb_s']:.1f} MB/s")


def vsock_figures(transfers: VsockTransfers) -> dict[str, float]:
    """Both directions' MB/s; raises when a transfer failed or is missing."""
    if transfers.errors:
        raise RuntimeError("; ".join(transfers.errors))
    figs = transfers.mb_per_s()
    missing = [f.id for f in FIGURES if f.id not in figs]
    if missing:
        raise RuntimeError(f"no {' or '.join(missing)}: the transfer did not happen")
    return figs


def run_vsock(specs: list[VmmSpec], opts: VirtioOptions, *, unusable: Callable[[VmmSpec], str | None],
              log: Callable[[str], None]) -> dict:
    """Runs the workload; returns the `vmms` and `runs` parts of a result."""
    nbytes = opts.vsock_mib << 20
    cmdline = guest_cmdline(opts.cmdline, {"steps": "vsock", "vsock_bytes": nbytes})

    def measure(ready: Prepared, uds: str | None) -> dict[str, float]:
        transfers = VsockTransfers(nbytes, uds=uds, cid=GUEST_CID, timeout=opts.timeout_s)
        transfers.listen()
        try:
            run, report = boot(ready.command, opts.timeout_s, on_marker=transfers.on_marker)
        finally:
            transfers.finish()
        problem = guest_problem(run, report, opts.timeout_s)
        if problem is None:
            ready.saw(report)
            try:
                return vsock_figures(transfers)
            except RuntimeError as e:
                problem = str(e)
        elif transfers.errors:
            problem += "; host side: " + "; ".join(transfers.errors)
        log("  last output:\n" + output_tail(run))
        raise RuntimeError(problem)

    def prepare(spec: VmmSpec, path: PathSpec, cfg: BootConfig, ws: Workspace) -> Prepared | NotApplicable:
        uds = ws.path(f"{path.name}.vsock") if hybrid_vsock(spec.kind) else None
        command = device_command(spec, cfg, Devices(vsock=True, vsock_uds=uds))
        if isinstance(command, NotApplicable):
            return command
        how = (f"the host on the hybrid vsock Unix socket (CONNECT {H2G_PORT}; the guest's connections to "
               f"port {G2H_PORT} arrive at SOCKET_{G2H_PORT})" if uds
               else f"the host with AF_VSOCK (the guest's CID {GUEST_CID}, vhost-vsock)")
        ready = Prepared(command, lambda: {}, [f"{opts.vsock_mib} MiB each way; {how}"])
        ready.measure = lambda: measure(ready, uds)
        return ready

    measured = run_booted(
        WORKLOAD, specs, opts, cmdline, paths_of=paths_of,
        unsupported=lambda s: not_applicable(s, kernel=opts.kernel, vsock=True),
        path_problem=None, prepare=prepare, setup=None, summary=_summary, unusable=unusable, log=log)
    return {**measured, "cmdline": cmdline}
