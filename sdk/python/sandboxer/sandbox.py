"""A sandbox: lifecycle, exec, detached processes, files, hosted ports, the desktop."""

from __future__ import annotations

import base64
import datetime
from typing import TYPE_CHECKING, Any, Iterator, Literal, Mapping, Sequence, overload

from ._http import quote
from .desktop import Desktop
from .errors import CommandError, NotFound
from .files import Files
from .models import ExecResult, HostedPort
from .process import ExecStream, Process

if TYPE_CHECKING:
    from .client import Sandboxer, Snapshot


def _exec_body(command: str | Sequence[str], env: Mapping[str, str] | None, cwd: str | None,
               user: str | int | None, timeout: float | None) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if isinstance(command, str):
        body["shell"] = command
    else:
        body["command"] = [str(c) for c in command]
    if env:
        body["env"] = dict(env)
    if cwd is not None:
        body["cwd"] = cwd
    if user is not None:
        body["user"] = str(user)
    if timeout:
        body["timeoutMs"] = max(1, int(timeout * 1000))
    return body


class Sandbox:
    """One sandbox. Its fields are as last fetched (``refresh()`` fetches again).

    Leaving ``with Sandbox.create(...) as sb:`` deletes it.
    """

    def __init__(self, client: "Sandboxer", data: Mapping[str, Any]) -> None:
        self._client = client
        self.data: dict[str, Any] = dict(data)
        self.files = Files(self)
        self.desktop = Desktop(self)
        #: From the create (or fork) reply: warnings, whether it was replayed,
        #: and for a sandbox made from a snapshot, memory_restored/start_reason.
        self.warnings: list[str] = []
        self.replayed: bool = False
        self.memory_restored: bool | None = None
        self.start_reason: str | None = None

    # -- creating and finding ------------------------------------------------------------

    @classmethod
    def create(cls, *, client: "Sandboxer | None" = None, size: str | None = None, cpus: int | None = None,
               memory_mib: int | None = None, disk_gib: int | None = None, from_: str | None = None,
               labels: Mapping[str, str] | None = None, env: Mapping[str, str] | None = None,
               no_env: bool = False, ttl: str | int | datetime.timedelta | None = None,
               idle_minutes: int | None = None, no_auto_stop: bool = False, cold: bool = False,
               egress: str | Sequence[str] | None = None, egress_allow: Sequence[str] | None = None,
               idempotency_key: str | None = None) -> "Sandbox":
        """Creates a sandbox (see ``Sandboxer.create``); ``client`` defaults to one from
        SBX_HOST and SBX_API_KEY."""
        from .client import Sandboxer

        return (client or Sandboxer()).create(
            size=size, cpus=cpus, memory_mib=memory_mib, disk_gib=disk_gib, from_=from_, labels=labels,
            env=env, no_env=no_env, ttl=ttl, idle_minutes=idle_minutes, no_auto_stop=no_auto_stop,
            cold=cold, egress=egress, egress_allow=egress_allow, idempotency_key=idempotency_key)

    @classmethod
    def get(cls, id: str, *, client: "Sandboxer | None" = None) -> "Sandbox":
        """The sandbox with this id (NotFound otherwise)."""
        from .client import Sandboxer

        return (client or Sandboxer()).get(id)

    # -- fields --------------------------------------------------------------------------

    @property
    def id(self) -> str:
        return str(self.data["id"])

    @property
    def name(self) -> str | None:
        return self.data.get("name")

    @property
    def state(self) -> str:
        """creating, running, stopping, stopped, paused, crashed or deleting."""
        return str(self.data.get("state"))

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.data.get("labels") or {})

    @property
    def from_(self) -> str | None:
        """The image or named snapshot it was made from."""
        return self.data.get("from")

    @property
    def size(self) -> str | None:
        return self.data.get("size")

    @property
    def cpus(self) -> int | None:
        return self.data.get("cpus")

    @property
    def memory_mib(self) -> int | None:
        return self.data.get("memoryMib")

    @property
    def disk_gib(self) -> int | None:
        return self.data.get("diskGib")

    @property
    def env_names(self) -> list[str]:
        return list(self.data.get("envNames") or [])

    @property
    def created_at(self) -> str | None:
        return self.data.get("createdAt")

    @property
    def started_at(self) -> str | None:
        return self.data.get("startedAt")

    @property
    def last_activity_at(self) -> str | None:
        return self.data.get("lastActivityAt")

    @property
    def auto_stop_at(self) -> str | None:
        return self.data.get("autoStopAt")

    @property
    def ttl_seconds(self) -> int | None:
        return self.data.get("ttlSeconds")

    @property
    def idle_minutes(self) -> int | None:
        return self.data.get("idleMinutes")

    @property
    def egress(self) -> str | None:
        return self.data.get("egress")

    @property
    def egress_allow(self) -> list[str]:
        return list(self.data.get("egressAllow") or [])

    @property
    def network(self) -> dict[str, Any] | None:
        return self.data.get("network")

    def __repr__(self) -> str:
        return f"Sandbox(id={self.data.get('id')!r}, state={self.data.get('state')!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sandbox) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    @property
    def _path(self) -> str:
        return f"/v1/sandboxes/{quote(self.id)}"

    def _update(self, reply: Mapping[str, Any]) -> "Sandbox":
        if isinstance(reply.get("sandbox"), dict):
            self.data = dict(reply["sandbox"])
        return self

    def refresh(self) -> "Sandbox":
        """Fetches its fields again."""
        return self._update(self._client._transport.call("GET", self._path))

    # -- lifecycle -----------------------------------------------------------------------

    def stop(self, memory: bool = True) -> "Sandbox":
        """Stops it, with its memory (a resume carries on where it was) or disk-only."""
        return self._update(self._client._transport.call("POST", self._path + "/stop",
                                                         json_body={"memory": memory}))

    def resume(self, size: str | None = None) -> "Sandbox":
        """Starts it again; a new ``size`` means a cold boot. Sets ``memory_restored``."""
        reply = self._client._transport.call("POST", self._path + "/resume",
                                             json_body={"size": size} if size else {})
        self.memory_restored = reply.get("memoryRestored")
        self.start_reason = reply.get("resumeReason")
        return self._update(reply)

    def fork(self, count: int = 1, memory: bool = True,
             idempotency_key: str | None = None) -> list["Sandbox"]:
        """Children of this sandbox (sharing its memory copy-on-write unless ``memory=False``).

        An Idempotency-Key (a new uuid4 unless given) makes retries safe.
        """
        return self._client._fork(self, count, memory, idempotency_key)

    def snapshot(self, name: str) -> "Snapshot":
        """Saves it as the named snapshot (``from_=name`` creates sandboxes from it)."""
        from .client import Snapshot

        reply = self._client._transport.call("POST", self._path + "/snapshot", json_body={"name": name})
        return Snapshot(self._client, reply["snapshot"])

    def delete(self) -> None:
        """Deletes it, its VMM and its disk."""
        self._client._transport.call("DELETE", self._path)
        self.data["state"] = "deleted"

    def set_ttl(self, seconds: int | None = None, *, no_auto_stop: bool = False) -> "Sandbox":
        """A new auto-stop ``seconds`` from now (None: its own ttl again), or none."""
        body: dict[str, Any] = {"noAutoStop": True} if no_auto_stop else {}
        if seconds is not None:
            body["ttl"] = int(seconds)
        return self._update(self._client._transport.call("POST", self._path + "/ttl", json_body=body,
                                                         idempotent=True))

    def set_idle(self, minutes: int | None) -> "Sandbox":
        """The idle pause after ``minutes`` without activity (0 or None: off)."""
        return self._update(self._client._transport.call("POST", self._path + "/idle",
                                                         json_body={"idleMinutes": minutes or 0},
                                                         idempotent=True))

    def set_egress(self, egress: str | Sequence[str]) -> "Sandbox":
        """``internet``, ``deny-all``, or a list of IPv4 networks (an allow list)."""
        body: dict[str, Any] = ({"egress": egress} if isinstance(egress, str)
                                else {"egress": "allow-list", "egressAllow": list(egress)})
        return self._update(self._client._transport.call("POST", self._path + "/egress", json_body=body,
                                                         idempotent=True))

    def history(self) -> list[dict[str, Any]]:
        """Every exec, oldest first."""
        return list(self._client._transport.call("GET", self._path + "/history").get("history") or [])

    def logs(self, offset: int | None = None, tail: int | None = None) -> bytes:
        """The guest's serial console from ``offset`` (or its last ``tail`` bytes)."""
        with self._client._transport.open("GET", self._path + "/logs",
                                          query={"offset": offset, "tail": tail}) as resp:
            return resp.read_all()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.delete()
        except NotFound:
            pass

    # -- exec ----------------------------------------------------------------------------

    def exec_stream(self, command: str | Sequence[str], *, stdin: bytes | str | None = None,
                    env: Mapping[str, str] | None = None, cwd: str | None = None,
                    user: str | int | None = None, timeout: float | None = None) -> ExecStream:
        """Runs a command attached and yields its events (start, stdout, stderr, exit) as
        they come. A str ``command`` is a ``/bin/sh -c`` line, a sequence an argv.
        ``timeout`` (seconds) SIGKILLs the process group then."""
        body = _exec_body(command, env, cwd, user, timeout)
        if stdin is not None:
            data = stdin.encode() if isinstance(stdin, str) else bytes(stdin)
            body["stdin"] = base64.b64encode(data).decode()
        resp = self._client._transport.open("POST", self._path + "/exec", json_body=body,
                                            headers={"Accept": "application/x-ndjson"},
                                            stream_timeout=None)
        return ExecStream(resp)

    @overload
    def exec(self, command: str | Sequence[str], *, stdin: bytes | str | None = ...,
             env: Mapping[str, str] | None = ..., cwd: str | None = ..., user: str | int | None = ...,
             timeout: float | None = ..., text: Literal[False] = ..., check: bool = ...) -> ExecResult: ...

    @overload
    def exec(self, command: str | Sequence[str], *, stdin: bytes | str | None = ...,
             env: Mapping[str, str] | None = ..., cwd: str | None = ..., user: str | int | None = ...,
             timeout: float | None = ..., text: Literal[True], check: bool = ...) -> ExecResult: ...

    def exec(self, command: str | Sequence[str], *, stdin: bytes | str | None = None,
             env: Mapping[str, str] | None = None, cwd: str | None = None,
             user: str | int | None = None, timeout: float | None = None,
             text: bool = False, check: bool = False) -> ExecResult:
        """Runs a command to its end: exit code, signal, timed_out, stdout and stderr
        (bytes, or str with ``text=True``). ``check`` raises CommandError unless it exits 0."""
        with self.exec_stream(command, stdin=stdin, env=env, cwd=cwd, user=user, timeout=timeout) as s:
            result = s.result(text=text)
        if check and result.exit_code != 0:
            raise CommandError(f"{command!r} exited {result.exit_code} (signal {result.signal})", result)
        return result

    def start(self, command: str | Sequence[str], *, env: Mapping[str, str] | None = None,
              cwd: str | None = None, user: str | int | None = None, timeout: float | None = None,
              stdin_open: bool = False) -> Process:
        """Starts a detached process, whose output sbxd keeps (the last 16 MiB); with
        ``stdin_open`` its stdin is a pipe for ``Process.write_stdin``."""
        body = _exec_body(command, env, cwd, user, timeout)
        body["detach"] = True
        if stdin_open:
            body["stdinOpen"] = True
        reply = self._client._transport.call("POST", self._path + "/exec", json_body=body)
        p = reply["process"]
        return Process(self, p["id"], p.get("pid"))

    exec_detached = start

    def process(self, id: str) -> Process:
        """A detached process by its id."""
        return Process(self, id)

    def processes(self) -> list[Process]:
        """Its detached processes."""
        reply = self._client._transport.call("GET", self._path + "/processes")
        return [Process(self, p["id"], p.get("pid")) for p in reply.get("processes") or []]

    # -- hosted ports --------------------------------------------------------------------

    def host_port(self, port: int, public: bool = False, localhost: bool = False) -> HostedPort:
        """Serves ``port`` over HTTPS by sbxd's proxy; ``.url`` (``str()``) is its URL,
        ``.token_url`` opens a private one."""
        reply = self._client._transport.call("POST", self._path + "/ports",
                                             json_body={"port": port, "public": public,
                                                        "localhost": localhost}, idempotent=True)
        return HostedPort.from_json(reply["hostedPort"])

    def hosted_ports(self) -> list[HostedPort]:
        """Its hosted ports."""
        reply = self._client._transport.call("GET", self._path + "/ports")
        return [HostedPort.from_json(p) for p in reply.get("hostedPorts") or []]

    def unhost(self, port: int) -> None:
        """Stops serving ``port``."""
        self._client._transport.call("DELETE", f"{self._path}/ports/{int(port)}")


def _iter_sandboxes(client: "Sandboxer", items: Any) -> Iterator[Sandbox]:
    for item in items or []:
        yield Sandbox(client, item)
