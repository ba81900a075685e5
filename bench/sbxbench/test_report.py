"""`sbx-bench report`: Markdown and PNGs into a temporary folder."""

import tempfile
import unittest
from pathlib import Path

from sbxbench.report_markdown import REPORT_NAME, render_report
from sbxbench.report_plots import density_curves, matplotlib_pyplot
from sbxbench.test_boot_agent import synthetic_agent_result
from sbxbench.test_density import synthetic_density
from sbxbench.test_results import synthetic_result
from sbxbench.test_snapshot_results import synthetic_fork, synthetic_restore, synthetic_snapshot

HAVE_MATPLOTLIB = matplotlib_pyplot() is not None


class ReportTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.out = Path(self.tmp.name) / "report"

    def tearDown(self):
        self.tmp.cleanup()

    def test_markdown_tables_and_facts(self):
        path = render_report([("a.json", synthetic_result())], self.out)
        self.assertEqual(path, self.out / REPORT_NAME)
        text = path.read_text()
        self.assertIn("## boot — a.json", text)
        self.assertIn("| VMM | figure | median [95% CI] | p5–p95 | n |", text)
        self.assertIn("| sbx-vmm | start_to_init (ms) | **101.5** [", text)
        self.assertIn("| QEMU microvm | start_to_init | **1.51x** [", text)
        self.assertIn("| kvmtool (lkvm) | n/a | /x/lkvm does not exist |", text)
        self.assertIn("| CPU | Test CPU (2 logical CPUs) |", text)
        self.assertIn("sha256 0123456789abcdef", text)
        self.assertNotIn("ONLY RATIOS COUNT", text)  # hardware KVM: no banner

    def test_banner_when_nested_and_merged_files(self):
        text = render_report([("a.json", synthetic_result()), ("b.json", synthetic_result("nested"))],
                             self.out).read_text()
        self.assertIn("ONLY RATIOS COUNT", text)
        self.assertIn("KVM kind: nested", text)
        self.assertIn("## boot — a.json", text)
        self.assertIn("## boot — b.json", text)

    @unittest.skipUnless(HAVE_MATPLOTLIB, "python3-matplotlib is not installed (Debian: python3-matplotlib)")
    def test_pngs(self):
        text = render_report([("a.json", synthetic_result())], self.out).read_text()
        pngs = sorted(p.name for p in self.out.glob("*.png"))
        self.assertIn("boot-1-breakdown.png", pngs)
        self.assertIn("boot-1-start_to_init.png", pngs)
        for name in pngs:
            self.assertEqual((self.out / name).read_bytes()[:8], b"\x89PNG\r\n\x1a\n")
            self.assertIn(f"]({name})", text)


