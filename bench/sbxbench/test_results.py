"""Results files: schema validation (and rejection), statistics, CSV."""

import copy
import csv
import io
import unittest

from sbxbench import results, schema_check
from sbxbench.machine_facts import cpu_facts, kvm_facts
from sbxbench.workload_boot import BREAKDOWNS, FIGURES

MACHINE = {"hostname": "h", "cpu": {"model": "Test CPU", "logical_cpus": 2, "hypervisor_flag": False,
                                    "virtualization": "vmx"},
           "memory_mib": 4096, "kernel_release": "6.1.0-test", "python": "3.11.2",
           "kvm": {"kind": "hardware", "detail": "hardware virtualization", "modules": ["kvm_intel"],
                   "device_present": True}}


def synthetic_result(kvm_kind="hardware", runs=4):
    """A boot result with sbx (~100 ms to init), qemu (~150 ms) and an n/a kvmtool."""
    machine = copy.deepcopy(MACHINE)
    machine["kvm"]["kind"] = kvm_kind
    vmms = [{"name": "sbx", "kind": "sbx", "label": "sbx-vmm", "path": "/b/sbx-vmm", "status": "ok",
             "reason": None, "argv": ["/b/sbx-vmm"], "notes": [], "version": "sbx-vmm 0.1.0"},
            {"name": "qemu", "kind": "qemu", "label": "QEMU microvm", "path": "/usr/bin/qemu", "status": "ok",
             "reason": None, "argv": ["/usr/bin/qemu"], "notes": ["pci=off"], "version": "QEMU 7.2"},
            {"name": "kvmtool", "kind": "kvmtool", "label": "kvmtool (lkvm)", "path": "/x/lkvm",
             "status": "n/a", "reason": "/x/lkvm does not exist", "argv": None, "notes": [], "version": None}]
    samples = []
    for r in range(runs):
        for pos, (name, init) in enumerate((("sbx", 100.0 + r), ("qemu", 150.0 + 2 * r))):
            figs = {"start_to_init": init, "start_to_exit": init + 20, "init_to_exit": 20.0}
            if name == "sbx":
                figs.update(vmm_setup=10.0, vmm_boot_timer=90.0 + r, kernel_to_init=80.0 + r,
                            init_to_console=10.0)
            samples.append({"vmm": name, "round": r, "position": pos, "warmup": False, "ok": True,
                            "error": None, "figures": figs})
    samples.append({"vmm": "qemu", "round": runs, "position": 0, "warmup": False, "ok": False,
                    "error": "no marker within 120 s", "figures": {}})
    return results.new_result(
        workload="boot", parameters={"runs": runs, "warmup": 0, "cpus": 1, "memory_mib": 256,
                                     "cmdline": "console=ttyS0"},
        figures=[{"id": f.id, "unit": f.unit, "description": f.description} for f in FIGURES],
        breakdowns=BREAKDOWNS, vmms=vmms, runs=samples, machine=machine,
        run_facts={"date": "2026-12-06T03:00:00+00:00", "command_line": ["sbx-bench", "run", "boot"],
                   "git": {"commit": "0" * 40, "dirty": False}},
        inputs={"kernel": {"path": "/k/vmlinux", "size_bytes": 10, "sha256_prefix": "0123456789abcdef"},
                "initrd": None},
        resamples=500, confidence=0.95, seed=17)


class SchemaTest(unittest.TestCase):
    def test_produced_result_is_valid(self):
        self.assertEqual(schema_check.validate(synthetic_result()), [])

    def test_missing_field_is_rejected(self):
        doc = synthetic_result()
        del doc["machine"]
        self.assertIn("$: missing required field 'machine'", schema_check.validate(doc))
        doc = synthetic_result()
        del doc["statistics"][0]["median_ci"]
        self.assertTrue(any("statistics[0]: missing required field 'median_ci'" in e
                            for e in schema_check.validate(doc)))

    def test_wrong_type_is_rejected(self):
        doc = synthetic_result()
        doc["runs"][0]["ok"] = "yes"
        doc["schema_version"] = 2
        doc["vmms"][0]["status"] = "fine"
        errors = "\n".join(schema_check.validate(doc))
        self.assertIn("$.runs[0].ok: expected boolean, got str", errors)
        self.assertIn("$.schema_version: must be 1", errors)
        self.assertIn("$.vmms[0].status: 'fine' is not one of", errors)

    def test_unsupported_schema_keyword_is_an_error(self):
        with self.assertRaises(schema_check.SchemaError):
            schema_check.validate({}, {"type": "object", "oneOf": []})


class StatisticsTest(unittest.TestCase):
    def test_statistics_and_ratios(self):
        doc = synthetic_result()
        med = {(s["vmm"], s["figure"]): s for s in doc["statistics"]}
        self.assertEqual(med[("sbx", "start_to_init")]["median"], 101.5)   # 100..103
        self.assertEqual(med[("qemu", "start_to_init")]["median"], 153.0)  # 150..156, failure skipped
        self.assertEqual(med[("qemu", "start_to_init")]["n"], 4)
        self.assertNotIn(("qemu", "vmm_setup"), med)
        ratio = next(r for r in doc["ratios"] if r["vmm"] == "qemu" and r["figure"] == "start_to_init")
        self.assertAlmostEqual(ratio["ratio"], 153.0 / 101.5)
        self.assertTrue(ratio["ci"][0] <= ratio["ratio"] <= ratio["ci"][1])
        self.assertFalse(any(r["vmm"] == "sbx" for r in doc["ratios"]))

    def test_recompute_is_stable(self):
        doc = synthetic_result()
        before = copy.deepcopy(doc["statistics"])
        self.assertEqual(results.recompute_statistics(doc)["statistics"], before)


class CsvTest(unittest.TestCase):
    def test_header_and_rows(self):
        doc = synthetic_result()
        rows = list(csv.reader(io.StringIO(results.csv_text(doc))))
        self.assertEqual(rows[0], results.CSV_COLUMNS)
        body = [dict(zip(rows[0], r)) for r in rows[1:]]
        # sbx: 7 figures; qemu: its 3; kvmtool (n/a): one row per declared figure.
        self.assertEqual(len([r for r in body if r["vmm"] == "sbx"]), 7)
        self.assertEqual(len([r for r in body if r["vmm"] == "qemu"]), 3)
        na = [r for r in body if r["vmm"] == "kvmtool"]
        self.assertEqual(len(na), len(FIGURES))
        self.assertTrue(all(r["status"] == "n/a" and r["reason"] and r["median"] == "" for r in na))
        q = next(r for r in body if r["vmm"] == "qemu" and r["figure"] == "start_to_init")
        self.assertEqual((q["n"], q["median"], q["unit"]), ("4", "153", "ms"))
        self.assertAlmostEqual(float(q["ratio_to_baseline"]), 153.0 / 101.5, places=4)
        self.assertLess(float(q["median_ci_low"]), float(q["median_ci_high"]))


class MachineFactsTest(unittest.TestCase):
    def test_cpuinfo_and_kvm_kind(self):
        info = "model name\t: Some CPU @ 3GHz\nflags\t\t: fpu vmx hypervisor\n"
        self.assertEqual(cpu_facts(info)["model"], "Some CPU @ 3GHz")
        self.assertTrue(cpu_facts(info)["hypervisor_flag"])
        self.assertEqual(kvm_facts({"SBX_NESTED": "1"})["kind"], "nested")
        self.assertEqual(kvm_facts({}, sys_module="/nonexistent", kvm_device="/nonexistent")["kind"], "none")


if __name__ == "__main__":
    unittest.main()
