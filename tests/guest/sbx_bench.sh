#!/usr/bin/env bash
# Guest test: `sbx-bench run boot` (bench/sbx-bench, docs/benchmarks.md)
# with sbx-vmm and QEMU -M microvm, two runs each, through the harness,
# then `validate` and `report` at level 0. It checks that the tool works
# and that what it writes is well-formed (the results schema, the CSV, the
# Markdown report and its plot), never the times themselves: those are
# the benchmark's, and harness-slow.
# Usage: sbx_bench.sh SOURCE_ROOT BUILD_ROOT
set -euo pipefail
src=$1 build=$2
. "$src/tests/lib.sh"
need_harness
need_cmd qemu-system-x86_64 "the QEMU -M microvm column"
/usr/bin/python3 -c 'import matplotlib' 2>/dev/null || skip "no python3-matplotlib (sbx-bench report's plots)"

kernel=$("$src/images/build" vmlinux)
initrd=$("$src/images/build" initramfs)
work=$(mktemp -d "$build/sbx-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
bench=$src/bench/sbx-bench
res=$work/boot.json

run_nested "$work/out" --timeout 900 -- /usr/bin/python3 "$bench" run boot \
  --vmm "sbx=$build/host-tools/sbx-vmm/sbx-vmm,qemu" --kernel "$kernel" --initrd "$initrd" \
  --runs 2 --warmup 1 --bootstrap 200 --out "$res" --csv "$work/boot.csv"
printf '%s\n' "$log" | tail -n 20
expect_status 0 "sbx-bench run boot exits 0"
[ -f "$res" ] || fail "no results file $res"
/usr/bin/python3 "$bench" validate "$res" || fail "the results do not match bench/sbxbench/results.schema.json"
echo "ok: the results match the schema"
/usr/bin/python3 - "$res" <<'PY' || fail "the results are not what two runs of two VMMs give"
import json, sys
r = json.load(open(sys.argv[1]))
text = json.dumps(r)
for vmm in ("sbx", "qemu"):
    assert f'"{vmm}"' in text, f"no {vmm} in the results"
# every VMM's start -> init: two samples, a median inside [min, max]
def walk(o):
    if isinstance(o, dict):
        if o.get("n") == 2 and o.get("median") is not None:
            assert o["min"] <= o["median"] <= o["max"], o
            yield o
        for v in o.values():
            yield from walk(v)
    elif isinstance(o, list):
        for v in o:
            yield from walk(v)
assert len(list(walk(r))) >= 4, "fewer than two figures with two samples for each VMM"
print("ok: two samples per figure for sbx and qemu, medians within their ranges")
PY
head -n 1 "$work/boot.csv" | grep -q 'median' || fail "the CSV has no header with median"
echo "ok: the CSV has a header and $(($(wc -l <"$work/boot.csv") - 1)) rows"
/usr/bin/python3 "$bench" report "$res" --out "$work/report" || fail "sbx-bench report failed"
[ -s "$work/report/report.md" ] || fail "no report.md"
grep -q 'qemu' "$work/report/report.md" || fail "the report names no qemu"
pngs=$(find "$work/report" -name '*.png' | wc -l)
[ "$pngs" -ge 1 ] || fail "the report has no plot"
head -c 8 "$(find "$work/report" -name '*.png' | head -n 1)" | od -An -tx1 | grep -q '89 50 4e 47' \
  || fail "the plot is not a PNG"
echo "ok: report.md and $pngs PNG plot(s)"
