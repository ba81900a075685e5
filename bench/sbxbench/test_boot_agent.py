"""`sbx-bench run boot --agent` without a VM: each VMM's command line with
its vsock device and the agent's token (and the n/a reasons), the figures
and failures of one boot, the agent watch against stub agents and a
stand-in process, usage errors, results with the agent's figures,
`run boot --agent` end to end on testdata/fake_sbx_vmm.py, and
images/initramfs/init's guest clock (its sbx_now, with busybox when
installed). The report: test_report.py; bench/boot: test_boot_wrapper.py."""

import contextlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import types
import unittest
from pathlib import Path

from sbxbench import cli, guest_agent, results, schema_check
from sbxbench.process_timing import WatchedRun
from sbxbench.report_plots import _breakdown_for, matplotlib_pyplot
from sbxbench.test_results import synthetic_result
from sbxbench.vmm_spec import parse_vmm_list
from sbxbench.workload_boot import (AGENT_BREAKDOWNS, AGENT_FIGURES, CLOUD_HYPERVISOR_AGENT, BootOptions,
                                    agent_failure, agent_not_applicable, figure_list, figures_of,
                                    guest_timestamps, plan_boot)

BENCH = Path(__file__).resolve().parents[1]
ROOT = BENCH.parent
ELF = b"\x7fELF" + bytes(60)
BZIMAGE = bytes(0x202) + b"HdrS" + bytes(60)
HAVE_MATPLOTLIB = matplotlib_pyplot() is not None
BUSYBOX = shutil.which("busybox")


