"""Exec streams (NDJSON) and detached processes (status, SSE output, stdin, signals)."""

from __future__ import annotations

import base64
import json
import time
from typing import TYPE_CHECKING, Any, Iterator

from ._http import Response, quote
from .errors import SandboxerConnectionError, SandboxerError, error_for_code
from .models import ExecEvent, ExecResult, OutputChunk, ProcessExit, ProcessOutput, ProcessStatus, StdinWrite

if TYPE_CHECKING:
    from .sandbox import Sandbox

_STDIN_PIECE = 512 * 1024  # bytes per stdin request (the JSON body is at most 1 MiB)


def _b64(text: Any) -> bytes:
    return base64.b64decode(text) if isinstance(text, str) and text else b""


def _mid_stream_error(fields: Any, request_id: str | None) -> SandboxerError:
    if not isinstance(fields, dict):
        fields = {}
    return error_for_code(str(fields.get("code") or "agent_unavailable"),
                          str(fields.get("message") or "the stream failed"),
                          status=fields.get("status") if isinstance(fields.get("status"), int) else None,
                          request_id=fields.get("requestId") or request_id, body=fields)


class ExecStream:
    """The events of an attached exec as they come; iterate it, or call ``result()``.

    Closing it (or leaving its ``with``) before the exit ends the connection,
    which kills the command's process group.
    """

    def __init__(self, response: Response) -> None:
        self._response = response
        self._lines = response.iter_lines()
        self.pid: int | None = None
        self.exit: ExecEvent | None = None
        self._done = False

    def __iter__(self) -> Iterator[ExecEvent]:
        return self

    def __next__(self) -> ExecEvent:
        if self._done:
            raise StopIteration
        for line in self._lines:
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as e:
                self.close()
                raise SandboxerError(f"bad exec line: {line[:200]!r}", code="bad_response") from e
            kind = obj.get("type")
            if kind == "start":
                self.pid = obj.get("pid")
                return ExecEvent("start", pid=self.pid)
            if kind in ("stdout", "stderr"):
                return ExecEvent(kind, data=_b64(obj.get("data")))
            if kind == "exit":
                self.exit = ExecEvent("exit", exit_code=obj.get("exitCode"), signal=obj.get("signal"),
                                      timed_out=bool(obj.get("timedOut")), pid=self.pid)
                self.close()
                return self.exit
            if kind == "error":
                self.close()
                raise _mid_stream_error(obj, self._response.request_id)
            # An unknown type: skipped (a newer sbxd may add some).
        self.close()
        raise SandboxerConnectionError("the exec stream ended without an exit",
                                       request_id=self._response.request_id)

    def result(self, text: bool = False) -> ExecResult:
        """Reads to the end and gathers stdout and stderr."""
        out: list[bytes] = []
        err: list[bytes] = []
        for event in self:
            if event.type == "stdout":
                out.append(event.data)
            elif event.type == "stderr":
                err.append(event.data)
        assert self.exit is not None
        stdout: bytes | str = b"".join(out)
        stderr: bytes | str = b"".join(err)
        if text:
            stdout = stdout.decode("utf-8", "replace")  # type: ignore[union-attr]
            stderr = stderr.decode("utf-8", "replace")  # type: ignore[union-attr]
        return ExecResult(exit_code=self.exit.exit_code, signal=self.exit.signal,
                          timed_out=self.exit.timed_out, stdout=stdout, stderr=stderr, pid=self.pid)

    def close(self) -> None:
        self._done = True
        self._response.close()

    def __enter__(self) -> "ExecStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _sse_events(response: Response) -> Iterator[tuple[str, str, str | None]]:
    """(event, data, id) of a text/event-stream, one at a time."""
    event: str = "message"
    last_id: str | None = None
    data: list[str] = []
    for raw in response.iter_lines():
        line = raw.decode("utf-8", "replace")
        if not line:
            if data or event != "message":
                yield event, "\n".join(data), last_id
            event, last_id, data = "message", None, []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
        elif name == "id":
            last_id = value
    if data:
        yield event, "\n".join(data), last_id


