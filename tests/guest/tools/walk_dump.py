#!/usr/bin/env python3
"""Walks x86-64 4-level page tables in a guest memory dump (sbx-vmm's
SBX_VMM_CRASH_DUMP_DIR: offset N of the file is guest physical address N)
and prints every level's entry for each virtual address: whether the
guest's own memory maps it, after a triple fault whose cr3 the level-1
trace (svm_shutdown) gave.

With --snapshot FILE (the raw snapshot the VM was restored from), each
table page is also compared with the snapshot's page at the same guest
address: a table that differs was written after the restore, so the dump
holds the guest's writes; had the guest read the snapshot's page instead
(a stale copy-on-write translation below the VMM), its walk would have
used the snapshot's entries, which are printed.

With --check the exit status says whether every VADDR maps (0) or not (1).

Usage: walk_dump.py [--check] [--snapshot FILE] DUMP CR3 VADDR...
"""
import collections
import hashlib
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


class Snapshot:
    """A raw snapshot's memory, located by matching the dump's pages: raw
    mode stores guest memory at one page-aligned file offset, so the offset
    that most of the dump's distinct pages share is the base."""

    def __init__(self, path, dump):
        self.file = open(path, "rb")
        where = collections.defaultdict(list)
        offset = 0
        while True:
            page = self.file.read(4096)
            if len(page) < 4096:
                break
            if any(page):
                where[hashlib.blake2b(page, digest_size=16).digest()].append(offset)
            offset += 4096
        votes = collections.Counter()
        gpa = 0
        dump.seek(0)
        while len(votes) < 64 or sum(votes.values()) < 512:
            page = dump.read(4096)
            if len(page) < 4096:
                break
            hits = where.get(hashlib.blake2b(page, digest_size=16).digest(), []) if any(page) else []
            if len(hits) == 1:
                votes[hits[0] - gpa] += 1
            gpa += 4096
        self.base = votes.most_common(1)[0][0] if votes else None

    def page(self, gpa):
        self.file.seek(self.base + gpa)
        return self.file.read(4096)


def compare(dump, snapshot, table, index):
    if snapshot is None or snapshot.base is None:
        return
    dump.seek(table)
    mine, theirs = dump.read(4096), snapshot.page(table)
    if mine == theirs:
        print("    same as the snapshot's page")
        return
    diff = sum(1 for i in range(0, 4096, 8) if mine[i:i + 8] != theirs[i:i + 8])
    old = int.from_bytes(theirs[index * 8:index * 8 + 8], "little")
    present = sum(1 for i in range(0, 4096, 8) if theirs[i] & PRESENT)
    print(f"    differs from the snapshot's page in {diff} entries; the snapshot's "
          f"entry {index} = {old:#018x} ({present} of 512 present there)")


def walk(dump, cr3, vaddr, snapshot=None):
    vaddr &= (1 << 64) - 1
    table = cr3 & ADDR
    print(f"{vaddr:#018x}: cr3 {cr3:#x} (table page: {page_summary(dump, table)})")
    for level, shift in (("pml4", 39), ("pdpt", 30), ("pd", 21), ("pt", 12)):
        index = (vaddr >> shift) & 0x1FF
        e = entry(dump, table, index)
        if e is None:
            print(f"  {level}[{index}] at {table + index * 8:#x}: past the end of the dump")
            return False
        print(f"  {level}[{index}] at {table + index * 8:#x} = {e:#018x}")
        compare(dump, snapshot, table, index)
        if not e & PRESENT:
            print("  not present")
            return False
        if level in ("pdpt", "pd") and e & PSE:
            print(f"  large page at {e & ADDR:#x}")
            return True
        table = e & ADDR
        if level != "pt":
            print(f"    next table {table:#x}: {page_summary(dump, table)}")
    print(f"  maps {table:#x}")
    return True


def main():
    args = sys.argv[1:]
    check = args[:1] == ["--check"]
    if check:
        args = args[1:]
    snapshot_path = None
    if args[:1] == ["--snapshot"] and len(args) > 1:
        snapshot_path, args = args[1], args[2:]
    if len(args) < 3:
        sys.exit(__doc__)
    with open(args[0], "rb") as dump:
        snapshot = Snapshot(snapshot_path, dump) if snapshot_path else None
        if snapshot is not None:
            where = "not found" if snapshot.base is None else f"at file offset {snapshot.base:#x}"
            print(f"snapshot {snapshot_path}: guest memory {where}")
        mapped = [walk(dump, int(args[1], 0), int(v, 0), snapshot) for v in args[2:]]
    if check and not all(mapped):
        sys.exit(1)


if __name__ == "__main__":
    main()
