"""Results of the snapshot workloads: synthetic restore, snapshot and fork
files (sbx-vmm's paths next to QEMU's), their schema, ratios to the extra
baselines and the CSV."""

import copy
import csv
import io
import unittest

from sbxbench import results, schema_check, workload_fork, workload_restore, workload_snapshot
from sbxbench.test_results import MACHINE

RUN = {"date": "2026-12-06T03:00:00+00:00", "command_line": ["sbx-bench", "run"],
       "git": {"commit": "0" * 40, "dirty": False}}
INPUTS = {"kernel": {"path": "/k/vmlinux", "size_bytes": 10, "sha256_prefix": "0123456789abcdef"},
          "initrd": {"path": "/k/minimal", "size_bytes": 20, "sha256_prefix": "fedcba9876543210"}}


def _vmm(name, kind, label, status="ok", reason=None, notes=()):
    return {"name": name, "kind": kind, "label": label, "path": f"/b/{kind}", "status": status, "reason": reason,
            "argv": [f"/b/{kind}"] if status == "ok" else None, "notes": list(notes), "version": None}


def _doc(workload, figures, vmms, per_vmm, extra_baselines, runs=4, kvm_kind="hardware", **params):
    """per_vmm: {name: function(round) -> figures}."""
    machine = copy.deepcopy(MACHINE)
    machine["kvm"]["kind"] = kvm_kind
    samples = []
    for r in range(runs):
        for pos, (name, figs) in enumerate(per_vmm.items()):
            samples.append({"vmm": name, "round": r, "position": pos, "warmup": False, "ok": True,
                            "error": None, "figures": figs(r)})
    return results.new_result(
        workload=workload, parameters={"runs": runs, "warmup": 0, "cpus": 1, "memory_mib": 1536,
                                       "fill_mib": 1024, **params},
        figures=figures, breakdowns=[], vmms=vmms, runs=samples, machine=machine, run_facts=RUN,
        inputs=INPUTS, resamples=300, confidence=0.95, seed=17, outer_machine=None,
        extra_baselines=extra_baselines)


def synthetic_restore(kvm_kind="hardware"):
    def path(first, agent, loaded):
        return lambda r: {k: v for k, v in (("to_first_instruction", first + r), ("to_agent", agent + r),
                                            ("to_fully_loaded", loaded), ("first_instruction_to_agent",
                                                                          agent - first)) if v is not None}
    vmms = [_vmm("sbx", "sbx", "sbx-vmm, eager restore", notes=["compressed"]),
            _vmm("sbx-lazy", "sbx", "sbx-vmm, lazy restore"), _vmm("sbx-private", "sbx", "sbx-vmm, private restore"),
            _vmm("qemu", "qemu", "QEMU microvm, -incoming"),
            _vmm("firecracker", "firecracker", "Firecracker", "n/a", "needs its API socket", ["needs its API socket"])]
    per_vmm = {"sbx": path(6980.0, 7550.0, 6980.0), "sbx-lazy": path(350.0, 2020.0, 8620.0),
               "sbx-private": path(240.0, 1250.0, None), "qemu": path(32900.0, 33000.0, 32900.0)}
    return _doc("restore", workload_restore.figure_list(), vmms, per_vmm, workload_restore.EXTRA_BASELINES,
                kvm_kind=kvm_kind)


def synthetic_snapshot():
    def save(ms, file_mib, touched=None):
        def figs(r):
            out = {"save_ms": ms + 10 * r, "file_mib": file_mib, "memory_mib": 1536.0,
                   "throughput_mb_s": 1536 * 1.048576 / ((ms + 10 * r) / 1000)}
            if touched:
                out.update(touched_mib=touched, pause_ms=3.0, write_ms=ms + 10 * r - 3.0)
            return out
        return figs
    vmms = [_vmm("sbx", "sbx", "sbx-vmm, compressed snapshot"), _vmm("sbx-raw", "sbx", "sbx-vmm, raw snapshot"),
            _vmm("qemu", "qemu", "QEMU microvm, migrate to a file")]
    per_vmm = {"sbx": save(15600.0, 1034.0, 1078.0), "sbx-raw": save(11300.0, 1536.0, 1078.0),
               "qemu": save(27000.0, 1080.0)}
    return _doc("snapshot", workload_snapshot.figure_list(), vmms, per_vmm, workload_snapshot.EXTRA_BASELINES)


