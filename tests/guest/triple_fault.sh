#!/usr/bin/env bash
# Guest test: a guest that triple-faults ends sbx-vmm with its own status (2)
# and a one-line reason, not a hang and not a clean exit. The "kernel" is a
# minimal ELF whose entry point executes ud2: with the boot IDT empty, the
# #UD escalates to #DF and then to a triple fault (KVM_EXIT_SHUTDOWN).
# Usage: triple_fault.sh SOURCE_ROOT BUILD_ROOT
set -euo pipefail
src=$1 build=$2
. "$src/tests/lib.sh"
need_harness
need_cmd python3 "it writes the ud2 ELF"

# The harness shares only the project tree writable; keep inputs there.
work=$(mktemp -d "$build/triple-fault.XXXXXX")
trap 'rm -rf "$work"' EXIT

python3 - "$work/ud2.elf" <<'PY'
import struct, sys
# ELF64 header + one PT_LOAD program header + code, loaded at 16 MiB.
load = 0x1000000
code = b"\x0f\x0b" * 8                      # ud2
ehsize, phsize = 64, 56
offset = ehsize + phsize
eh = struct.pack("<4sBBBBB7sHHIQQQIHHHHHH",
                 b"\x7fELF", 2, 1, 1, 0, 0, b"\0" * 7,
                 2, 62, 1, load, ehsize, 0, 0, ehsize, phsize, 1, 64, 0, 0)
ph = struct.pack("<IIQQQQQQ", 1, 5, offset, load, load, len(code), len(code), 0x1000)
open(sys.argv[1], "wb").write(eh + ph + code)
PY

run_nested "$work/out" --timeout 300 -- "$build/host-tools/sbx-vmm/sbx-vmm" --kernel "$work/ud2.elf" \
  --memory 128 --console none
expect_status 2 "a triple-faulting guest ends sbx-vmm with status 2"
expect_contains "$log" "triple fault" "the exit reason is named"
