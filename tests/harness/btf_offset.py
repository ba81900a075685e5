#!/usr/bin/env python3
"""Byte offset of a struct member, read from the running kernel's BTF.

Usage: btf_offset.py STRUCT MEMBER [MODULE]

Reads /sys/kernel/btf/vmlinux, and for MODULE its split BTF
/sys/kernel/btf/MODULE (type ids and string offsets continue the base's).
Prints the offset in bytes, or exits 1 with a message. Level 1's /init uses
it to place a kprobe's fetch arguments (tests/harness/README.md, "KVM
trace"). The format is the kernel's Documentation/bpf/btf.rst: a header
(magic 0xeb9f, hdr_len, type_off/len, str_off/len), then btf_type records
{name_off, info, size_or_type} each followed by kind-specific data.
"""
import struct
import sys

KIND_EXTRA = {  # kind -> (fixed bytes, bytes per vlen entry)
    1: (4, 0), 2: (0, 0), 3: (12, 0), 4: (0, 12), 5: (0, 12), 6: (0, 8),
    7: (0, 0), 8: (0, 0), 9: (0, 0), 10: (0, 0), 11: (0, 0), 12: (0, 0),
    13: (0, 8), 14: (4, 0), 15: (0, 12), 16: (0, 0), 17: (4, 0), 18: (0, 0),
    19: (0, 12),
}


def sections(data):
    magic, _version, _flags, hdr_len = struct.unpack_from("<HBBI", data, 0)
    if magic != 0xEB9F:
        sys.exit("not little-endian BTF")
    type_off, type_len, str_off, str_len = struct.unpack_from("<IIII", data, 8)
    types = data[hdr_len + type_off:hdr_len + type_off + type_len]
    strings = data[hdr_len + str_off:hdr_len + str_off + str_len]
    return types, strings


def find(types, name_of, struct_name, member):
    pos = 0
    while pos < len(types):
        name_off, info, _size = struct.unpack_from("<III", types, pos)
        pos += 12
        kind, vlen, kind_flag = (info >> 24) & 0x1F, info & 0xFFFF, info >> 31
        fixed, each = KIND_EXTRA.get(kind, (None, None))
        if fixed is None:
            sys.exit(f"unknown BTF kind {kind}")
        if kind == 4 and name_of(name_off) == struct_name:
            for i in range(vlen):
                m_name, _m_type, m_off = struct.unpack_from("<III", types, pos + 12 * i)
                if name_of(m_name) == member:
                    bits = m_off & 0xFFFFFF if kind_flag else m_off
                    return bits // 8
        pos += fixed + each * vlen
    return None


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__.splitlines()[2])
    struct_name, member = sys.argv[1], sys.argv[2]
    base = open("/sys/kernel/btf/vmlinux", "rb").read()
    base_types, base_strings = sections(base)

    def cstr(table, off):
        return table[off:table.index(b"\0", off)].decode()

    if len(sys.argv) == 4:
        types, strings = sections(open(f"/sys/kernel/btf/{sys.argv[3]}", "rb").read())

        def name_of(off):
            if off < len(base_strings):
                return cstr(base_strings, off)
            return cstr(strings, off - len(base_strings))
    else:
        types = base_types

        def name_of(off):
            return cstr(base_strings, off)

    offset = find(types, name_of, struct_name, member)
    if offset is None:
        sys.exit(f"no member {member} in struct {struct_name}")
    print(offset)


main()
