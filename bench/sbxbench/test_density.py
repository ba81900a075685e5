"""The density workload: a round's stop at the budget and at the cap, a
child that never answers, the figures, the schema of a density result,
and `sbx-bench run density` end to end on testdata/fake_sbx_vmm.py."""

import json
import os
import subprocess
import sys
import unittest
from pathlib import Path

from sbxbench import schema_check
from sbxbench.test_run_snapshot import FakeSbxVmmCase
from sbxbench.test_snapshot_results import _doc, _vmm
from sbxbench.workload_common import run_rounds
from sbxbench.workload_density import Point, budget_problem, density_figures, density_round, figure_list

BENCH = Path(__file__).resolve().parents[1]


class FakeChildren:
    """Children without processes. Child k's Pss and Rss (MiB) are
    pss(k, running) and rss(k, running), `running` the children started and
    not stopped; `silent` never answer, `exited` {child: n} has exited once
    n children were started, `unreadable` have no smaps_rollup, `deaf`
    answer once, not a second time."""

    def __init__(self, pss, rss=None, *, silent=(), exited=None, unreadable=(), deaf=()):
        self.pss, self.rss = pss, rss or (lambda k, running: 2 * pss(k, running))
        self.silent, self.exited, self.unreadable, self.deaf = set(silent), exited or {}, set(unreadable), set(deaf)
        self.started, self.stopped, self.asked, self.running = [], [], [], set()
        self.explained = []

    def start(self, k):
        self.started.append(k)
        self.running.add(k)
        return k

    def wait(self, child):
        if child in self.silent:
            raise TimeoutError("the agent never answered within 120 s (ConnectionRefusedError x9)")

    def alive(self, child):
        return len(self.started) < self.exited.get(child, len(self.started) + 1)

    def memory(self, child):
        if child in self.unreadable:
            return {}
        n = len(self.running)
        return {"Pss": round(self.pss(child, n) * 1024), "Rss": round(self.rss(child, n) * 1024)}

    def answers(self, child):
        self.asked.append(child)
        if child in self.deaf:
            raise ConnectionResetError("closed")

    def explain(self, child):
        self.explained.append(child)

    def stop(self, children):
        for child in children:
            self.stopped.append(child)
            self.running.discard(child)


def fixed(*mib):
    """Child k's Pss is mib[k - 1], whatever else runs."""
    return lambda k, running: mib[k - 1]


class DensityRoundTest(unittest.TestCase):
    def test_the_child_that_passes_the_budget_is_stopped_and_not_counted(self):
        ops = FakeChildren(fixed(100, 40, 40, 40, 40, 40))  # sums 100, 140, 180, 220
        figs = density_round(ops, budget_mib=200, max_sandboxes=16)
        self.assertEqual((figs["fit"], figs["stopped_by_budget"]), (3, 1))
        self.assertEqual(ops.started, [1, 2, 3, 4])
        self.assertEqual(ops.stopped, [4, 1, 2, 3])  # the 4th first, then the counted ones
        self.assertEqual(ops.asked, [1, 2, 3])       # answering when the budget stopped the round
        self.assertEqual(ops.running, set())
        self.assertNotIn("pss_total_4", figs)

    def test_a_sum_equal_to_the_budget_fits(self):
        self.assertEqual(density_round(FakeChildren(fixed(100, 40, 40, 40)), budget_mib=180, max_sandboxes=16)["fit"], 3)
        self.assertEqual(density_round(FakeChildren(fixed(100, 40, 40, 40)), budget_mib=179.9,
                                       max_sandboxes=16)["fit"], 2)

    def test_every_running_child_is_read_again(self):
        # 90 MiB shared by all (Pss splits it), 10 of each child's own: sums 100, 110, 120, 130.
        ops = FakeChildren(lambda k, running: 10 + 90 / running)
        figs = density_round(ops, budget_mib=125, max_sandboxes=16)
        self.assertEqual(figs["fit"], 3)
        self.assertAlmostEqual(figs["pss_total_3"], 120, places=2)
        self.assertAlmostEqual(figs["first_pss_mib"], 100, places=2)
        self.assertAlmostEqual(figs["marginal_pss_mib"], 10, places=2)
        self.assertAlmostEqual(figs["pss_per_sandbox_mib"], 40, places=2)

    def test_the_cap(self):
        ops = FakeChildren(fixed(*[10] * 20))
        figs = density_round(ops, budget_mib=10_000, max_sandboxes=5)
        self.assertEqual((figs["fit"], figs["stopped_by_budget"]), (5, 0))
        self.assertEqual(ops.started, [1, 2, 3, 4, 5])
        self.assertEqual(sorted(ops.stopped), [1, 2, 3, 4, 5])
        self.assertEqual(figs["pss_total_5"], 50)

    def test_a_child_that_never_answers_fails_the_round_and_every_child_stops(self):
        ops = FakeChildren(fixed(*[10] * 20), silent={3})
        with self.assertRaisesRegex(RuntimeError, r"child 3 never answered \(2 running and answering\): "
                                                  "TimeoutError: the agent never answered within 120 s"):
            density_round(ops, budget_mib=10_000, max_sandboxes=16)
        self.assertEqual(ops.started, [1, 2, 3])
        self.assertEqual(sorted(ops.stopped), [1, 2, 3])

    def test_the_failure_is_a_recorded_run(self):
        ops = FakeChildren(fixed(*[10] * 20), silent={2})
        runs = run_rounds({"sbx": lambda: density_round(ops, budget_mib=10_000, max_sandboxes=16)}, runs=1,
                          warmup=0, log=lambda _: None, summary=str)
        self.assertEqual(len(runs), 1)
        self.assertFalse(runs[0]["ok"])
        self.assertEqual(runs[0]["figures"], {})
        self.assertIn("child 2 never answered (1 running and answering)", runs[0]["error"])
        self.assertEqual(ops.running, set())

    def test_other_failures_stop_every_child(self):
        # (the failure, its message, the child whose logs are shown)
        cases = [({"exited": {1: 2}}, "child 1 exited while 2 were started", [1]),
                 ({"unreadable": {2}}, "unreadable", []),
                 ({"deaf": {2}}, "child 2 of 3 no longer answers: ConnectionResetError", [2])]
        for kwargs, message, explained in cases:
            ops = FakeChildren(fixed(100, 40, 40, 40), **kwargs)
            with self.assertRaisesRegex(RuntimeError, message):
                density_round(ops, budget_mib=200, max_sandboxes=16)
            self.assertEqual(ops.running, set(), kwargs)
            self.assertEqual(ops.explained, explained, kwargs)

    def test_a_first_child_over_the_budget(self):
        ops = FakeChildren(fixed(300))
        with self.assertRaisesRegex(RuntimeError, "the first child alone has Pss 300.0 MiB, over the budget of "
                                                  "200 MiB"):
            density_round(ops, budget_mib=200, max_sandboxes=16)
        self.assertEqual((ops.started, ops.stopped), ([1], [1]))


