"""Runs inside the sandbox: per-region sales totals and a bar chart PNG.

Usage: python3 chart_job.py SALES.csv TOTALS.json CHART.png WIDTH HEIGHT
Standard library only (the guest has no numpy or matplotlib): the PNG is
written by hand with zlib and struct.
"""

import csv
import json
import struct
import sys
import zlib
from decimal import Decimal

COLORS = [(0x4e, 0x79, 0xa7), (0xf2, 0x8e, 0x2b), (0xe1, 0x57, 0x59), (0x76, 0xb7, 0xb2),
          (0x59, 0xa1, 0x4f), (0xed, 0xc9, 0x48), (0xb0, 0x7a, 0xa1), (0x9c, 0x75, 0x5f)]


def totals_by_region(path):
    totals = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):  # columns: date, region, sales
            totals[row["region"]] = totals.get(row["region"], Decimal(0)) + Decimal(row["sales"])
    return dict(sorted(totals.items()))


def png(width, height, pixels):
    """PNG bytes of an RGB image; pixels[y][x] = (r, g, b)."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    raw = b"".join(b"\x00" + bytes(c for px in row for c in px) for row in pixels)  # filter 0 per row
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def bar_chart(values, width, height, margin=20):
    """One bar per value, scaled to the largest, on white with a baseline."""
    img = [[(255, 255, 255)] * width for _ in range(height)]
    top, base = margin, height - margin
    slot = (width - 2 * margin) // max(1, len(values))
    biggest = max(values, default=0) or 1
    for i, v in enumerate(values):
        x0 = margin + i * slot + slot // 6
        x1 = margin + (i + 1) * slot - slot // 6
        y0 = base - int((base - top) * v / biggest)
        for y in range(y0, base):
            img[y][x0:x1] = [COLORS[i % len(COLORS)]] * (x1 - x0)
    img[base][margin:width - margin] = [(0, 0, 0)] * (width - 2 * margin)  # the x axis
    return img


def main():
    csv_path, totals_path, chart_path, width, height = sys.argv[1:6]
    width, height = int(width), int(height)
    totals = totals_by_region(csv_path)
    with open(totals_path, "w") as f:
        json.dump({region: str(total) for region, total in totals.items()}, f, indent=1)
    with open(chart_path, "wb") as f:
        f.write(png(width, height, bar_chart([float(t) for t in totals.values()], width, height)))
    print(f"{len(totals)} regions, chart {width}x{height}")


if __name__ == "__main__":
    main()