class _Fixture(unittest.TestCase):
    """A vmlinux and a bzImage in a temporary folder, a spec per VMM (two QEMUs)."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self.tmp.name)
        self.vmlinux, self.bzimage = self.dir / "vmlinux", self.dir / "bz" / "bzImage"
        self.bzimage.parent.mkdir()
        self.vmlinux.write_bytes(ELF)
        self.bzimage.write_bytes(BZIMAGE)
        self.specs = parse_vmm_list("sbx=/b/sbx-vmm,qemu=/q/qemu,qemu@b=/q/qemu-b,kvmtool=/k/lkvm,"
                                    "firecracker=/fc/firecracker,cloud-hypervisor=/ch/ch", root=ROOT)
        self.log: list[str] = []

    def tearDown(self):
        self.tmp.cleanup()

    def plan(self, kernel=None, *, agent=True, vhost=True, specs=None, jail_dir=None):
        opts = BootOptions(kernel=str(kernel or self.vmlinux), initrd="/i/minimal", cmdline="console=ttyS0 quiet",
                           cpus=1, memory_mib=256, runs=1, warmup=0, timeout_s=60, agent=agent,
                           vhost_vsock=__file__ if vhost else str(self.dir / "no-vhost-vsock"))
        return plan_boot(specs or self.specs, opts, workdir=str(self.dir), jail_dir=jail_dir,
                         unusable=lambda s: None, log=self.log.append)


class AgentCommandsTest(_Fixture):
    def test_sbx_and_qemu(self):
        plan = self.plan()
        self.assertRegex(plan.token, r"^[0-9a-f]{32}$")
        self.assertEqual(plan.cmdline, "console=ttyS0 quiet sbx.token=<token>")
        entries = {e["name"]: e for e in plan.vmms}
        sbx = entries["sbx"]
        self.assertEqual(sbx["status"], "ok")
        self.assertEqual(sbx["argv"][-2:], ["--vsock", f"cid=3,uds={self.dir}/sbx.vsock"])
        self.assertEqual(sbx["argv"][sbx["argv"].index("--cmdline") + 1], "console=ttyS0 quiet sbx.token=<token>")
        self.assertNotIn(plan.token, " ".join(sbx["argv"]))  # the recorded argv is redacted, the run's is not
        self.assertIn(f"sbx.token={plan.token}", " ".join(plan.commands["sbx"].argv))
        self.assertEqual(plan.agents["sbx"].endpoint.uds, f"{self.dir}/sbx.vsock")
        self.assertEqual(plan.agents["sbx"].token, plan.token)
        self.assertIn("hybrid vsock Unix socket (CONNECT 52, answered OK): health polled every 5 ms", sbx["notes"][-1])
        # QEMU: vhost-vsock, a CID of its own per VMM; modern virtio-mmio as in the exec workload.
        for name, cid in (("qemu", 3), ("qemu@b", 4)):
            argv = entries[name]["argv"]
            self.assertEqual(argv[-2:], ["-device", f"vhost-vsock-device,guest-cid={cid}"])
            self.assertIn("virtio-mmio.force-legacy=false", argv)
            self.assertEqual(argv[argv.index("-append") + 1], "console=ttyS0 quiet sbx.token=<token> pci=off")
            self.assertEqual(plan.agents[name].endpoint.cid, cid)
            self.assertIn(f"AF_VSOCK to CID {cid} port 52 (vhost-vsock)", entries[name]["notes"][-1])
        # Firecracker (ELF): the hybrid socket in its config file, the token in its boot_args.
        fc = plan.commands["firecracker"]
        config = json.loads(Path(fc.argv[fc.argv.index("--config-file") + 1]).read_text())
        self.assertEqual(config["vsock"], {"guest_cid": 3, "uds_path": f"{self.dir}/firecracker.vsock"})
        self.assertIn(f"sbx.token={plan.token}", config["boot-source"]["boot_args"])
        self.assertEqual(plan.agents["firecracker"].endpoint.uds, f"{self.dir}/firecracker.vsock")
        # kvmtool loads no ELF; Cloud Hypervisor gets no vsock device.
        self.assertEqual(entries["kvmtool"]["status"], "n/a")
        self.assertIn("(bench/boot --format bzimage)", entries["kvmtool"]["reason"])
        self.assertEqual((entries["cloud-hypervisor"]["status"], entries["cloud-hypervisor"]["reason"]),
                         ("n/a", CLOUD_HYPERVISOR_AGENT))
        self.assertEqual(set(plan.agents), set(plan.commands))

    def test_bzimage_kvmtool_and_firecracker(self):
        config = self.bzimage.parent / "config"
        config.write_text("CONFIG_VIRTIO_MMIO=y\n")
        entries = {e["name"]: e for e in self.plan(self.bzimage).vmms}
        self.assertIn("virtio-pci on x86", entries["kvmtool"]["reason"])
        self.assertIn("no CONFIG_VIRTIO_PCI", entries["kvmtool"]["reason"])
        self.assertIn("(bench/boot --format vmlinux)", entries["firecracker"]["reason"])
        # A kernel with virtio-pci: kvmtool's --vsock, with the CID after both QEMUs'.
        config.write_text("CONFIG_VIRTIO_PCI=y\n")
        plan = self.plan(self.bzimage)
        self.assertEqual(plan.commands["kvmtool"].argv[-2:], ["--vsock", "5"])
        self.assertEqual(plan.agents["kvmtool"].endpoint.cid, 5)

    def test_vhost_vsock_missing(self):
        entries = {e["name"]: e for e in self.plan(vhost=False).vmms}
        self.assertEqual(entries["sbx"]["status"], "ok")
        for name in ("qemu", "qemu@b"):
            self.assertEqual(entries[name]["status"], "n/a")
            self.assertIn("no-vhost-vsock on this host (modprobe vhost_vsock)", entries[name]["reason"])
        self.assertTrue(any(line.startswith("qemu: n/a (") for line in self.log), self.log)

    def test_plain_boot_has_neither_device_nor_token(self):
        plan = self.plan(agent=False)
        self.assertIsNone(plan.token)
        self.assertEqual((plan.cmdline, plan.agents), ("console=ttyS0 quiet", {}))
        self.assertNotIn("--vsock", plan.commands["sbx"].argv)
        self.assertFalse(any("vhost-vsock" in a for a in plan.commands["qemu"].argv))

    def test_jailed_sbx_vmm_has_its_socket_in_the_jail(self):
        jail = self.dir / "jail"
        jail.mkdir()
        base = self.specs[0]
        jailed = base.variant("sbx-jailed", "sbx-vmm, jailed", ("--jail", str(jail), "--jail-user", "4242:4343"))
        plan = self.plan(specs=[base, jailed], jail_dir=str(jail))
        self.assertEqual(plan.agents["sbx"].endpoint.uds, f"{self.dir}/sbx.vsock")
        self.assertEqual(plan.agents["sbx-jailed"].endpoint.uds, f"{jail}/sbx-jailed.vsock")

    def test_generic_vmm(self):
        generic = parse_vmm_list("sbx=/x", root=ROOT, generic_sbx=True)[0]
        self.assertIn("--test-generic-sbx", agent_not_applicable(generic, str(self.vmlinux)))


def _watch(answered_s=None, error=None):
    return types.SimpleNamespace(answered_s=answered_s, error=error)


class AgentFiguresTest(unittest.TestCase):
    OUTPUT = (b"sbx-vmm: info: VM set up in 100.0 ms; starting 1 vCPU(s)\nsbx-vmm: info: guest boot time: 400.0 ms\n"
              b"SBX-BOOTED\r\nSBX-TS: init 250.0\r\nSBX-AGENT-START: /usr/local/bin/sbx-agent\r\n"
              b"SBX-TS: agent_start 600.5\r\n")

    def test_figures(self):
        run = WatchedRun(marker_s={"init": 0.5}, exit_s=2.0, status=0, output=self.OUTPUT)
        figs = figures_of(run, agent_s=0.9)
        self.assertEqual(set(figs), {f.id for f in AGENT_FIGURES} | {"guest_init", "guest_agent_start",
                                                                       "guest_init_to_agent_start"})
        self.assertAlmostEqual(figs["start_to_agent"], 900.0)
        self.assertAlmostEqual(figs["init_to_agent"], 400.0)
        self.assertEqual((figs["vmm_setup"], figs["kernel_to_init"], figs["init_to_console"]), (100.0, 300.0, 100.0))
        self.assertAlmostEqual(figs["guest_init_to_agent_start"], 350.5)
        # Each agent breakdown sums to start -> agent.
        for segments in AGENT_BREAKDOWNS:
            self.assertAlmostEqual(sum(figs[f] for f in segments), figs["start_to_agent"], msg=segments)
        # Without the agent: the exit's figures, as before.
        plain = figures_of(run)
        self.assertEqual((plain["start_to_exit"], plain["init_to_exit"]), (2000.0, 1500.0))
        self.assertNotIn("start_to_agent", plain)

    def test_failures(self):
        run = WatchedRun(marker_s={"init": 0.5}, output=self.OUTPUT)
        self.assertIsNone(agent_failure(run, _watch(0.9)))
        exited = "the VMM exited before the agent answered (ConnectionRefusedError x3)"
        self.assertEqual(agent_failure(run, _watch(error=exited)), f"agent: {exited}")
        plain = WatchedRun(marker_s={"init": 0.5}, output=b"SBX-BOOTED\r\nSBX-HALT: reboot\r\n")
        why = agent_failure(plain, _watch(error=exited))
        self.assertIn("no SBX-AGENT-START on the console", why)
        self.assertIn("images/build minimal", why)
        self.assertEqual(agent_failure(WatchedRun(output=self.OUTPUT), _watch(0.9)),
                         "the agent answered, but the host read no SBX-BOOTED line")
        self.assertEqual(agent_failure(WatchedRun(spawn_error="cannot start /x"), _watch()), "cannot start /x")


class _StubAgent:
    """AgentWatch's side of an Agent: `wait` answers after `after` s (or
    raises `error`); `reboot` is recorded and may end the process."""

    def __init__(self, after=0.05, error=None, on_reboot=None):
        self.after, self.error, self.on_reboot = after, error, on_reboot
        self.reboots: list[bool] = []

    def wait(self, deadline_s, poll_s, alive):
        if self.error:
            raise self.error
        time.sleep(self.after)
        return self.after

    def reboot(self, force=False):
        self.reboots.append(force)
        if self.on_reboot:
            self.on_reboot()


class AgentWatchTest(unittest.TestCase):
    def spawn(self):
        proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
        self.addCleanup(lambda: (proc.poll() is None and os.killpg(proc.pid, signal.SIGKILL), proc.wait()))
        return proc

    def test_answer_then_reboot(self):
        proc = self.spawn()
        agent = _StubAgent(on_reboot=lambda: os.killpg(proc.pid, signal.SIGTERM))
        watch = guest_agent.AgentWatch(agent, 30, grace_s=10)
        watch.on_spawn(proc, time.monotonic())
        self.assertTrue(watch.join(30))
        self.assertGreaterEqual(watch.answered_s, 0.05)
        self.assertEqual((agent.reboots, watch.killed, watch.error), ([True], False, None))  # reboot -f

    def test_killed_when_the_reboot_does_not_end_it(self):
        proc = self.spawn()
        watch = guest_agent.AgentWatch(_StubAgent(), 30, grace_s=0.2)
        watch.on_spawn(proc, time.monotonic())
        self.assertTrue(watch.join(30))
        self.assertTrue(watch.killed)
        self.assertEqual(proc.wait(10), -signal.SIGKILL)

    def test_no_answer(self):
        proc = self.spawn()
        agent = _StubAgent(error=TimeoutError("the agent never answered within 1 s (no attempt)"))
        watch = guest_agent.AgentWatch(agent, 1)
        watch.on_spawn(proc, time.monotonic())
        self.assertTrue(watch.join(30))
        self.assertEqual((watch.answered_s, watch.error, agent.reboots), (None, str(agent.error), []))
        self.assertIsNone(proc.poll())  # the run's own timeout stops it

    def test_polls_until_the_deadline(self):
        # A real Agent on a socket that never appears: every attempt fails, the deadline ends the wait.
        with tempfile.TemporaryDirectory() as tmp:
            agent = guest_agent.Agent(guest_agent.Endpoint(uds=os.path.join(tmp, "v.sock")), "t")
            proc = self.spawn()
            watch = guest_agent.AgentWatch(agent, 0.5, poll_s=0.01)
            watch.on_spawn(proc, time.monotonic())
            self.assertTrue(watch.join(30))
        self.assertIsNone(watch.answered_s)
        self.assertIn("the agent never answered within", watch.error)
        self.assertIn("FileNotFoundError", watch.error)


class CliTest(unittest.TestCase):
    def run_cli(self, *argv):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                status = cli.main(["sbx-bench", *argv])
            except SystemExit as e:
                status = e.code
        return status, err.getvalue()

    def test_usage_errors(self):
        for argv, message in ((["run", "exec", "--agent"], "--agent is for the boot workload only"),
                              (["run", "boot", "--agent", "--test-generic-sbx", "--vmm", "sbx=/x"],
                               "not with --test-generic-sbx"),
                              (["run", "boot", "--agent"], "--initrd \"$(images/build minimal)\" (bench/boot")):
            status, err = self.run_cli(*argv)
            self.assertEqual(status, 2, argv)
            self.assertIn(message, err, argv)


def synthetic_agent_result(runs=4):
    """boot --agent: sbx-vmm (boot timer, guest timestamps) and QEMU (host clock only)."""
    doc = synthetic_result(runs=runs)
    doc["parameters"].update(agent=True, cmdline="console=ttyS0 sbx.token=<token>")
    doc["breakdowns"] = AGENT_BREAKDOWNS
    for run in doc["runs"]:
        figs = run["figures"]
        if not run["ok"]:
            continue
        for fid in ("start_to_exit", "init_to_exit"):
            figs.pop(fid)
        figs["start_to_agent"] = figs["start_to_init"] + (300.0 if run["vmm"] == "sbx" else 450.0) + run["round"]
        figs["init_to_agent"] = figs["start_to_agent"] - figs["start_to_init"]
        if run["vmm"] == "sbx":
            figs.update(guest_timestamps(f"SBX-TS: init {60 + run['round']}\nSBX-TS: agent_start 250\n"))
    doc["figures"] = figure_list(doc["runs"], agent=True)
    return results.recompute_statistics(doc)


class AgentResultsTest(unittest.TestCase):
    def test_schema(self):
        doc = synthetic_agent_result()
        self.assertEqual(schema_check.validate(doc), [])
        doc["parameters"]["agent"] = "yes"
        self.assertIn("$.parameters.agent: expected boolean, got str", schema_check.validate(doc))

    def test_breakdowns_and_statistics(self):
        doc = synthetic_agent_result()
        self.assertEqual(_breakdown_for(doc, "sbx"), AGENT_BREAKDOWNS[0])
        self.assertEqual(_breakdown_for(doc, "qemu"), ["start_to_init", "init_to_agent"])
        stats = {(s["vmm"], s["figure"]): s for s in doc["statistics"]}
        self.assertEqual(stats[("sbx", "init_to_agent")]["median"], 301.5)
        self.assertEqual(stats[("sbx", "guest_init_to_agent_start")]["median"], 188.5)
        self.assertNotIn(("qemu", "guest_init"), stats)
        ratio = next(r for r in doc["ratios"] if r["vmm"] == "qemu" and r["figure"] == "start_to_agent")
        self.assertGreater(ratio["ratio"], 1.0)


def _fake_sbx_vmm(path: Path) -> Path:
    path.write_text(f"#!{sys.executable}\n" + (BENCH / "sbxbench" / "testdata" / "fake_sbx_vmm.py")
                    .read_text().split("\n", 1)[1])
    path.chmod(0o755)
    return path


class RunBootAgentTest(unittest.TestCase):
    RUNS, WARMUP = 3, 1

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self.tmp.name)
        self.fake = _fake_sbx_vmm(self.dir / "fake_sbx_vmm")
        (self.dir / "bzImage").write_bytes(BZIMAGE)
        (self.dir / "config").write_text("CONFIG_VIRTIO_MMIO=y\n")  # images/build's, beside the kernel
        (self.dir / "minimal").write_bytes(b"not an image")

    def tearDown(self):
        self.tmp.cleanup()

    def run_bench(self, vmm, env=None):
        out = self.dir / "agent.json"
        cmd = [sys.executable, str(BENCH / "sbx-bench"), "run", "boot", "--agent", "--vmm", vmm,
               "--kernel", str(self.dir / "bzImage"), "--initrd", str(self.dir / "minimal"),
               "--runs", str(self.RUNS), "--warmup", str(self.WARMUP), "--timeout", "30", "--bootstrap", "200",
               "--out", str(out)]
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, **(env or {})}, timeout=180, check=False)
        return done, (json.loads(out.read_text()) if out.exists() else None), out

    def test_end_to_end(self):
        done, doc, out = self.run_bench(f"sbx={self.fake},sbx@b={self.fake},qemu=/no/such/qemu,kvmtool=/no/lkvm,"
                                        "cloud-hypervisor=/no/ch")
        self.assertEqual(done.returncode, 0, done.stdout)
        self.assertEqual(schema_check.validate(doc), [])
        p = doc["parameters"]
        self.assertTrue(p["agent"])
        self.assertEqual(p["cmdline"].split()[-1], "sbx.token=<token>")
        self.assertEqual(doc["breakdowns"], AGENT_BREAKDOWNS)
        self.assertEqual([f["id"] for f in doc["figures"]], [f.id for f in AGENT_FIGURES]
                         + ["guest_init", "guest_agent_start", "guest_init_to_agent_start"])

        status = {v["name"]: v for v in doc["vmms"]}
        self.assertEqual((status["sbx"]["status"], status["sbx@b"]["status"]), ("ok", "ok"))
        self.assertIn("<token>", " ".join(status["sbx"]["argv"]))
        self.assertRegex(status["sbx@b"]["argv"][-1], r"^cid=3,uds=.*/sbx@b\.vsock$")
        self.assertIn("health polled every 5 ms", status["sbx"]["notes"][-1])
        self.assertEqual(status["qemu"]["status"], "n/a")  # no such binary, or no /dev/vhost-vsock here
        self.assertIn("virtio-pci on x86", status["kvmtool"]["reason"])
        self.assertEqual(status["cloud-hypervisor"]["reason"], CLOUD_HYPERVISOR_AGENT)

        runs = doc["runs"]
        self.assertTrue(all(r["ok"] for r in runs), [r["error"] for r in runs])
        self.assertEqual(len(runs), 2 * (self.WARMUP + self.RUNS))
        self.assertEqual([r["vmm"] for r in runs if r["round"] == 1], ["sbx@b", "sbx"])  # rotated
        for r in runs:
            f = r["figures"]
            self.assertNotIn("start_to_exit", f)
            self.assertGreaterEqual(f["start_to_agent"], 50.0)  # the fake's agent listens 50 ms after its start
            self.assertAlmostEqual(f["init_to_agent"], f["start_to_agent"] - f["start_to_init"])
            self.assertEqual((f["vmm_setup"], f["kernel_to_init"]), (12.0, 28.5))
            self.assertEqual((f["guest_init"], f["guest_agent_start"]), (81.25, 92.5))  # the first agent_start
        stats = {(s["vmm"], s["figure"]) for s in doc["statistics"]}
        self.assertIn(("sbx@b", "init_to_agent"), stats)
        self.assertTrue(any(r["vmm"] == "sbx@b" and r["figure"] == "start_to_agent" for r in doc["ratios"]))
        self.assertRegex(done.stdout, r"run 1/3 sbx +init +[0-9.]+ ms, agent +[0-9.]+ ms")

        report = subprocess.run([sys.executable, str(BENCH / "sbx-bench"), "report", str(out), "--out",
                                 str(self.dir / "rep")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, timeout=120, check=False)
        self.assertEqual(report.returncode, 0, report.stdout)
        text = (self.dir / "rep" / "report.md").read_text()
        self.assertIn("| sbx-vmm | init_to_agent (ms) | **", text)
        if HAVE_MATPLOTLIB:
            self.assertTrue((self.dir / "rep" / "boot-1-breakdown.png").exists())
            self.assertTrue((self.dir / "rep" / "boot-1-start_to_agent.png").exists())

    def test_an_image_without_the_agent_fails_and_says_why(self):
        done, doc, _ = self.run_bench(f"sbx={self.fake}", env={"FAKE_SBX_NO_AGENT": "1"})
        self.assertEqual(done.returncode, 1, done.stdout)
        self.assertEqual(schema_check.validate(doc), [])
        sbx = doc["vmms"][0]
        self.assertEqual(sbx["status"], "failed")
        self.assertIn("agent: the VMM exited before the agent answered", sbx["reason"])
        self.assertIn("--agent needs the minimal image", sbx["reason"])


def _init_text() -> str:
    return (ROOT / "images" / "initramfs" / "init").read_text()


class InitClockTest(unittest.TestCase):
    """images/initramfs/init's guest clock: sbx_now, on stand-ins for
    /proc/timer_list and /proc/uptime, with busybox's sh (the guest's)."""

    def sbx_now(self, timer_list: str | None, uptime: str | None) -> str:
        function = re.search(r"^sbx_now\(\) \{\n.*?^\}\n", _init_text(), re.S | re.M).group(0)
        with tempfile.TemporaryDirectory() as tmp:
            paths = {}
            for name, text in (("timer_list", timer_list), ("uptime", uptime)):
                paths[name] = os.path.join(tmp, name)
                if text is not None:
                    Path(paths[name]).write_text(text)
            script = (function.replace("/proc/timer_list", paths["timer_list"]).replace("/proc/uptime", paths["uptime"])
                      + 'sbx_now; echo "SBX-TS: init $sbx_ms"\n')
            done = subprocess.run([BUSYBOX, "sh", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, timeout=30, check=True)
        self.assertEqual(done.stderr, "")
        return done.stdout.strip()

    @unittest.skipUnless(BUSYBOX, "busybox is not installed (Debian: busybox-static)")
    def test_sources(self):
        header = "Timer List Version: v0.10\nHRTIMER_MAX_CLOCK_BASES: 8\nnow at 1234567890 nsecs\n\ncpu: 0\n"
        self.assertEqual(self.sbx_now(header, "99.00 1.00\n"), "SBX-TS: init 1234.567")
        self.assertEqual(self.sbx_now("now at 5 nsecs\n", "1.05 0.50\n"), "SBX-TS: init 1050.000")
        self.assertEqual(self.sbx_now(None, "0.08 0.01\n"), "SBX-TS: init 80.000")
        self.assertEqual(self.sbx_now(None, None), "SBX-TS: init")
        self.assertEqual(guest_timestamps(self.sbx_now(header, None) + "\r\n"), {"guest_init": 1234.567})

    def test_order(self):
        # The clock is read right after the proc mount, before the boot-timer write; printed after the markers.
        text = _init_text()
        proc, clock = text.index("mount -t proc"), text.index("\nsbx_now\n")
        self.assertLess(proc, clock)
        self.assertLess(clock, text.index("mount -t devtmpfs"))
        self.assertLess(clock, text.index("devmem 0xd0000000"))
        self.assertLess(text.index('echo "SBX-MEM-KB: $mem_kb"'), text.index('echo "SBX-TS: init $init_ms"'))
        start = text.index('"$AGENT" &')
        self.assertLess(text.rindex("sbx_now", 0, start), start)
        self.assertLess(start, text.index('echo "SBX-TS: agent_start $sbx_ms"'))


if __name__ == "__main__":
    unittest.main()
