#!/usr/bin/env python3
"""Level-1 side of bench/sbx: with sbxd already running (bench/sbx_session.sh
starts it as the sbxd guest test does), times the sandbox life cycle through
`sbx` alone (JSON, since its stdout is a pipe) on a monotonic clock, and
boots QEMU -M microvm on the same (slim) image to agent-ready
(tests/guest/agent_run.py's run_one, as bench/agent does) in the same run.

Per run, in this order (nothing else of ours runs during the QEMU boot):
  new (warm template) -> exec `true` -> stop (memory) -> resume
  -> fork (memory) -> rm child -> fork --disk-only -> rm child -> rm
  -> new --cold -> rm -> QEMU boot to the agent's announcement
Then, once, RUNS neighbour samples per row of bench/sbx_neighbour.py: one
sandbox's exec while another is quiet or misbehaves; and ROUNDTRIP_CALLS
execs of `true` through each door (CLI, API, MCP stdio and HTTP, the SDKs:
bench/sbx_roundtrip.py).

Writes LOGDIR/sbx-table.md (the markdown table, with its header) and the
JSON file; progress lines start with "BENCH-SBX:". Exit status 1 when an
operation never succeeded in any run.
"""

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import types

import sbx_neighbour
import sbx_roundtrip

sys.dont_write_bytecode = True  # no __pycache__ in the (shared) source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "guest"))

LABEL = "bench=sbx"
ROUNDTRIP_CALLS = 20

# The hosted service's figures, a fixed reference: shared/seed/
# 000_f0ccb799ab406fd7.txt, line 283 ("Measured from our machine on
# 2026-10-27 in eu-central, 10 runs per size: ... ready in a median 3.2
# seconds, a resume with memory in 1.35 seconds, and a fork in 3.35
# seconds. The first command then took about 0.2 seconds. Every figure
# includes CLI and network time."). Its fork copies the disk only (same
# file, lines 47 and 59), so it stands beside our --disk-only fork.
SEED_SOURCE = "shared/seed/000_f0ccb799ab406fd7.txt (the product's seed document), line 283 (fork: lines 47, 59)"
SEED = {"new": 3.2, "first_exec": 0.2, "resume": 1.35, "fork_disk": 3.35}

# (key, table label); the order of the table and of the JSON.
OPERATIONS = [
    ("new", "`sbx new` → ready, warm template"),
    ("new_cold", "`sbx new --cold` → ready"),
    ("first_exec", "first `sbx exec ID -- true` after ready"),
    ("stop", "`sbx stop` (with memory)"),
    ("resume", "`sbx resume` → ready"),
    ("fork", "`sbx fork` (memory) → child ready"),
    ("fork_disk", "`sbx fork --disk-only` → child ready"),
]
# QEMU boots the image cold: its one figure stands beside both creates.
QEMU_ROWS = ("new", "new_cold")

HEADER = """\
sbx benchmark: the sandbox life cycle through `sbx`, beside QEMU -M microvm
booting the same (slim) image to agent-ready, in one nested-harness run.
Times are seconds of wall clock around each `sbx` command (CLI + API +
sbxd + VMM). Inside the harness (tests/nested: QEMU TCG level 1) absolute
times are 10-50x native: only ratios within this run mean anything, and
the hosted column (another machine, over the network) is a reference of
scale, not a comparison."""


class OpFailed(Exception):
    pass


def summarize(samples):
    """{median, min, max, runs} of a list of seconds, or None when empty."""
    if not samples:
        return None
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples),
            "runs": len(samples)}


def fmt(seconds):
    return "—" if seconds is None else f"{seconds:.2f}"


