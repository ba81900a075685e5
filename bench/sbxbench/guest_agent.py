"""The guest side shared by the snapshot workloads (restore, snapshot, fork),
exec and boot --agent: the agent's token, reaching sbx-agent over vsock
(and timing a booting guest's agent: AgentWatch), filling guest memory,
the sbx-vmm control socket, VMM processes and their logs. Ported from
bench/snapshot_runner.py.

Relies on tests/guest: agent_frames (docs/agent-protocol.md, "Frames"),
vmm_control.request (docs/vmm-control.md) and vmrun (Machine.argv for the
guest's command lines, Machine.diagnose for a stuck VMM).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

_GUEST_TESTS = str(Path(__file__).resolve().parents[2] / "tests" / "guest")
if _GUEST_TESTS not in sys.path:
    sys.path.append(_GUEST_TESTS)
import agent_frames  # noqa: E402
import vmm_control  # noqa: E402
import vmrun  # noqa: E402

AGENT_PORT = 52  # docs/agent-protocol.md, "Transport"
POLL_S = 0.005   # snapshot_runner.py polled health every 5 ms
STOP_GRACE_S = 30  # AgentWatch: after the guest's reboot request, before SIGKILL
VM_SET_UP = r"VM set up in ([0-9.]+) ms"  # vmm/vm.cpp
LAZY_LOADED = r"fully loaded from the snapshot ([0-9.]+) ms"  # snapshot/lazy_memory.cpp


def new_token() -> str:
    """A fresh agent token (docs/agent-protocol.md, "Session": sbx.token=)."""
    return os.urandom(16).hex()


def token_cmdline(cmdline: str, token: str) -> str:
    """The kernel command line with the agent's token, as the agent reads it."""
    return f"{cmdline} sbx.token={token}"


def redacted(argv: list[str], token: str | None) -> list[str]:
    """argv for a results file, the agent's token as `<token>`."""
    return [a.replace(token, "<token>") for a in argv] if token else list(argv)


class Endpoint:
    """The host end of one guest's vsock. sbx-vmm: the hybrid convention on
    its Unix socket (`CONNECT <port>\\n`, answer `OK <port>\\n`, as
    vmrun.VsockHost); QEMU vhost-vsock: AF_VSOCK to the guest's CID (each
    fork has its own, so vmrun's fixed CID 3 is not enough)."""

    def __init__(self, *, uds: str | None = None, cid: int | None = None):
        if (uds is None) == (cid is None):
            raise ValueError("an endpoint is a Unix socket or a CID")
        self.uds, self.cid = uds, cid

    def __repr__(self) -> str:
        return f"Endpoint(uds={self.uds!r})" if self.uds else f"Endpoint(cid={self.cid})"

    def describe(self, port: int = AGENT_PORT) -> str:
        """How the host reaches the guest's `port`, for the results' notes."""
        if self.uds:
            return f"its hybrid vsock Unix socket (CONNECT {port}, answered OK)"
        return f"AF_VSOCK to CID {self.cid} port {port} (vhost-vsock)"

    def _connect_once(self, port: int) -> socket.socket:
        if self.cid is not None:
            return vmrun.connect_vsock(self.cid, port)
        return vmrun.connect_hybrid(self.uds, port)

    def connect(self, port: int, wait: float = 30.0) -> socket.socket:
        """Connects to the guest's port, retrying for `wait` seconds."""
        return vmrun.connect_retrying(lambda: self._connect_once(port), wait)