def synthetic_fork(forks=3):
    def children(first, step, rss, pss):
        def figs(r):
            out = workload_fork.answer_figures(0.01, [(first + step * k + r) / 1000 for k in range(forks)])
            out.update(workload_fork.memory_figures([{"Rss": rss * 1024, "Pss": pss * 1024}] * forks))
            out.update(workload_fork.memory_figures([{"Rss": 2 * rss * 1024, "Pss": 2 * pss * 1024}] * forks,
                                                    "_touched"))
            return out
        return figs
    vmms = [_vmm("sbx", "sbx", "sbx-vmm, private restores"), _vmm("qemu", "qemu", "QEMU microvm, -incoming")]
    per_vmm = {"sbx": children(300.0, 150.0, 200.0, 60.0), "qemu": children(9000.0, 2000.0, 1100.0, 1100.0)}
    return _doc("fork", workload_fork.figure_list(forks), vmms, per_vmm, [], forks=forks)


class SnapshotResultsTest(unittest.TestCase):
    def test_valid_against_the_schema(self):
        for doc in (synthetic_restore(), synthetic_snapshot(), synthetic_fork()):
            self.assertEqual(schema_check.validate(doc), [], doc["workload"])

    def test_extra_baselines_are_checked(self):
        doc = synthetic_restore()
        doc["analysis"]["extra_baselines"] = "sbx-lazy"
        self.assertTrue(any("extra_baselines" in e for e in schema_check.validate(doc)))

    def test_ratios_to_every_sbx_path(self):
        doc = synthetic_restore()
        ratio = {(r["vmm"], r["baseline"], r["figure"]): r["ratio"] for r in doc["ratios"]}
        # QEMU against each of sbx-vmm's paths (the medians of rounds 0..3 add 1.5).
        self.assertAlmostEqual(ratio[("qemu", "sbx", "to_agent")], 33001.5 / 7551.5)
        self.assertAlmostEqual(ratio[("qemu", "sbx-lazy", "to_agent")], 33001.5 / 2021.5)
        self.assertAlmostEqual(ratio[("qemu", "sbx-private", "to_agent")], 33001.5 / 1251.5)
        # sbx-vmm's own paths: only against the main baseline.
        self.assertIn(("sbx-private", "sbx", "to_agent"), ratio)
        self.assertNotIn(("sbx", "sbx-lazy", "to_agent"), ratio)
        self.assertNotIn(("sbx-private", "sbx-lazy", "to_agent"), ratio)
        self.assertNotIn(("qemu", "sbx-private", "to_fully_loaded"), ratio)  # private has none
        before = copy.deepcopy(doc["ratios"])
        self.assertEqual(results.recompute_statistics(doc)["ratios"], before)

    def test_csv_ratio_is_to_the_main_baseline(self):
        doc = synthetic_restore()
        rows = list(csv.DictReader(io.StringIO(results.csv_text(doc))))
        q = next(r for r in rows if r["vmm"] == "qemu" and r["figure"] == "to_agent")
        self.assertAlmostEqual(float(q["ratio_to_baseline"]), 33001.5 / 7551.5, places=4)
        fc = [r for r in rows if r["vmm"] == "firecracker"]
        self.assertEqual(len(fc), len(workload_restore.FIGURES))
        self.assertTrue(all(r["status"] == "n/a" for r in fc))

    def test_fork_memory(self):
        stats = {(s["vmm"], s["figure"]): s for s in synthetic_fork()["statistics"]}
        self.assertAlmostEqual(stats[("sbx", "pss_to_rss")]["median"], 0.3)
        self.assertAlmostEqual(stats[("qemu", "pss_to_rss")]["median"], 1.0)
        self.assertEqual(stats[("sbx", "all_answered")]["median"], stats[("sbx", "answer_3")]["median"])


if __name__ == "__main__":
    unittest.main()
