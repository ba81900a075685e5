"""Command lines of the blk and vsock workloads, and which VMMs cannot run
them and why.

Each VMM boots the boot workload's command (vmm_commands.boot_command:
the same kernel, initramfs, vCPUs, memory and command line) with one
device added, as bench/virtio_runner.py added them (tests/guest/vmrun.py's
flags for sbx-vmm and QEMU):

- sbx-vmm (README.md): `--disk PATH` (`,backing=on` for a qcow2 overlay:
  it opens a backing file only when told to), `--vsock cid=3,uds=PATH`
  (Firecracker's hybrid convention on a Unix socket).
- QEMU: `-global virtio-mmio.force-legacy=false` (its virtio-mmio is the
  legacy 0.9.5 interface by default, sbx-vmm's is virtio 1.x), `-drive
  file=PATH,format=raw|qcow2,if=none,id=d0,cache=C,aio=io_uring -device
  virtio-blk-device,drive=d0`, `-device vhost-vsock-device,guest-cid=3`.
- kvmtool (its builtin-run.c): `-d PATH` (virtio-blk; buffered I/O unless
  `,direct`, as sbx-vmm's), `--vsock 3` (vhost-vsock). On x86 its virtio
  devices are virtio-pci only (`--virtio-transport pci|pci-legacy`; mmio
  on arm and riscv), so the guest kernel needs CONFIG_VIRTIO_PCI, which
  ours (images/kernel/config.fragment) does not set; its qcow2 code
  (disk/qcow.c) reads no backing file. It loads a bzImage, not an ELF.
- Firecracker: its config file's "drives" (raw images only) and "vsock"
  (`guest_cid`, `uds_path`: the hybrid convention, as sbx-vmm's), per its
  docs (docs/api_requests/block-*.md, docs/vsock.md); not run here yet.
- Cloud Hypervisor: not wired up (below).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

from .vmm_commands import BootCommand, BootConfig, NotApplicable, boot_command, is_elf
from .vmm_spec import VmmSpec

GUEST_CID = 3          # the guest's vsock CID (vmrun.GUEST_CID)
QEMU_AIO = "io_uring"  # bench/virtio_runner.py's --qemu-aio
QEMU_MODERN_VIRTIO = ["-global", "virtio-mmio.force-legacy=false"]
VHOST_VSOCK = "/dev/vhost-vsock"

CLOUD_HYPERVISOR = ("not wired up for blk and vsock: Cloud Hypervisor's virtio devices are virtio-pci on x86 "
                    "(our guest kernel has no CONFIG_VIRTIO_PCI) and it restarts the VM at the guest's reboot")
KVMTOOL_QCOW2 = ("kvmtool's qcow2 support (disk/qcow.c) reads no backing file: the overlay's unwritten "
                 "clusters would not come from the raw disk")
FIRECRACKER_QCOW2 = "Firecracker's virtio-blk takes raw images only"


@dataclass(frozen=True)
class Devices:
    """The device a boot gets: a scratch disk (`disk`, raw or qcow2) or a
    vsock device (`vsock_uds`: the hybrid socket of sbx-vmm and
    Firecracker; QEMU and kvmtool use vhost-vsock and CID `cid`)."""
    disk: str | None = None
    disk_format: str = "raw"
    vsock: bool = False
    vsock_uds: str | None = None
    qemu_cache: str = "writeback"
    cid: int = GUEST_CID


def hybrid_vsock(kind: str) -> bool:
    """True when the host reaches the guest's vsock on a Unix socket
    (sbx-vmm, Firecracker); else AF_VSOCK through vhost-vsock."""
    return kind in ("sbx", "firecracker")


def vhost_vsock_problem(spec: VmmSpec, vhost_vsock: str = VHOST_VSOCK) -> str | None:
    """Why `spec` can have no vsock device on this host, or None: QEMU's and
    kvmtool's are vhost-vsock, which needs `vhost_vsock` (sbx-vmm and
    Firecracker serve the hybrid Unix socket themselves)."""
    if spec.kind in ("qemu", "kvmtool") and not os.path.exists(vhost_vsock):
        return f"no {vhost_vsock} on this host (modprobe vhost_vsock): {spec.label}'s vsock is vhost-vsock"
    return None


def kernel_config(kernel: str) -> tuple[str, str] | None:
    """(path, text) of the guest kernel's .config, looked for beside it
    (images/build keeps `config` in the kernel's cache folder; a kernel
    tree has `.config` next to vmlinux), or None."""
    folder = Path(kernel).resolve().parent
    for name in ("config", ".config"):
        path = folder / name
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        if "CONFIG_" in text:
            return str(path), text
    return None


def lacks_virtio_pci(kernel: str) -> str | None:
    """The config file that says the kernel has no virtio-pci driver, or None
    (it has one, or no config was found: then the boot tells)."""
    found = kernel_config(kernel)
    if found is None:
        return None
    path, text = found
    lines = {line.strip() for line in text.splitlines()}
    return None if {"CONFIG_VIRTIO_PCI=y", "CONFIG_VIRTIO_PCI=m"} & lines else path


def not_applicable(spec: VmmSpec, *, kernel: str, vsock: bool, vhost_vsock: str = VHOST_VSOCK,
                   wrapper: str = "bench/virtio") -> str | None:
    """Why `spec` cannot run the blk (vsock False) or vsock workload at all,
    or None (also boot --agent's, whose `wrapper` is bench/boot)."""
    if spec.generic:
        return "--test-generic-sbx is for the boot workload only"
    if spec.kind == "cloud-hypervisor":
        return CLOUD_HYPERVISOR
    if spec.kind == "kvmtool":
        if is_elf(kernel):
            return f"kvmtool loads a bzImage only, not an ELF vmlinux ({wrapper} --format bzimage)"
        config = lacks_virtio_pci(kernel)
        if config:
            return ("kvmtool's virtio devices are virtio-pci on x86 (builtin-run.c: --virtio-transport pci or "
                    f"pci-legacy) and the guest kernel has no CONFIG_VIRTIO_PCI ({config})")
    if spec.kind == "firecracker" and not is_elf(kernel):
        return f"Firecracker boots only an uncompressed ELF vmlinux on x86-64 ({wrapper} --format vmlinux)"
    return vhost_vsock_problem(spec, vhost_vsock) if vsock else None


def disk_format_problem(spec: VmmSpec, disk_format: str) -> str | None:
    """Why `spec` cannot take a disk in that format, or None."""
    if disk_format == "qcow2" and spec.kind == "kvmtool":
        return KVMTOOL_QCOW2
    if disk_format == "qcow2" and spec.kind == "firecracker":
        return FIRECRACKER_QCOW2
    return None


def _sbx(spec: VmmSpec, base: BootCommand, dev: Devices) -> BootCommand:
    argv = list(base.argv)
    if dev.disk:
        argv += ["--disk", dev.disk + (",backing=on" if dev.disk_format == "qcow2" else "")]
    if dev.vsock:
        argv += ["--vsock", f"cid={dev.cid},uds={dev.vsock_uds}"]
    return replace(base, argv=argv)


def _qemu(spec: VmmSpec, base: BootCommand, dev: Devices) -> BootCommand:
    argv = list(base.argv) + QEMU_MODERN_VIRTIO
    notes = list(base.notes) + ["-global virtio-mmio.force-legacy=false: virtio 1.x, as sbx-vmm's"]
    if dev.disk:
        argv += ["-drive", f"file={dev.disk},format={dev.disk_format},if=none,id=d0,cache={dev.qemu_cache},"
                           f"aio={QEMU_AIO}", "-device", "virtio-blk-device,drive=d0"]
        notes.append(f"drive cache={dev.qemu_cache},aio={QEMU_AIO}")
    if dev.vsock:
        argv += ["-device", f"vhost-vsock-device,guest-cid={dev.cid}"]
    return replace(base, argv=argv, notes=notes)


def _kvmtool(spec: VmmSpec, base: BootCommand, dev: Devices) -> BootCommand:
    argv = list(base.argv)
    if dev.disk:
        argv += ["-d", dev.disk]
    if dev.vsock:
        argv += ["--vsock", str(dev.cid)]
    return replace(base, argv=argv, notes=list(base.notes) + ["virtio-pci devices (kvmtool's only transport "
                                                              "on x86)"])


def _firecracker(spec: VmmSpec, base: BootCommand, dev: Devices) -> BootCommand:
    """The boot command's config file, with the drive or the vsock device."""
    path = Path(base.argv[base.argv.index("--config-file") + 1])
    config = json.loads(path.read_text())
    if dev.disk:
        config["drives"] = [{"drive_id": "scratch", "path_on_host": dev.disk, "is_root_device": False,
                             "is_read_only": False}]
    if dev.vsock:
        config["vsock"] = {"guest_cid": dev.cid, "uds_path": dev.vsock_uds}
    path.write_text(json.dumps(config, indent=2) + "\n")
    return replace(base, notes=list(base.notes) + ["drives and vsock in its config file, per its docs; "
                                                   "not run in this project yet"])


_ADD_DEVICES = {"sbx": _sbx, "qemu": _qemu, "kvmtool": _kvmtool, "firecracker": _firecracker}


def device_command(spec: VmmSpec, cfg: BootConfig, dev: Devices) -> BootCommand | NotApplicable:
    """The command that boots `cfg` on `spec` with the device of `dev`, or
    why that VMM cannot."""
    add = _ADD_DEVICES.get(spec.kind)
    if add is None or spec.generic:
        return NotApplicable(CLOUD_HYPERVISOR if spec.kind == "cloud-hypervisor"
                             else f"no blk/vsock command for VMM kind {spec.kind!r}")
    problem = disk_format_problem(spec, dev.disk_format) if dev.disk else None
    if problem:
        return NotApplicable(problem)
    base = boot_command(spec, cfg)
    if isinstance(base, NotApplicable):
        return base
    return add(spec, base, dev)