class Agent:
    """Requests to sbx-agent (docs/agent-protocol.md: hello, then `health`
    or `exec`), one connection per request, or several on one `session`."""

    def __init__(self, endpoint: Endpoint, token: str):
        self.endpoint, self.token = endpoint, token

    def connect(self, wait: float = 0.0, timeout: float = 600) -> socket.socket:
        """A connection to the agent's port, before its hello."""
        sock = self.endpoint.connect(AGENT_PORT, wait=wait)
        sock.settimeout(timeout)
        return sock

    def hello(self, sock: socket.socket) -> None:
        """docs/agent-protocol.md, "Session" 1; raises ConnectionError when refused."""
        agent_frames.send_frame(sock, {"type": "hello", "version": 1, "token": self.token})
        reply = agent_frames.recv_message(sock)
        if reply.get("type") != "hello":
            raise ConnectionError(f"hello refused: {reply}")

    def session(self, wait: float = 0.0, timeout: float = 600) -> socket.socket:
        """An authenticated connection: connect + hello."""
        sock = self.connect(wait, timeout)
        try:
            self.hello(sock)
        except BaseException:
            sock.close()
            raise
        return sock

    def health(self, wait: float = 0.0, timeout: float = 600) -> dict:
        with self.session(wait, timeout) as sock:
            agent_frames.send_frame(sock, {"type": "request", "op": "health"})
            return agent_frames.recv_message(sock)

    def shell(self, command: str, timeout: float = 600) -> None:
        """`sh -c COMMAND` through exec; raises unless it exits 0."""
        with self.session(30, timeout) as sock:
            final = exec_argv(sock, ["sh", "-c", command])
            if final.get("code") != 0:
                raise RuntimeError(f"{command!r}: {final}")

    def wait(self, deadline_s: float = 600, poll_s: float = POLL_S,
             alive: Callable[[], bool] | None = None) -> float:
        """Seconds until the agent first answers health. `alive` (the VMM
        still runs) ends the wait early when the VMM has exited."""
        start = time.monotonic()
        seen: dict[str, int] = {}  # what each failed attempt met, for the error
        while time.monotonic() - start < deadline_s:
            try:
                # An accepted connection whose hello is never answered must
                # not eat the whole deadline.
                self.health(timeout=30)
                return time.monotonic() - start
            except (OSError, ConnectionError) as e:
                what = f"{type(e).__name__}: {e}"
                seen[what] = seen.get(what, 0) + 1
                if alive is not None and not alive():
                    raise RuntimeError(f"the VMM exited before the agent answered ({_summary(seen)})")
                time.sleep(poll_s)
        raise TimeoutError(f"the agent never answered within {deadline_s:.0f} s ({_summary(seen)})")

    def reboot(self, force: bool = False) -> None:
        """`reboot` in the guest (`force`: `reboot -f`, at once, without
        /init's orderly stop); the VMM exits (reboot=k; QEMU -no-reboot)."""
        try:
            self.shell("reboot -f" if force else "reboot", timeout=60)
        except (OSError, ConnectionError, RuntimeError):
            pass  # the guest can go down before the exit frame reaches us


class AgentWatch:
    """The agent of a guest that is booting, timed from its VMM's process
    start (the boot workload's --agent). In a thread of its own, started by
    process_timing.run_watched's `on_spawn` beside the reader of the VMM's
    output: `health` every `poll_s` from the start (Agent.wait) until the
    first answer, at most `deadline_s` after the start; then the guest is
    stopped: an exec of `reboot -f` (the VMM exits at the guest's reboot),
    and SIGKILL to the VMM's process group if it still runs `grace_s`
    later. `answered_s`: seconds from the start to the first answer (None:
    none, `error` says why); `killed`: the VMM had to be killed."""

    def __init__(self, agent: Agent, deadline_s: float, *, poll_s: float = POLL_S,
                 grace_s: float = STOP_GRACE_S):
        self.agent, self.deadline_s, self.poll_s, self.grace_s = agent, deadline_s, poll_s, grace_s
        self.answered_s: float | None = None
        self.error: str | None = None
        self.killed = False
        self._thread: threading.Thread | None = None

    def on_spawn(self, proc: subprocess.Popen, start: float) -> None:
        self._thread = threading.Thread(target=self._watch, args=(proc, start), name="agent-watch", daemon=True)
        self._thread.start()

    def _watch(self, proc: subprocess.Popen, start: float) -> None:
        def alive() -> bool:
            return proc.poll() is None
        try:
            self.agent.wait(max(0.0, self.deadline_s - (time.monotonic() - start)), self.poll_s, alive=alive)
            self.answered_s = time.monotonic() - start
        except Exception as e:  # reported as the boot's error, never a crash
            self.error = str(e) or type(e).__name__
            return
        self.agent.reboot(force=True)
        stop_by = time.monotonic() + self.grace_s
        while alive() and time.monotonic() < stop_by:
            time.sleep(0.02)
        if alive():
            self.killed = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def join(self, timeout: float = 90) -> bool:
        """Waits for the thread; False when it is still running."""
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()


def exec_argv(sock: socket.socket, argv: list[str]) -> dict:
    """One attached exec on an authenticated session (docs/agent-protocol.md,
    "exec"): its final message, `exit` or `error`; `started` and the output
    frames before it are skipped."""
    agent_frames.send_frame(sock, {"type": "request", "op": "exec", "argv": argv})
    while True:
        message = agent_frames.recv_message(sock)
        if message.get("type") in ("exit", "error"):
            return message