class DensityFiguresTest(unittest.TestCase):
    def test_arithmetic(self):
        figs = density_figures([Point(100, 150), Point(140, 290), Point(180, 430)], True)
        self.assertEqual(figs["fit"], 3)
        self.assertEqual(figs["stopped_by_budget"], 1)
        self.assertEqual(figs["first_pss_mib"], 100)
        self.assertEqual(figs["pss_per_sandbox_mib"], 60)
        self.assertAlmostEqual(figs["rss_per_sandbox_mib"], 430 / 3)
        self.assertEqual(figs["marginal_pss_mib"], 40)
        self.assertEqual([figs[f"pss_total_{k}"] for k in (1, 2, 3)], [100, 140, 180])
        self.assertEqual([figs[f"rss_total_{k}"] for k in (1, 2, 3)], [150, 290, 430])

    def test_one_sandbox_has_no_marginal(self):
        figs = density_figures([Point(70, 90)], False)
        self.assertNotIn("marginal_pss_mib", figs)
        self.assertEqual((figs["pss_per_sandbox_mib"], figs["first_pss_mib"], figs["stopped_by_budget"]), (70, 70, 0))

    def test_every_figure_is_described(self):
        ids = [f["id"] for f in figure_list(3)]
        self.assertEqual(ids[:6], ["fit", "stopped_by_budget", "pss_per_sandbox_mib", "rss_per_sandbox_mib",
                                   "first_pss_mib", "marginal_pss_mib"])
        self.assertEqual(ids[6:], ["pss_total_1", "rss_total_1", "pss_total_2", "rss_total_2", "pss_total_3",
                                   "rss_total_3"])
        figs = density_figures([Point(100, 150), Point(140, 290), Point(180, 430)], True)
        self.assertEqual(set(figs) - set(ids), set())

    def test_budget_against_mem_available(self):
        self.assertIn("--budget-mib 4096 is over MemAvailable (2048 MiB)", budget_problem(4096, 2048))
        self.assertIsNone(budget_problem(2048, 2048))
        self.assertIsNone(budget_problem(4096, None))


def synthetic_density(runs=4):
    """sbx-vmm: 30 MiB shared plus 10 per child, 4 or 5 fit (the cap, 5);
    QEMU: 400 MiB per child, 2 fit in the 1000 MiB budget."""
    def sbx(r):
        return density_figures([Point(30 + 10 * k + r, 60 * k + r) for k in range(1, 5 + r % 2)], False)

    def qemu(r):
        return density_figures([Point(400 * k + r, 410 * k + r) for k in (1, 2)], True)
    vmms = [_vmm("sbx", "sbx", "sbx-vmm, private restores"), _vmm("qemu", "qemu", "QEMU microvm, -incoming"),
            _vmm("kvmtool", "kvmtool", "kvmtool (lkvm)", "n/a", "kvmtool (lkvm) has no snapshot or restore")]
    return _doc("density", figure_list(5), vmms, {"sbx": sbx, "qemu": qemu}, [], runs=runs,
                budget_mib=1000, max_sandboxes=5)