def format_table(stats, qemu, failures, runs_asked):
    """The markdown table: stats {key: summarize()}, qemu summarize() or None,
    failures {key: count}."""
    lines = ["| operation | sbx median s | min | max | runs | QEMU microvm | hosted seed |",
             "|---|---|---|---|---|---|---|"]
    for key, label in OPERATIONS:
        s = stats.get(key)
        done = s["runs"] if s else 0
        failed = failures.get(key, 0)
        runs = f"{done}/{runs_asked}"
        why = [f"{n} {what}" for n, what in ((failed, "failed"), (runs_asked - done - failed, "skipped")) if n]
        if why:
            runs += f" ({', '.join(why)})"
        q = fmt(qemu["median"]) if qemu and key in QEMU_ROWS else "—"
        cells = [label] + ([fmt(s["median"]), fmt(s["min"]), fmt(s["max"])] if s else ["—"] * 3)
        cells += [runs, q, fmt(SEED.get(key))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def format_notes(stats, qemu, runs_asked, qemu_failures):
    notes = []
    if qemu:
        notes.append(f"QEMU microvm: VMM start → sbx-agent's announcement on vsock port 53 "
                     f"(tests/guest/agent_run.py), a cold boot of the same image, shown beside both creates; "
                     f"min {fmt(qemu['min'])}, max {fmt(qemu['max'])}, "
                     f"{qemu['runs']}/{runs_asked} runs"
                     + (f" ({qemu_failures} failed)" if qemu_failures else "") + ".")
        for key, label in OPERATIONS:
            if key in QEMU_ROWS and stats.get(key):
                notes.append(f"QEMU boot / {label}: **{qemu['median'] / stats[key]['median']:.2f}x**")
    else:
        notes.append("QEMU microvm: no successful boot.")
    notes.append(f"hosted seed: {SEED_SOURCE}; includes CLI and network time; its fork is disk-only.")
    return "\n".join("- " + n for n in notes)


def say(line):
    print(f"BENCH-SBX: {line}", flush=True)


class Sbx:
    """`sbx` as a subprocess: JSON lines out, wall time on a monotonic clock."""

    def __init__(self, binary, timeout):
        self.binary, self.timeout = binary, timeout

    def __call__(self, *args):
        """(seconds, [JSON events]); OpFailed on a non-zero exit or timeout."""
        argv = [self.binary, *args]
        t0 = time.monotonic()
        try:
            r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                               timeout=self.timeout)
        except subprocess.TimeoutExpired:
            raise OpFailed(f"{' '.join(args[:2])}: no answer within {self.timeout:.0f} s")
        seconds = time.monotonic() - t0
        if r.returncode != 0:
            raise OpFailed(f"{' '.join(args[:2])}: exit {r.returncode}: "
                           f"{r.stderr.decode(errors='replace').strip()[-600:]}")
        events = []
        for line in r.stdout.decode(errors="replace").splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:
                pass  # exec passes the command's own output through
        return seconds, events


def last(events, kind, what):
    found = [e for e in events if e.get("type") == kind]
    if not found:
        raise OpFailed(f"{what}: no {kind!r} event in {events!r:.400}")
    return found[-1]


def warnings(events):
    return [e.get("message", "") for e in events if e.get("type") == "warning"]