def _summary(seen: dict[str, int]) -> str:
    return "; ".join(f"{what} x{n}" for what, n in list(seen.items())[-4:]) or "no attempt"


def fill(agent: Agent, mib: int) -> None:
    """FILL_MIB of incompressible data in a tmpfs: the snapshot's worst case."""
    if mib > 0:
        agent.shell(f"mkdir -p /fill && mount -t tmpfs -o size={mib + 64}m tmpfs /fill && "
                    f"head -c {mib << 20} /dev/urandom > /fill/data")


def touch_fill(agent: Agent) -> None:
    """Reads the filled data back: every page of it touched in this guest.
    md5sum reads it into a buffer; `cat > /dev/null` may splice(2) tmpfs
    pages to /dev/null without the CPU ever reading them."""
    agent.shell("md5sum /fill/data > /dev/null", timeout=1200)


def control(path: str, message: dict) -> dict:
    """One request to sbx-vmm's control socket (docs/vmm-control.md); raises
    on an error reply."""
    reply = vmm_control.request(path, message)
    if not reply.get("ok"):
        raise RuntimeError(f"control {message.get('op')}: {reply}")
    return reply


def search_log(text: str, pattern: str) -> float | None:
    m = re.search(pattern, text)
    return float(m.group(1)) if m else None


def wait_for_line(path: str, pattern: str, timeout: float) -> float | None:
    """The number in the first match of `pattern` in the file, waiting up to `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with open(path, errors="replace") as f:
                value = search_log(f.read(), pattern)
            if value is not None:
                return value
        except FileNotFoundError:
            pass
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


def spawn(argv: list[str], log_path: str, cpus: tuple[int, ...] | None = None) -> subprocess.Popen:
    """Starts a VMM with its stdout and stderr in log_path, in a process
    group of its own (so a QEMU's `exec:cat` goes with it), on `cpus` if
    given: the calling thread takes that affinity for the fork (a child
    inherits it, sched_setaffinity(2)) and gets its own back, so no
    preexec_fn runs beside other threads."""
    previous = os.sched_getaffinity(0) if cpus else None
    with open(log_path, "wb") as log:
        try:
            if cpus:
                os.sched_setaffinity(0, cpus)
            return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        finally:
            if previous:
                os.sched_setaffinity(0, previous)


def stop(proc: subprocess.Popen, timeout: float = 120) -> int:
    """Waits for the process to exit (snapshot_runner.py's 120 s), then kills its group."""
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        kill(proc)
        return proc.wait()


def kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            pass


def parse_smaps_rollup(text: str) -> dict[str, int]:
    """{field: KiB} of /proc/PID/smaps_rollup (proc(5)): Rss, Pss, ..."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0].endswith(":") and parts[2] == "kB":
            out[parts[0][:-1]] = int(parts[1])
    return out


def memory_kib(pid: int) -> dict[str, int]:
    """Rss and Pss of one process in KiB (empty when unreadable)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return parse_smaps_rollup(f.read())
    except OSError:
        return {}


def log_tails(paths: list[str], log: Callable[[str], None], lines: int = 25) -> None:
    for path in paths:
        try:
            with open(path, errors="replace") as f:
                for line in f.read().splitlines()[-lines:]:
                    log(f"  | {os.path.basename(path)}: {line}")
        except OSError as e:
            log(f"  | {path}: {e.strerror}")


def diagnose_sbx(proc: subprocess.Popen, *, kernel: str, image: str, sbx_vmm: str,
                 control_path: str | None, log: Callable[[str], None]) -> None:
    """A restored sbx-vmm that never answered: where its threads wait and
    the guest's vCPUs (vmrun's diagnosis: HOST-DIAG lines, the control
    socket's `diagnose` op), then SIGKILL."""
    if proc.poll() is not None:
        return
    machine = vmrun.Machine("sbx", kernel, image, sbx_vmm=sbx_vmm, control=control_path)
    machine.proc = proc
    try:
        machine.diagnose()
    except Exception as e:  # a diagnosis must not hide the failure itself
        log(f"  diagnosis failed: {type(e).__name__}: {e}")
    kill(proc)
    if proc.poll() is None:
        log("DIAG: sbx-vmm has not exited 30 s after SIGKILL")