class DensityResultsTest(unittest.TestCase):
    def test_valid_against_the_schema(self):
        doc = synthetic_density()
        self.assertEqual(schema_check.validate(doc), [])
        doc["runs"][0]["figures"]["fit"] = "4"
        self.assertTrue(any("figures.fit" in e for e in schema_check.validate(doc)))

    def test_statistics_per_k(self):
        stats = {(s["vmm"], s["figure"]): s for s in synthetic_density()["statistics"]}
        self.assertEqual(stats[("sbx", "fit")]["median"], 4.5)      # rounds 0..3: 4, 5, 4, 5
        self.assertEqual(stats[("sbx", "pss_total_5")]["n"], 2)     # only the rounds that reached 5
        self.assertEqual(stats[("sbx", "pss_total_4")]["n"], 4)
        self.assertEqual(stats[("qemu", "fit")]["median"], 2)
        self.assertNotIn(("qemu", "pss_total_3"), stats)
        ratio = next(r for r in synthetic_density()["ratios"] if r["vmm"] == "qemu" and r["figure"] == "fit")
        self.assertAlmostEqual(ratio["ratio"], 2 / 4.5)


def _processes_with(text: str) -> list[str]:
    """Command lines of the running processes that contain `text`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(cmdline)
    return found


class RunDensityTest(FakeSbxVmmCase):
    """`sbx-bench run density` on testdata/fake_sbx_vmm.py (private restores
    of its JSON snapshot; its Python processes' real smaps_rollup)."""

    def run_bench(self, *extra, env=None):
        out = self.dir / "density.json"
        cmd = [sys.executable, str(BENCH / "sbx-bench"), "run", "density", "--vmm",
               f"sbx={self.fake},qemu=/no/such/qemu", "--kernel", str(self.dir / "vmlinux"), "--initrd",
               str(self.dir / "minimal"), "--runs", "2", "--warmup", "0", "--bootstrap", "100", "--out", str(out),
               *extra]
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, **(env or {})}, timeout=120, check=False)
        self.assertEqual(_processes_with(str(self.fake)), [], "a child was left running")
        return done, json.loads(out.read_text()) if out.exists() else None

    def test_up_to_the_cap(self):
        done, doc = self.run_bench("--max-sandboxes", "3", "--budget-mib", "1024")
        self.assertEqual(done.returncode, 0, done.stdout)
        self.assertEqual(schema_check.validate(doc), [])
        self.assertEqual((doc["parameters"]["budget_mib"], doc["parameters"]["max_sandboxes"],
                          doc["parameters"]["fill_mib"]), (1024, 3, 0))
        s = {(s["vmm"], s["figure"]): s for s in doc["statistics"]}
        self.assertEqual((s[("sbx", "fit")]["median"], s[("sbx", "stopped_by_budget")]["median"]), (3, 0))
        self.assertGreater(s[("sbx", "pss_total_3")]["median"], s[("sbx", "pss_total_1")]["median"])
        self.assertNotIn(("sbx", "pss_total_4"), s)
        sbx = next(v for v in doc["vmms"] if v["name"] == "sbx")
        self.assertIn("up to 3 children of the raw snapshot", sbx["notes"][0])
        self.assertEqual(sbx["argv"][sbx["argv"].index("--restore-mode") + 1], "private")

    def test_a_child_that_exits_is_a_failed_round(self):
        done, doc = self.run_bench("--max-sandboxes", "4", env={"FAKE_SBX_FAIL_CID": "12"})  # child 2
        self.assertEqual(done.returncode, 1, done.stdout)  # no VMM has data
        self.assertEqual(schema_check.validate(doc), [])
        sbx = next(v for v in doc["vmms"] if v["name"] == "sbx")
        self.assertEqual(sbx["status"], "failed")
        self.assertIn("child 2 never answered (1 running and answering)", sbx["reason"])
        self.assertIn("FAKE_SBX_FAIL_CID", done.stdout)  # its log's tail

    def test_a_budget_over_mem_available_is_na(self):
        done, doc = self.run_bench("--budget-mib", str(1 << 40))
        self.assertEqual(done.returncode, 1, done.stdout)
        sbx = next(v for v in doc["vmms"] if v["name"] == "sbx")
        self.assertEqual(sbx["status"], "n/a")
        self.assertIn("is over MemAvailable", sbx["reason"])


if __name__ == "__main__":
    unittest.main()
