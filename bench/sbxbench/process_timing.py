"""Start one process and time when markers appear in its output.

The clock is time.monotonic(), started just before the process is spawned;
stdout and stderr are one stream (the VMMs log on stderr, the guest console
is on stdout), read as it arrives, so a marker's time is when the host could
first have seen it.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from dataclasses import dataclass, field
from typing import Callable

OUTPUT_KEEP = 4 << 20  # bytes of output kept per run (head and tail)


@dataclass
class WatchedRun:
    """What one process did: seconds from its start to each marker and to its
    exit (None if it was stopped or timed out), its status and its output."""
    marker_s: dict[str, float] = field(default_factory=dict)
    exit_s: float | None = None
    status: int | None = None
    timed_out: bool = False
    stopped_at_marker: bool = False
    output: bytes = b""
    spawn_error: str | None = None

    def text(self) -> str:
        return self.output.decode(errors="replace")


def _keep(output: bytes) -> bytes:
    if len(output) <= OUTPUT_KEEP:
        return output
    half = OUTPUT_KEEP // 2
    return output[:half] + b"\n[... output cut ...]\n" + output[-half:]


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 5 s, to the process group we created."""
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 30.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_watched(argv: list[str], *, markers: dict[str, bytes], timeout: float,
                stop_at: str | None = None, env: dict[str, str] | None = None,
                on_marker: Callable[[str], None] | None = None,
                on_spawn: Callable[[subprocess.Popen, float], None] | None = None) -> WatchedRun:
    """Runs argv (stdin /dev/null, its own process group, `env` added to
    this environment) until it exits or `timeout` seconds pass; with
    `stop_at`, stops it once that marker appeared. `on_marker(name)` is
    called when a marker first appears, in the reading loop: it must not
    block (start a thread for anything that waits on the guest).
    `on_spawn(proc, start)` is called once the process runs, with the
    time.monotonic() its times count from; it must not block either (the
    boot workload's agent watch starts its thread there)."""
    run = WatchedRun()
    start = time.monotonic()
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, **env} if env else None)
    except OSError as e:
        run.spawn_error = f"cannot start {argv[0]}: {e.strerror or e}"
        return run
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    buffer = b""
    searched_from = 0
    longest = max((len(m) for m in markers.values()), default=1)
    try:
        if on_spawn is not None:
            on_spawn(proc, start)
        while True:
            left = timeout - (time.monotonic() - start)
            if left <= 0:
                run.timed_out = True
                break
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            now = time.monotonic() - start
            if not chunk:
                break
            buffer += chunk
            window = buffer[max(0, searched_from - longest):]
            for name, marker in markers.items():
                if name not in run.marker_s and marker in window:
                    run.marker_s[name] = now
                    if on_marker is not None:
                        on_marker(name)
            searched_from = len(buffer)
            if stop_at is not None and stop_at in run.marker_s:
                run.stopped_at_marker = True
                break
    except BaseException:  # e.g. Ctrl-C: leave no VMM behind
        _stop(proc)
        raise
    finally:
        if proc.poll() is None and (run.timed_out or run.stopped_at_marker):
            _stop(proc)
        try:
            run.status = proc.wait(timeout=max(timeout - (time.monotonic() - start), 1.0))
        except subprocess.TimeoutExpired:  # closed its output but went on running
            run.timed_out = True
            _stop(proc)
            try:
                run.status = proc.wait(timeout=30)
            except subprocess.TimeoutExpired:  # survives SIGKILL (stuck in the kernel): go on without it
                run.status = None
        if not (run.timed_out or run.stopped_at_marker):
            run.exit_s = time.monotonic() - start
        # Whatever is still buffered in the pipe belongs to the output.
        os.set_blocking(fd, False)
        try:
            while rest := os.read(fd, 65536):
                buffer += rest
        except OSError:
            pass
        proc.stdout.close()
    run.output = _keep(buffer)
    return run