class BootAgentReportTest(unittest.TestCase):
    """boot --agent: the breakdown ends with the agent's segment, start_to_agent has its plot."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.out = Path(self.tmp.name) / "report"

    def tearDown(self):
        self.tmp.cleanup()

    def test_report(self):
        text = render_report([("agent.json", synthetic_agent_result())], self.out).read_text()
        self.assertIn("| sbx-vmm | init_to_agent (ms) | **301.5** [", text)
        self.assertIn("| QEMU microvm | start_to_agent | **", text)
        self.assertIn("agent True", text)
        if not HAVE_MATPLOTLIB:
            self.skipTest("python3-matplotlib is not installed (Debian: python3-matplotlib)")
        pngs = sorted(p.name for p in self.out.glob("*.png"))
        self.assertEqual(pngs, ["boot-1-breakdown.png", "boot-1-start_to_agent.png", "boot-1-start_to_init.png"])
        self.assertIn("Boot-time breakdown per VMM, to the agent (init_to_agent", text)

    def test_plain_boot_report_keeps_the_exit(self):
        render = render_report([("boot.json", synthetic_result())], self.out).read_text()
        self.assertNotIn("to the agent", render)
        if HAVE_MATPLOTLIB:
            self.assertNotIn("boot-1-start_to_agent.png", render)


class SnapshotWorkloadsReportTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.out = Path(self.tmp.name) / "report"
        self.docs = [("restore.json", synthetic_restore()), ("snapshot.json", synthetic_snapshot()),
                     ("fork.json", synthetic_fork())]

    def tearDown(self):
        self.tmp.cleanup()

    def test_markdown(self):
        text = render_report(self.docs, self.out).read_text()
        for workload in ("restore", "snapshot", "fork"):
            self.assertIn(f"## {workload} — {workload}.json", text)
        self.assertIn("| sbx-vmm, lazy restore | to_agent (ms) | **2022** [", text)
        # Several baselines: a baseline column, QEMU against each sbx-vmm path.
        self.assertIn("| VMM | baseline | figure | ratio [95% CI] | n / n baseline |", text)
        self.assertIn("| QEMU microvm, -incoming | sbx-vmm, private restore | to_agent | **26.37x** [", text)
        self.assertIn("| Firecracker | n/a | needs its API socket |", text)
        self.assertIn("- sbx-vmm, eager restore: compressed", text)  # the notes
        self.assertIn("| QEMU microvm, migrate to a file | sbx-vmm, raw snapshot | save_ms | **2.39x** [", text)
        self.assertIn("| sbx-vmm, private restores | pss_to_rss (ratio) | **0.3** [", text)
        self.assertIn("fill_mib 1024", text)

    @unittest.skipUnless(HAVE_MATPLOTLIB, "python3-matplotlib is not installed (Debian: python3-matplotlib)")
    def test_pngs(self):
        text = render_report(self.docs, self.out).read_text()
        pngs = sorted(p.name for p in self.out.glob("*.png"))
        self.assertEqual(pngs, ["fork-3-answers.png", "fork-3-memory.png", "restore-1-paths.png",
                                "snapshot-2-file_mib.png", "snapshot-2-save_ms.png"])
        for name in pngs:
            self.assertEqual((self.out / name).read_bytes()[:8], b"\x89PNG\r\n\x1a\n")
            self.assertIn(f"]({name})", text)


class DensityReportTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.out = Path(self.tmp.name) / "report"

    def tearDown(self):
        self.tmp.cleanup()

    def test_curves(self):
        curves = {label: (pss, rss) for label, pss, rss in density_curves(synthetic_density())}
        self.assertEqual(set(curves), {"sbx-vmm, private restores", "QEMU microvm, -incoming"})
        pss, rss = curves["sbx-vmm, private restores"]
        self.assertEqual([k for k, _ in pss], [1, 2, 3, 4, 5])
        self.assertEqual(pss[0][1]["median"], 40 + 1.5)  # 30 + 10 k + round, rounds 0..3
        self.assertEqual(pss[4][1]["median"], 80 + 2)    # only rounds 1 and 3 reached 5
        self.assertEqual(rss[1][1]["median"], 120 + 1.5)
        self.assertEqual([k for k, _ in curves["QEMU microvm, -incoming"][0]], [1, 2])

    def test_report(self):
        text = render_report([("density.json", synthetic_density())], self.out).read_text()
        self.assertIn("## density — density.json", text)
        self.assertIn("| sbx-vmm, private restores | fit (sandboxes) | **4.5** [", text)
        self.assertIn("| QEMU microvm, -incoming | fit | **0.44x** [", text)
        if not HAVE_MATPLOTLIB:
            self.skipTest("python3-matplotlib is not installed (Debian: python3-matplotlib)")
        pngs = sorted(p.name for p in self.out.glob("*.png"))
        self.assertEqual(pngs, ["density-1-curve.png", "density-1-fit.png", "density-1-per-sandbox.png"])
        for name in pngs:
            self.assertEqual((self.out / name).read_bytes()[:8], b"\x89PNG\r\n\x1a\n")
        self.assertIn("![Density curve: the sums of Pss (solid) and Rss (dashed)", text)
        self.assertIn("](density-1-curve.png)", text)


if __name__ == "__main__":
    unittest.main()
