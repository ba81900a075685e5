#!/usr/bin/env python3
"""Data analysis in a sandbox: upload a CSV and a script, get a chart back.

Shows: ``sandbox.files.write`` (the data, made here), ``files.upload``
(the analysis script, chart_job.py), ``exec`` of it in the guest (Python's
standard library only: the totals, and a bar chart PNG drawn with zlib +
struct), then ``files.read_bytes`` / ``files.download`` of the results.
The results are checked: a real PNG of the size asked for, and totals
equal to those computed here.

Run: SBX_HOST=unix:/run/sandboxer/sbxd.sock python3 analyze.py [OUT_DIR]
(OUT_DIR, default ./out, receives chart.png, totals.json and sales.csv.)
With SANDBOXER_EXAMPLE_SANDBOX=<id> it works in a temp folder of that
existing sandbox (removed after) instead of a new sandbox;
SANDBOXER_EXAMPLE_USER=<user> runs the script as that user.
Exits non-zero on any wrong result.
"""

from __future__ import annotations

import contextlib
import csv
import datetime
import io
import json
import os
import random
import struct
import sys
import zlib
from decimal import Decimal

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import sandboxer  # noqa: F401
except ImportError:  # not installed: the SDK from this tree
    sys.path.insert(0, os.path.join(HERE, "..", "..", "sdk", "python"))

from sandboxer import Sandboxer

EXISTING = os.environ.get("SANDBOXER_EXAMPLE_SANDBOX") or None
USER = os.environ.get("SANDBOXER_EXAMPLE_USER") or None
WIDTH, HEIGHT = 640, 360
REGIONS = ["Central", "East", "North", "South", "West"]


def make_csv(rows: int = 200, seed: int = 7) -> str:
    """Sales data: date, region, sales (two decimals)."""
    rnd = random.Random(seed)
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["date", "region", "sales"])
    start = datetime.date(2024, 1, 1)
    for _ in range(rows):
        day = start + datetime.timedelta(days=rnd.randrange(366))
        w.writerow([day.isoformat(), rnd.choice(REGIONS), f"{rnd.randrange(500, 250000) / 100:.2f}"])
    return out.getvalue()


def local_totals(text: str) -> dict[str, str]:
    """What the sandbox should answer, computed here."""
    totals: dict[str, Decimal] = {}
    for row in csv.DictReader(io.StringIO(text)):
        totals[row["region"]] = totals.get(row["region"], Decimal(0)) + Decimal(row["sales"])
    return {k: str(v) for k, v in sorted(totals.items())}


def check_png(data: bytes) -> tuple[int, int]:
    """The PNG's size from its IHDR, after checking its signature and pixel data."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG signature")
    length, kind = struct.unpack(">I4s", data[8:16])
    if kind != b"IHDR" or length != 13:
        raise ValueError("the first chunk is not IHDR")
    width, height, depth, color = struct.unpack(">IIBB", data[16:26])
    if (depth, color) != (8, 2):
        raise ValueError(f"not 8-bit RGB: depth {depth}, color type {color}")
    idat, pos = b"", 8
    while pos < len(data):  # every chunk, CRC checked; the IDATs joined
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])[0] != zlib.crc32(kind + body):
            raise ValueError(f"bad CRC in {kind!r}")
        idat += body if kind == b"IDAT" else b""
        pos += 12 + n
    if len(zlib.decompress(idat)) != height * (1 + 3 * width):
        raise ValueError("pixel data of the wrong size")
    return width, height


def main() -> int:
    out_dir = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.getcwd(), "out"))
    os.makedirs(out_dir, exist_ok=True)
    data = make_csv()
    with open(os.path.join(out_dir, "sales.csv"), "w") as f:
        f.write(data)
    client = Sandboxer()  # SBX_HOST and SBX_API_KEY, as the CLI takes them

    # Our own sandbox, deleted when the block ends; or the given one, kept.
    with (contextlib.nullcontext(client.get(EXISTING)) if EXISTING else
          client.create(cpus=1, memory_mib=1024, labels={"example": "csv-analysis"}, ttl="15m")) as sb:
        print(f"sandbox {sb.id} ({'given' if EXISTING else 'created'})")
        work = sb.exec(["mktemp", "-d", "/tmp/csv-analysis.XXXXXX"], user=USER, text=True, check=True).stdout.strip()
        try:
            sb.files.write(f"{work}/sales.csv", data)
            sb.files.upload(os.path.join(HERE, "chart_job.py"), f"{work}/chart_job.py")
            r = sb.exec(["python3", "chart_job.py", "sales.csv", "totals.json", "chart.png", str(WIDTH), str(HEIGHT)],
                        cwd=work, user=USER, timeout=120, text=True)
            print(f"in the sandbox: exit {r.exit_code}: {r.stdout.strip()} {r.stderr.strip()}".rstrip())
            if r.exit_code != 0:
                print("FAIL: the analysis failed in the sandbox")
                return 1
            totals = json.loads(sb.files.read_text(f"{work}/totals.json"))
            chart = os.path.join(out_dir, "chart.png")
            sb.files.download(f"{work}/chart.png", chart)
        finally:
            if EXISTING:
                sb.files.remove(work, recursive=True)
    if not EXISTING:
        print(f"deleted {sb.id}")

    with open(os.path.join(out_dir, "totals.json"), "w") as f:
        json.dump(totals, f, indent=1)
    for region, total in totals.items():
        print(f"  {region:8} {total:>10}")
    ok = True
    want = local_totals(data)
    if totals != want:
        print(f"FAIL: totals differ: sandbox {totals}, local {want}")
        ok = False
    try:
        size = check_png(open(chart, "rb").read())
        if size != (WIDTH, HEIGHT):
            raise ValueError(f"size {size}, want {(WIDTH, HEIGHT)}")
    except (ValueError, struct.error, zlib.error) as e:
        print(f"FAIL: chart.png: {e}")
        ok = False
    if not ok:
        return 1
    print(f"ok: totals match, chart {WIDTH}x{HEIGHT} saved to {chart}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