class Bench:
    def __init__(self, args):
        self.args = args
        self.sbx = Sbx(args.sbx, args.op_timeout)
        self.samples = {key: [] for key, _ in OPERATIONS}
        self.failures = {key: 0 for key, _ in OPERATIONS}
        self.detail = []  # every measured step, for the JSON
        self.qemu = []
        self.qemu_failures = 0
        self.neighbour = {}
        self.roundtrip = {}

    def machine(self):
        return ["--cpus", str(self.args.cpus), "--memory", str(self.args.memory),
                "--no-auto-stop", "--label", LABEL]

    def measure(self, run, key, step):
        """Runs step() -> (seconds, extra dict); records it; the extra's
        'id' is returned. A failure is counted and re-raised."""
        try:
            seconds, extra = step()
        except OpFailed as e:
            self.failures[key] += 1
            say(f"run {run} {key} FAILED: {e}")
            raise
        self.samples[key].append(seconds)
        self.detail.append({"run": run, "op": key, "seconds": round(seconds, 4), **extra})
        say(f"run {run} {key} {seconds:.2f} s")
        return extra.get("id")

    def new(self, cold=False):
        seconds, events = self.sbx("new", *self.machine(), *(["--cold"] if cold else []))
        ready = last(events, "ready", "new")
        warned = warnings(events)
        if not cold and any("warm template" in w for w in warned):
            # Not what this row measures: kept out of the sample.
            self.rm(ready["id"])
            raise OpFailed(f"new cold-booted instead of the warm template: {warned}")
        return seconds, {"id": ready["id"], "elapsedMs": ready.get("elapsedMs"), "warnings": warned}

    def exec_true(self, sid):
        seconds, _ = self.sbx("exec", sid, "--", "true")
        return seconds, {"id": sid}

    def stop(self, sid):
        seconds, events = self.sbx("stop", sid)
        stopped = last(events, "stopped", "stop")
        if not stopped.get("memory"):
            raise OpFailed(f"stop saved no memory: {stopped!r:.400}")
        return seconds, {"id": sid, "elapsedMs": stopped.get("elapsedMs")}

    def resume(self, sid):
        seconds, events = self.sbx("resume", sid)
        ready = last(events, "ready", "resume")
        if not ready.get("memoryRestored"):
            raise OpFailed(f"resume did not restore memory: {ready.get('resumeReason')}")
        return seconds, {"id": sid, "elapsedMs": ready.get("elapsedMs")}

    def fork(self, sid, disk_only):
        seconds, events = self.sbx("fork", sid, *(["--disk-only"] if disk_only else []))
        forked = last(events, "forked", "fork")
        children = forked.get("sandboxes") or []
        if len(children) != 1 or children[0].get("state") != "running":
            raise OpFailed(f"fork: children {[(c.get('id'), c.get('state')) for c in children]}")
        return seconds, {"id": children[0]["id"], "elapsedMs": forked.get("elapsedMs")}

    def rm(self, *ids):
        ids = [i for i in ids if i]
        if ids:
            try:
                self.sbx("rm", *ids)
            except OpFailed as e:
                say(f"rm {' '.join(ids)}: {e}")

    def rm_all(self):
        try:
            self.sbx("rm", "--label", LABEL)
        except OpFailed as e:
            say(f"rm --label {LABEL}: {e}")

    def wait_template(self):
        """The first create cold-boots and builds the warm template behind;
        wait (bounded) until its folder is whole, as the sbxd test does."""
        pattern = os.path.join(self.args.state, "templates",
                               f"*-{self.args.cpus}c-{self.args.memory}m-*")
        deadline = time.monotonic() + self.args.template_timeout
        while time.monotonic() < deadline:
            done = [d for d in glob.glob(pattern) if ".tmp-" not in os.path.basename(d)]
            if done:
                return done[0]
            time.sleep(1)
        raise OpFailed(f"no warm template {pattern} within {self.args.template_timeout:.0f} s")

    def sbx_run(self, run):
        # A failure skips the rest of the chain that needs its result (the
        # table counts failed and skipped runs), and the label's rm also takes
        # a sandbox whose id never came back, so every run and the QEMU boot
        # start with none of ours running.
        try:
            sid = self.measure(run, "new", self.new)
            self.measure(run, "first_exec", lambda: self.exec_true(sid))
            self.measure(run, "stop", lambda: self.stop(sid))
            self.measure(run, "resume", lambda: self.resume(sid))
            for key, disk_only in (("fork", False), ("fork_disk", True)):
                try:
                    self.rm(self.measure(run, key, lambda: self.fork(sid, disk_only)))
                except OpFailed:
                    pass
        except OpFailed:
            pass
        finally:
            self.rm_all()
        try:
            self.measure(run, "new_cold", lambda: self.new(cold=True))
        except OpFailed:
            pass
        finally:
            self.rm_all()

    def qemu_boot(self, run, pristine):
        """One QEMU boot of a fresh copy of the image; seconds or None."""
        import agent_run  # tests/guest (on sys.path): the boot and its ready detection
        a = self.args
        ns = types.SimpleNamespace(
            kind="rootfs", image=None, kernel=a.kernel, sbx_vmm=a.sbx_vmm, cpus=a.cpus,
            memory=a.memory, cmdline_extra="sbx.token=0123", hello=None, exec_user="user",
            # Stopped just after the announcement: a systemd guest never exits by itself.
            stop_after_announce=0.1, timeout=a.op_timeout)
        copy = os.path.join(os.path.dirname(pristine), "qemu.ext4")
        try:
            subprocess.run(["cp", "--sparse=always", pristine, copy], check=True)
            with open(os.path.join(a.logdir, f"qemu.{run}.log"), "w") as out:
                status, times = agent_run.run_one("qemu", ns, copy, out)
        except Exception as e:  # a failed boot, counted like one; the sbx rows go on
            status, times = f"{type(e).__name__}: {e}", {}
        finally:
            if os.path.exists(copy):
                os.unlink(copy)
        if status != 0 or "announce" not in times:
            self.qemu_failures += 1
            say(f"run {run} qemu FAILED: status {status}, events {sorted(times)}")
            return None
        say(f"run {run} qemu {times['announce']:.2f} s")
        return times["announce"]

    def main(self, pristine):
        a = self.args
        say(f"setup: a first create (it builds the warm template when there is none), {a.cpus} vCPU, {a.memory} MiB")
        seconds, events = self.sbx("new", *self.machine())
        first = last(events, "ready", "new")["id"]
        say(f"setup: first create {seconds:.2f} s; waiting for the warm template")
        self.rm(first)
        say(f"setup: template {self.wait_template()}")
        if a.lifecycle_only:  # a round of bench/sbx --jail-compare
            for run in range(1, a.runs + 1):
                self.sbx_run(run)
            return
        say("setup: one QEMU boot to warm the page cache (not counted)")
        self.qemu_boot(0, pristine)
        for run in range(1, a.runs + 1):
            self.sbx_run(run)
            q = self.qemu_boot(run, pristine)
            if q is not None:
                self.qemu.append(q)
        say("neighbours: two sandboxes, one misbehaving")
        self.neighbour = sbx_neighbour.measure(self, a.runs, say, OpFailed)
        say("round trips: one exec through each door")
        self.roundtrip = sbx_roundtrip.measure(self, ROUNDTRIP_CALLS, say, OpFailed)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sbx", required=True, help="the sbx binary (SBX_HOST says where sbxd is)")
    ap.add_argument("--state", required=True, help="sbxd's --state-dir (for the template's folder)")
    ap.add_argument("--image", required=True, help="the unpacked slim image (rootfs.ext4) sbxd boots")
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--sbx-vmm", required=True)
    ap.add_argument("--logdir", required=True)
    ap.add_argument("--json", required=True, help="where the results go")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cpus", type=int, default=1)
    ap.add_argument("--memory", type=int, default=1024, help="MiB")
    ap.add_argument("--op-timeout", type=float, default=600, help="seconds per sbx command or QEMU boot")
    ap.add_argument("--template-timeout", type=float, default=900)
    ap.add_argument("--lifecycle-only", action="store_true",
                    help="only the sbx rows: no QEMU boot, neighbours or round trips; writes only the JSON")
    args = ap.parse_args()
    sys.stdout.reconfigure(encoding="utf-8")  # the table's arrows, whatever the locale

    bench = Bench(args)
    # QEMU boots copies of the image next to a pristine one in /tmp, never
    # the file sbxd's overlays stand on.
    tmp = tempfile.mkdtemp(prefix="bench-sbx-qemu.", dir="/tmp")
    pristine = os.path.join(tmp, "rootfs.ext4")
    subprocess.run(["cp", "--sparse=always", args.image, pristine], check=True)
    started = time.monotonic()
    try:
        bench.main(pristine)
    except OpFailed as e:
        say(f"setup FAILED: {e}")
    except Exception:  # a bug here: still report what was measured
        traceback.print_exc()
        say("stopped early by the error above")
    finally:
        bench.rm_all()
        shutil.rmtree(tmp, ignore_errors=True)

    stats = {key: summarize(bench.samples[key]) for key, _ in OPERATIONS}
    if args.lifecycle_only:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"runs": args.runs, "samples": bench.samples, "failures": bench.failures,
                       "steps": bench.detail}, f, indent=2)
            f.write("\n")
        return 1 if any(stats[key] is None for key, _ in OPERATIONS) else 0
    qemu = summarize(bench.qemu)
    neighbour = {key: summarize(v) for key, v in bench.neighbour.items()}
    roundtrip = {key: summarize(v) for key, v in bench.roundtrip.items()}
    text = "\n\n".join([HEADER,
                        f"{args.runs} runs, {args.cpus} vCPU, {args.memory} MiB, "
                        f"{time.monotonic() - started:.0f} s in all",
                        format_table(stats, qemu, bench.failures, args.runs),
                        format_notes(stats, qemu, args.runs, bench.qemu_failures),
                        "A sandbox's exec while another sandbox on the host misbehaves "
                        "(bench/sbx_neighbour.py):",
                        sbx_neighbour.format_table(neighbour, args.runs, fmt),
                        "One exec of `true` through each door (bench/sbx_roundtrip.py):",
                        sbx_roundtrip.format_table(roundtrip, ROUNDTRIP_CALLS, fmt)])
    with open(os.path.join(args.logdir, "sbx-table.md"), "w", encoding="utf-8") as f:
        f.write(text + "\n")
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump({"note": "nested harness: absolute times 10-50x native; compare ratios within one run",
                   "runs": args.runs, "cpus": args.cpus, "memoryMib": args.memory,
                   "sbx": stats, "failures": bench.failures,
                   "qemu_microvm_boot_to_agent": qemu, "qemu_failures": bench.qemu_failures,
                   "hosted_seed": {"source": SEED_SOURCE, **SEED},
                   "neighbour_exec": neighbour, "roundtrip_exec": roundtrip,
                   "steps": bench.detail, "qemu_samples": bench.qemu}, f, indent=2)
        f.write("\n")
    print(text, flush=True)
    return 1 if any(stats[key] is None for key, _ in OPERATIONS) or qemu is None else 0


if __name__ == "__main__":
    sys.exit(main())
