#!/usr/bin/env python3
"""Walks x86-64 4-level page tables in a guest memory dump (sbx-vmm's
SBX_VMM_CRASH_DUMP_DIR: offset N of the file is guest physical address N)
and prints every level's entry for each virtual address: whether the
guest's own memory maps it, after a triple fault whose cr3 the level-1
trace (svm_shutdown) gave.

Usage: walk_dump.py DUMP CR3 VADDR...
"""
import sys

PRESENT, PSE = 1, 1 << 7
ADDR = 0x000FFFFFFFFFF000


def entry(dump, table, index):
    dump.seek(table + index * 8)
    raw = dump.read(8)
    return int.from_bytes(raw, "little") if len(raw) == 8 else None


def page_summary(dump, table):
    dump.seek(table)
    page = dump.read(4096)
    entries = [int.from_bytes(page[i:i + 8], "little") for i in range(0, len(page), 8)]
    present = sum(1 for e in entries if e & PRESENT)
    return f"{present} of {len(entries)} entries present"


def walk(dump, cr3, vaddr):
    table = cr3 & ADDR
    print(f"{vaddr:#018x}: cr3 {cr3:#x} (table page: {page_summary(dump, table)})")
    for level, shift in (("pml4", 39), ("pdpt", 30), ("pd", 21), ("pt", 12)):
        index = (vaddr >> shift) & 0x1FF
        e = entry(dump, table, index)
        if e is None:
            print(f"  {level}[{index}] at {table + index * 8:#x}: past the end of the dump")
            return
        print(f"  {level}[{index}] at {table + index * 8:#x} = {e:#018x}")
        if not e & PRESENT:
            print("  not present")
            return
        if level in ("pdpt", "pd") and e & PSE:
            print(f"  large page at {e & ADDR:#x}")
            return
        table = e & ADDR
        if level != "pt":
            print(f"    next table {table:#x}: {page_summary(dump, table)}")
    print(f"  maps {table:#x}")


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    with open(sys.argv[1], "rb") as dump:
        for v in sys.argv[3:]:
            walk(dump, int(sys.argv[2], 0), int(v, 0))


if __name__ == "__main__":
    main()
