"""The `--vmm` list: which VMMs a run compares, and where their binaries are.

Syntax (docs/benchmarks.md, "sbx-bench"): comma-separated entries, each
`NAME` or `NAME=PATH`, NAME one of KNOWN_VMMS, or `NAME@TAG=PATH` for
another build of the same VMM (e.g. `sbx@before=/old/sbx-vmm` beside
`sbx`: a before/after comparison in one run, ratios to `sbx`). `sbx` and `qemu` need no
path (sbx: build/host-tools/sbx-vmm/sbx-vmm of this tree; qemu:
qemu-system-x86_64 from PATH); kvmtool, firecracker and cloud-hypervisor
are not part of Debian 12 or of this project, so their binary must be
named. Paths may not contain commas.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

# name -> (label for people, needs a path, default binary or None)
KNOWN_VMMS: dict[str, tuple[str, bool, str | None]] = {
    "sbx": ("sbx-vmm", False, "build/host-tools/sbx-vmm/sbx-vmm"),
    "qemu": ("QEMU microvm", False, "qemu-system-x86_64"),
    "kvmtool": ("kvmtool (lkvm)", True, None),
    "firecracker": ("Firecracker", True, None),
    "cloud-hypervisor": ("Cloud Hypervisor", True, None),
}
BASELINE = "sbx"
DEFAULT_VMMS = "sbx,qemu"


class VmmListError(ValueError):
    """A --vmm list that cannot be used; the message says why and how to fix it."""


@dataclass(frozen=True)
class VmmSpec:
    """One VMM of a run. `name` is the id in results (sbx, qemu, ...; a
    variant of sbx-vmm such as sbx-jailed has kind sbx); `path` is the binary
    as given or found; `generic` (test only) runs `path` as a plain command."""
    name: str
    kind: str
    label: str
    path: str
    extra_args: tuple[str, ...] = field(default=())
    generic: bool = False

    def variant(self, name: str, label: str, extra_args: tuple[str, ...]) -> "VmmSpec":
        return VmmSpec(name, self.kind, label, self.path, self.extra_args + extra_args, self.generic)


def _default_path(kind: str, root: Path) -> str:
    default = KNOWN_VMMS[kind][2]
    assert default is not None
    if "/" in default:
        return str(root / default)
    return shutil.which(default) or default


def parse_vmm_list(text: str, *, root: Path, generic_sbx: bool = False) -> list[VmmSpec]:
    """Parses `sbx,qemu,kvmtool=/opt/lkvm` into VmmSpecs, in the given order.
    Raises VmmListError for an unknown name, a missing or empty path, or a
    VMM named twice."""
    specs: list[VmmSpec] = []
    seen: set[str] = set()
    entries = [e.strip() for e in text.split(",")]
    if not text.strip() or any(not e for e in entries):
        raise VmmListError(f"--vmm {text!r}: empty entry; expected e.g. 'sbx,qemu,kvmtool=/path/to/lkvm'")
    for entry in entries:
        name, has_path, path = entry.partition("=")
        name = name.strip()
        path = os.path.expanduser(path.strip())
        kind, has_tag, tag = name.partition("@")
        if kind not in KNOWN_VMMS:
            raise VmmListError(f"--vmm: unknown VMM {kind!r}; known: {', '.join(KNOWN_VMMS)} "
                               "(kvmtool, firecracker and cloud-hypervisor as NAME=PATH)")
        if has_tag and not re.fullmatch(r"[a-z0-9][a-z0-9-]*", tag):
            raise VmmListError(f"--vmm: {name}: a tag after @ is lower-case letters, digits and '-'")
        if has_tag and not has_path:
            raise VmmListError(f"--vmm: {name} needs the path of that build, e.g. {name}=/old/build/sbx-vmm")
        if name in seen:
            raise VmmListError(f"--vmm: {name} named twice")
        seen.add(name)
        label, needs_path, _ = KNOWN_VMMS[kind]
        if has_tag:
            label = f"{label} @{tag}"
        if has_path and not path:
            raise VmmListError(f"--vmm: {name}= has an empty path")
        if needs_path and not has_path:
            raise VmmListError(f"--vmm: {name} needs the path of its binary, e.g. {name}=/usr/local/bin/"
                               f"{'lkvm' if name == 'kvmtool' else name} (sbx-bench never downloads one)")
        resolved = path if has_path else _default_path(kind, root)
        specs.append(VmmSpec(name=name, kind=kind, label=label, path=resolved,
                             generic=generic_sbx and name == BASELINE))
    if generic_sbx and BASELINE not in seen:
        raise VmmListError("--test-generic-sbx needs sbx=PATH in --vmm")
    return specs


def unusable_reason(spec: VmmSpec) -> str | None:
    """Why this VMM's binary cannot be started here, or None."""
    path = spec.path
    if "/" not in path:
        found = shutil.which(path)
        if not found:
            return f"{path} not found on PATH"
        path = found
    if not os.path.exists(path):
        return f"{path} does not exist"
    if not os.access(path, os.X_OK):
        return f"{path} is not executable"
    return None
