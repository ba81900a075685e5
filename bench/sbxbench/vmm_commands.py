"""Command lines that boot one kernel + initramfs on each supported VMM.

Every VMM gets the same kernel, initramfs, vCPUs, memory and kernel command
line; the deviations each one needs are in `BootCommand.notes` (and in the
results file). Flags come from each project's own documentation:

- sbx-vmm: README.md of this project.
- QEMU: `-M microvm` as bench/boot always used it (docs/benchmarks.md):
  no ACPI, option ROMs or RTC, legacy PIC/PIT, one 16550 and an i8042 so
  that reboot=k ends the process; it has no PCI host, so `pci=off`.
- kvmtool: `lkvm run` options of kvmtool's builtin-run.c (-k/--kernel,
  -i/--initrd, -p/--params, -c/--cpus, -m/--mem in MiB, --console serial,
  --network mode=none so it adds no virtio-net of its own). lkvm appends
  its own x86 defaults (noapic noacpi pci=conf1 reboot=k ...) to -p.
  It boots a bzImage (`--format bzimage`), not an ELF vmlinux; run with
  kvmtool 3.18.0 (git b48735e, `make lkvm-static`) in the harness.
- Firecracker: `--no-api --config-file FILE` with "boot-source"
  (kernel_image_path, initrd_path, boot_args) and "machine-config"
  (vcpu_count, mem_size_mib), as in Firecracker's docs/getting-started.md;
  `--boot-timer` loads its boot-timer device at 0xd0000000, which our
  init writes (its "Guest-boot-time" log line). It boots only an
  uncompressed ELF vmlinux on x86-64 and has no PCI: `pci=off`.
- Cloud Hypervisor: `--kernel --initramfs --cmdline --cpus boot=N
  --memory size=NM --serial tty --console off` (its README, "Booting
  Linux"). It restarts the VM on the guest's reboot, so the runner stops
  it once the marker is seen: start -> exit is n/a for it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from .vmm_spec import VmmSpec

DEFAULT_CMDLINE = ("console=ttyS0 reboot=k panic=1 nomodule i8042.noaux i8042.nomux "
                   "i8042.nopnp i8042.dumbkbd quiet")


@dataclass(frozen=True)
class BootConfig:
    """What every VMM boots; `workdir` takes generated config files."""
    kernel: str
    initrd: str
    cmdline: str
    cpus: int
    memory_mib: int
    workdir: str


@dataclass(frozen=True)
class BootCommand:
    argv: list[str]
    stop_at_marker: bool = False  # the VMM does not exit at the guest's reboot
    notes: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # set in the VMM's environment


@dataclass(frozen=True)
class NotApplicable:
    reason: str


def is_elf(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def _sbx(spec: VmmSpec, cfg: BootConfig) -> BootCommand:
    return BootCommand([spec.path, "--kernel", cfg.kernel, "--initrd", cfg.initrd,
                        "--cpus", str(cfg.cpus), "--memory", str(cfg.memory_mib),
                        "--cmdline", cfg.cmdline, *spec.extra_args])


def _qemu(spec: VmmSpec, cfg: BootConfig) -> BootCommand:
    argv = [spec.path, "-M", "microvm,x-option-roms=off,rtc=off,acpi=off,pit=on,pic=on",
            "-enable-kvm", "-cpu", "host", "-smp", str(cfg.cpus), "-m", str(cfg.memory_mib),
            "-nodefaults", "-no-user-config", "-nographic", "-serial", "stdio",
            "-device", "i8042", "-no-reboot",
            "-kernel", cfg.kernel, "-initrd", cfg.initrd, "-append", cfg.cmdline + " pci=off",
            *spec.extra_args]
    return BootCommand(argv, notes=["microvm has no PCI host: pci=off appended"])


def _kvmtool(spec: VmmSpec, cfg: BootConfig) -> BootCommand:
    argv = [spec.path, "run", "-k", cfg.kernel, "-i", cfg.initrd, "-c", str(cfg.cpus),
            "-m", str(cfg.memory_mib), "-p", cfg.cmdline, "--console", "serial",
            "--network", "mode=none", *spec.extra_args]
    # lkvm binds its control socket in $HOME/.lkvm (kvmtool's main.c,
    # kvm__set_dir): a HOME of the run's own, since the harness sets none.
    return BootCommand(argv, notes=["lkvm appends its own x86 defaults to the command line",
                                    "HOME is the run's work directory (lkvm's socket dir)"],
                       env={"HOME": str(cfg.workdir)})


def _firecracker(spec: VmmSpec, cfg: BootConfig) -> BootCommand | NotApplicable:
    if not is_elf(cfg.kernel):
        return NotApplicable("Firecracker boots only an uncompressed ELF vmlinux on x86-64 "
                             "(use --format vmlinux)")
    config = {
        "boot-source": {"kernel_image_path": cfg.kernel, "initrd_path": cfg.initrd,
                        "boot_args": cfg.cmdline + " pci=off"},
        "machine-config": {"vcpu_count": cfg.cpus, "mem_size_mib": cfg.memory_mib},
        "drives": [],
    }
    path = Path(cfg.workdir) / f"firecracker-{spec.name}.json"
    path.write_text(json.dumps(config, indent=2) + "\n")
    argv = [spec.path, "--no-api", "--config-file", str(path), "--boot-timer", "--level", "Info",
            *spec.extra_args]
    return BootCommand(argv, notes=["no PCI: pci=off appended", f"config file {path.name}"])


def _cloud_hypervisor(spec: VmmSpec, cfg: BootConfig) -> BootCommand:
    argv = [spec.path, "--kernel", cfg.kernel, "--initramfs", cfg.initrd, "--cmdline", cfg.cmdline,
            "--cpus", f"boot={cfg.cpus}", "--memory", f"size={cfg.memory_mib}M",
            "--serial", "tty", "--console", "off", *spec.extra_args]
    return BootCommand(argv, stop_at_marker=True,
                       notes=["restarts the VM on the guest's reboot: stopped at the marker, "
                              "start -> exit not measured"])


def _generic(spec: VmmSpec, cfg: BootConfig) -> BootCommand:
    del cfg  # a generic command gets no boot arguments
    return BootCommand([spec.path, *spec.extra_args],
                       notes=["test only: run as a generic command, not a VMM"])


_BUILDERS = {"sbx": _sbx, "qemu": _qemu, "kvmtool": _kvmtool,
             "firecracker": _firecracker, "cloud-hypervisor": _cloud_hypervisor}


def boot_command(spec: VmmSpec, cfg: BootConfig) -> BootCommand | NotApplicable:
    """The command that boots `cfg` on `spec`, or why that VMM cannot."""
    if spec.generic:
        return _generic(spec, cfg)
    builder = _BUILDERS.get(spec.kind)
    if builder is None:
        return NotApplicable(f"no boot command known for VMM kind {spec.kind!r}")
    return builder(spec, cfg)


def version_command(spec: VmmSpec) -> list[str] | None:
    """The command that prints this VMM's version (None: do not ask)."""
    if spec.generic:
        return None
    if spec.kind == "kvmtool":
        return [spec.path, "version"]
    return [spec.path, "--version"]
