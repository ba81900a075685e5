"""The neighbour rows of bench/sbx (issue 14, resource abuse): how long a
sandbox's `sbx exec -- true` takes while another sandbox on the host is
quiet, and while it misbehaves in each way the sbxd guest part `abuse`
checks for correctness (tests/guest/sbxd/abuse.sh). Reported, never
asserted: the bound the test asserts is generous on purpose.

The misbehaving sandbox runs each abuse in a loop as one attached `sbx
exec --timeout` (so it goes on for as long as the samples take); the
samples start once it has run for RAMP_S, and the abuse is ended by
closing that exec (an attached process does not outlive its connection),
after which the sandbox must answer again before the next one starts.
"""

import subprocess
import time

RAMP_S = 5
ABUSES = [
    ("quiet", "the other sandbox idle", None),
    ("memory_hog", "… allocating until its OOM killer ends it, again and again",
     "while :; do python3 -c 'b = []\nwhile True: b.append(b\"x\" * (16 << 20))'; done"),
    ("fork_bomb", "… running a fork bomb", "b() { b | b & }; b; sleep 100000"),
    ("console_flood", "… writing to its serial console without end",
     "while :; do head -c 65536 /dev/zero | tr '\\0' x >/dev/ttyS0; done"),
]


def measure(bench, runs, say, op_failed):
    """{key: [seconds]} for ABUSES; bench is bench/sbx_runner.Bench."""
    samples = {key: [] for key, _, _ in ABUSES}
    noisy = quiet = None
    try:
        noisy = bench.new()[1]["id"]
        quiet = bench.new()[1]["id"]
        for key, label, script in ABUSES:
            abuse = None
            if script:
                abuse = subprocess.Popen(
                    [bench.sbx.binary, "exec", noisy, "--timeout", "1h", "--", "bash", "-c", script],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(RAMP_S)
            try:
                for _ in range(runs):
                    if abuse and abuse.poll() is not None:
                        say(f"neighbour {key}: the abuse ended early (exit {abuse.returncode})")
                        break
                    seconds, _ = bench.exec_true(quiet)
                    samples[key].append(seconds)
                    say(f"neighbour {key} {seconds:.2f} s")
            finally:
                if abuse:
                    abuse.terminate()
                    abuse.wait(timeout=120)
            if abuse:
                deadline = time.monotonic() + bench.args.op_timeout
                while True:
                    try:
                        bench.exec_true(noisy)
                        break
                    except op_failed:
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(1)
    except op_failed as e:
        say(f"neighbour rows stopped: {e}")
    finally:
        bench.rm(noisy, quiet)
    return samples


def format_table(stats, runs_asked, fmt):
    """stats {key: summarize()}: the markdown table, with the ratio to quiet."""
    quiet = stats.get("quiet")
    lines = ["| while the other sandbox is … | `sbx exec -- true` median s | min | max | runs | / quiet |",
             "|---|---|---|---|---|---|"]
    for key, label, _ in ABUSES:
        s = stats.get(key)
        ratio = f"{s['median'] / quiet['median']:.2f}x" if s and quiet else "—"
        cells = [label] + ([fmt(s["median"]), fmt(s["min"]), fmt(s["max"])] if s else ["—"] * 3)
        cells += [f"{s['runs'] if s else 0}/{runs_asked}", ratio]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
