"""Facts about the machine a benchmark ran on, recorded in every result.

Everything is best effort: a fact that cannot be read is null, never a
failure. The KVM kind decides how to read the numbers (docs/benchmarks.md):
under the nested harness (tests/nested sets SBX_NESTED=1 in level 1, a QEMU
TCG machine emulating SVM) or on PVM, absolute times are 10-50x native and
only ratios of one run mean anything.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import platform
import subprocess
from pathlib import Path

# kind -> whether absolute times are meaningful
KVM_KINDS = ("hardware", "nested", "pvm", "none", "unknown")


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return None


def cpu_facts(cpuinfo: str | None = None) -> dict:
    """Model name, logical CPUs (online, as os.cpu_count), and whether the CPU
    says it runs under a hypervisor (the `hypervisor` flag of /proc/cpuinfo)."""
    text = cpuinfo if cpuinfo is not None else (_read("/proc/cpuinfo") or "")
    model = None
    flags: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and model is None:
            model = value.strip()
        elif key == "flags" and not flags:
            flags = set(value.split())
    return {"model": model, "logical_cpus": os.cpu_count(),
            "hypervisor_flag": "hypervisor" in flags,
            "virtualization": "svm" if "svm" in flags else ("vmx" if "vmx" in flags else None)}


def memory_mib(meminfo: str | None = None) -> int | None:
    text = meminfo if meminfo is not None else (_read("/proc/meminfo") or "")
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    return None


def kvm_facts(environ: dict | None = None, sys_module: str = "/sys/module",
              kvm_device: str = "/dev/kvm") -> dict:
    """What kind of /dev/kvm this is: `nested` inside the project's harness
    (SBX_NESTED=1), `pvm` when kvm_pvm is loaded, `hardware` with kvm_intel or
    kvm_amd (and `nested_under_hypervisor` if the CPU reports a hypervisor),
    `none` without /dev/kvm."""
    env = os.environ if environ is None else environ
    modules = [m for m in ("kvm_intel", "kvm_amd", "kvm_pvm") if os.path.isdir(os.path.join(sys_module, m))]
    present = os.path.exists(kvm_device)
    if env.get("SBX_NESTED") == "1":
        kind, detail = "nested", "inside tests/nested level 1 (QEMU TCG emulating AMD SVM)"
    elif "kvm_pvm" in modules:
        kind, detail = "pvm", "PVM (kvm_pvm): paravirtualized KVM, cannot boot stock Linux guests"
    elif not present:
        kind, detail = "none", f"no {kvm_device}"
    elif "kvm_intel" in modules or "kvm_amd" in modules:
        kind, detail = "hardware", "hardware virtualization"
    else:
        kind, detail = "unknown", f"{kvm_device} present, no known KVM module found"
    return {"kind": kind, "detail": detail, "modules": modules, "device_present": present}


def file_facts(path: str | None) -> dict | None:
    """Path, size and the first 16 hex digits of the file's sha256."""
    if not path:
        return None
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        size = os.path.getsize(path)
    except OSError:
        return {"path": path, "size_bytes": None, "sha256_prefix": None}
    return {"path": os.path.abspath(path), "size_bytes": size, "sha256_prefix": digest.hexdigest()[:16]}


def command_output(argv: list[str] | None, timeout: float = 10.0) -> str | None:
    """First line of a command's output (a --version), or None."""
    if not argv:
        return None
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [line.strip() for line in done.stdout.decode(errors="replace").splitlines() if line.strip()]
    return lines[0] if lines else None


def git_facts(root: Path) -> dict:
    """HEAD of the tree and whether it has uncommitted changes. Read only:
    --no-optional-locks keeps `git status` from rewriting the index."""
    head = command_output(["git", "-C", str(root), "rev-parse", "HEAD"])
    status = None
    try:
        done = subprocess.run(["git", "--no-optional-locks", "-C", str(root), "status", "--porcelain",
                               "--untracked-files=no"], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, timeout=30, check=False)
        if done.returncode == 0:
            status = bool(done.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    return {"commit": head if head and len(head) == 40 else None, "dirty": status}


def machine_facts(root: Path) -> dict:
    """The `machine` object of a results file (results.schema.json)."""
    return {
        "hostname": platform.node() or None,
        "cpu": cpu_facts(),
        "memory_mib": memory_mib(),
        "kernel_release": platform.release() or None,
        "kvm": kvm_facts(),
        "python": platform.python_version(),
    }


def run_facts(root: Path, argv: list[str]) -> dict:
    """When and how the run was made, and from which tree."""
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command_line": argv,
        "git": git_facts(root),
    }


def absolute_times_meaningful(kvm_kind: str) -> bool:
    return kvm_kind == "hardware"
