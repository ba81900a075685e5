"""Command lines of the snapshot workloads (restore, snapshot, fork), and
which VMMs have none.

The guest is the one bench/snapshot_runner.py ran: the minimal image
(busybox + sbx-agent) with a vsock device, the agent's token on the kernel
command line, FILL_MIB + 512 MiB of memory. The origin's command lines come
from tests/guest/vmrun.py's Machine (as snapshot_runner.py's did), so the
QEMU machine is the one of the guest tests: `-M microvm` without ACPI,
`vhost-vsock-device`, modern virtio-mmio.

- sbx-vmm (docs/vmm-control.md): the origin with `--control` and
  `--snapshot-dir`, saved with the control socket's `snapshot` op;
  restored by a new process, `--restore FILE --restore-mode
  eager|lazy|private` with the host side of its vsock (`--vsock cid=N,uds=PATH`).
- QEMU: the origin with `-qmp unix:PATH`; saved with QMP `migrate` to a
  file, restored by a new QEMU with `-incoming defer` (qmp.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from .guest_agent import token_cmdline, vmrun
from .vmm_spec import VmmSpec

# snapshot_runner.py's BASE_CMDLINE (sbx-bench boot's default has `nomodule` too).
SNAPSHOT_CMDLINE = ("console=ttyS0 reboot=k panic=1 i8042.noaux i8042.nomux i8042.nopnp "
                    "i8042.dumbkbd quiet")
GUEST_CID = vmrun.GUEST_CID  # the origin's and a single restore's vsock CID (3)
FORK_CID_BASE = 10           # fork child i (1..N) gets CID 10 + i, as tests/guest/fork_session.sh
EXTRA_MIB = 512              # guest memory beyond FILL_MIB (snapshot_runner.py)

# Why a VMM kind has no snapshot workloads here (kept in the results' reason and notes).
UNSUPPORTED = {
    "kvmtool": "kvmtool (lkvm) has no snapshot or restore",
    "firecracker": "Firecracker snapshots and restores only through its HTTP API socket "
                   "(PUT /snapshot/create, PUT /snapshot/load); sbx-bench runs it with --no-api, "
                   "so these workloads are not wired up for it",
    "cloud-hypervisor": "Cloud Hypervisor snapshots only through its HTTP API socket "
                        "(ch-remote snapshot) into a directory that --restore source_url= reads; "
                        "not wired up in sbx-bench",
}


@dataclass(frozen=True)
class Guest:
    """What every VMM runs. `token` is the agent's (sbx.token= on the
    command line; a restored guest keeps it); `workdir` holds sockets,
    logs and snapshot files (a local file system: Unix sockets)."""
    kernel: str
    image: str
    cpus: int
    memory_mib: int
    cmdline: str
    token: str
    workdir: str

    @property
    def full_cmdline(self) -> str:
        return token_cmdline(self.cmdline, self.token)

    def path(self, name: str) -> str:
        return f"{self.workdir}/{name}"


def not_applicable(spec: VmmSpec) -> str | None:
    """Why `spec` cannot run the snapshot workloads, or None."""
    if spec.generic:
        return "--test-generic-sbx is for the boot workload only"
    return UNSUPPORTED.get(spec.kind)


def sbx_origin_argv(spec: VmmSpec, guest: Guest, *, vsock_uds: str, control: str, console: str) -> list[str]:
    """The guest booted by sbx-vmm, with the control socket that saves it."""
    machine = vmrun.Machine("sbx", guest.kernel, guest.image, sbx_vmm=spec.path, cpus=guest.cpus,
                            vsock=True, memory=guest.memory_mib, cmdline=guest.full_cmdline)
    machine.vsock_uds = vsock_uds
    return machine.argv() + ["--control", control, "--snapshot-dir", guest.workdir,
                             "--console", f"file:{console}", *spec.extra_args]


def sbx_restore_argv(spec: VmmSpec, snapshot: str, mode: str, *, cid: int, vsock_uds: str,
                     console: str, control: str) -> list[str]:
    """A restore (docs/vmm-control.md, "Restore"): vCPUs and memory come from
    the file; the vsock device, saved in it, needs its host side."""
    if mode not in ("eager", "lazy", "private"):
        raise ValueError(f"restore mode {mode!r}")
    return [spec.path, "--restore", snapshot, "--restore-mode", mode,
            "--vsock", f"cid={cid},uds={vsock_uds}", "--console", f"file:{console}",
            "--control", control, *spec.extra_args]


def qemu_argv(spec: VmmSpec, guest: Guest, *, console: str, qmp: str, cid: int = GUEST_CID,
              incoming: bool = False) -> list[str]:
    """QEMU -M microvm with the same guest; `incoming`: waits for
    `migrate-incoming` (-incoming defer). The machine, memory and devices
    must be the origin's; the vsock CID may differ (QEMU's vhost-vsock
    sends the guest a transport reset after a load, and the guest re-reads
    its CID)."""
    machine = vmrun.Machine("qemu", guest.kernel, guest.image, qemu=spec.path, cpus=guest.cpus,
                            vsock=True, memory=guest.memory_mib, cmdline=guest.full_cmdline)
    argv = machine.argv()
    argv[argv.index("-serial") + 1] = f"file:{console}"
    vsock = f"vhost-vsock-device,guest-cid={vmrun.GUEST_CID}"
    argv[argv.index(vsock)] = f"vhost-vsock-device,guest-cid={cid}"
    argv += ["-qmp", f"unix:{qmp},server=on,wait=off", *spec.extra_args]
    if incoming:
        argv += ["-incoming", "defer"]
    return argv


QEMU_NOTES = [
    "saved with QMP stop + migrate to exec:cat > FILE (max-bandwidth lifted), polled with query-migrate",
    "restored with -incoming defer + migrate-incoming exec:cat FILE, then cont (the state arrives paused)",
    "the guest's machine is tests/guest/vmrun.py's: -M microvm, vhost-vsock-device, modern virtio-mmio",
]