class OutputStream:
    """A detached process's output from a byte offset, as ``OutputChunk``s.

    ``offset`` is where the next chunk starts (reattach from it), ``exit``
    is set once the process ended, ``running`` when ``follow=False`` ended
    the stream while it runs on. With ``reconnect`` (tries in a row), a
    connection that breaks is reopened from ``offset`` (nothing lost or repeated).
    """

    def __init__(self, process: "Process", offset: int, follow: bool, reconnect: int) -> None:
        self._process = process
        self.offset = offset
        self._follow = follow
        self._reconnect_budget = reconnect
        self._reconnect = reconnect  # left until the next chunk arrives
        self._response: Response | None = None
        self._events: Iterator[tuple[str, str, str | None]] | None = None
        self.exit: ProcessExit | None = None
        self.running: bool = False
        self._done = False

    def _open(self) -> None:
        self._response = self._process._open_output(self.offset, self._follow)
        self._events = _sse_events(self._response)

    def __iter__(self) -> Iterator[OutputChunk]:
        return self

    def __next__(self) -> OutputChunk:
        while not self._done:
            if self._events is None:
                self._open()
            assert self._events is not None and self._response is not None
            request_id = self._response.request_id
            try:
                item = next(self._events, None)
            except SandboxerConnectionError:
                if self._reconnect <= 0:
                    self.close()
                    raise
                self._reconnect -= 1
                self._drop()
                time.sleep(0.2)
                continue
            if item is None:
                if self._reconnect > 0:
                    self._reconnect -= 1
                    self._drop()
                    continue
                self.close()
                raise SandboxerConnectionError("the output stream ended without an exit",
                                               request_id=request_id)
            event, data, event_id = item
            if event == "output":
                chunk = _b64(data)
                end = int(event_id) if event_id else self.offset + len(chunk)
                out = OutputChunk(offset=end - len(chunk), end=end, data=chunk)
                self.offset = end
                self._reconnect = self._reconnect_budget
                return out
            if event == "exit":
                fields = json.loads(data or "{}")
                self.exit = ProcessExit(fields.get("exitCode"), fields.get("signal"))
                self.close()
                raise StopIteration
            if event == "running":
                fields = json.loads(data or "{}")
                self.running = True
                if isinstance(fields.get("outputBytes"), int):
                    self.offset = max(self.offset, fields["outputBytes"])
                self.close()
                raise StopIteration
            if event == "error":
                self.close()
                raise _mid_stream_error(json.loads(data or "{}"), request_id)
        raise StopIteration

    def _drop(self) -> None:
        if self._response is not None:
            self._response.close()
        self._response = None
        self._events = None

    def close(self) -> None:
        self._done = True
        self._drop()

    def __enter__(self) -> "OutputStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Process:
    """A detached process in a sandbox (``Sandbox.start``)."""

    def __init__(self, sandbox: "Sandbox", id: str, pid: int | None = None) -> None:
        self.sandbox = sandbox
        self.id = id
        self.pid = pid

    def __repr__(self) -> str:
        return f"Process(id={self.id!r}, pid={self.pid!r}, sandbox={self.sandbox.id!r})"

    @property
    def _path(self) -> str:
        return f"/v1/sandboxes/{quote(self.sandbox.id)}/processes/{quote(self.id)}"

    def status(self) -> ProcessStatus:
        """Whether it runs, its exit, output size and tail."""
        d = self.sandbox._client._transport.call("GET", self._path)["process"]
        return ProcessStatus(id=d.get("id", self.id), pid=d.get("pid"), command=list(d.get("command") or []),
                             running=bool(d.get("running")), exit_code=d.get("exitCode"),
                             signal=d.get("signal"), timed_out=bool(d.get("timedOut")),
                             started_at_ms=d.get("startedAtMs"), output_bytes=int(d.get("outputBytes") or 0),
                             tail=_b64(d.get("tail")), raw=d)

    def _open_output(self, offset: int, follow: bool) -> Response:
        query: dict[str, Any] = {"offset": offset}
        if not follow:
            query["follow"] = "false"
        return self.sandbox._client._transport.open("GET", self._path + "/output", query=query,
                                                    headers={"Accept": "text/event-stream"},
                                                    stream_timeout=None)

    def attach(self, offset: int = 0, *, reconnect: int = 3) -> OutputStream:
        """The output from byte ``offset`` until the process exits, as it comes."""
        return OutputStream(self, offset, True, reconnect)

    def output(self, offset: int = 0, follow: bool = False) -> ProcessOutput:
        """The output from ``offset``: what is there now (``follow=False``) or to the exit."""
        stream = OutputStream(self, offset, follow, 0 if not follow else 3)
        parts = [chunk.data for chunk in stream]
        exit_ = stream.exit
        return ProcessOutput(offset=offset, end=stream.offset, data=b"".join(parts),
                             running=exit_ is None,
                             exit_code=exit_.exit_code if exit_ else None,
                             signal=exit_.signal if exit_ else None)

    def wait(self, timeout: float | None = None, interval: float = 0.2) -> ProcessStatus:
        """Polls ``status()`` until the process ended; TimeoutError after ``timeout`` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = self.status()
            if not status.running:
                return status
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"process {self.id} still runs after {timeout} s")
            time.sleep(interval)

    def write_stdin(self, data: bytes | str = b"", eof: bool = False, *, wait: bool = True,
                    timeout: float | None = 60.0) -> StdinWrite:
        """Writes to the stdin (a process started with ``stdin_open=True``).

        With ``wait`` (the default) it sends again what the pipe had no room
        for until all of it went (or ``timeout`` s passed: TimeoutError), then
        the ``eof``; without, one request, whose ``written`` may be short.
        """
        buf = data.encode() if isinstance(data, str) else bytes(data)
        transport = self.sandbox._client._transport
        total, is_open = 0, True
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.01
        while True:
            piece = buf[total:total + _STDIN_PIECE]
            last = total + len(piece) >= len(buf)
            body: dict[str, Any] = {"data": base64.b64encode(piece).decode()}
            if eof and last:
                body["eof"] = True
            d = transport.call("POST", self._path + "/stdin", json_body=body, idempotent=False)
            written = int(d.get("written") or 0)
            total += written
            is_open = bool(d.get("open"))
            if not wait or not is_open:
                return StdinWrite(total, is_open)
            if total >= len(buf) and (not eof or written == len(piece)):
                return StdinWrite(total, is_open)
            if written == 0:
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(f"process {self.id} took {total} of {len(buf)} bytes of stdin")
                time.sleep(pause)
                pause = min(pause * 2, 0.5)
            else:
                pause = 0.01

    def close_stdin(self) -> StdinWrite:
        """Closes the stdin (an EOF for the process)."""
        return self.write_stdin(b"", eof=True)

    def signal(self, signal: str | int = "TERM") -> bool:
        """Sends a signal to its process group; False when it had exited."""
        d = self.sandbox._client._transport.call("POST", self._path + "/signal",
                                                 json_body={"signal": signal}, idempotent=False)
        return bool(d.get("delivered"))

    def kill(self) -> bool:
        """SIGKILL to its process group."""
        return self.signal("KILL")
