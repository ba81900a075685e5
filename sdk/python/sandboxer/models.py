"""Plain data the SDK returns: exec results and events, process output, files, ports, API keys, the desktop."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass
class ExecResult:
    """An attached exec's outcome. ``stdout``/``stderr`` are bytes, or str with ``text=True``."""

    exit_code: int | None
    signal: int | None
    timed_out: bool
    stdout: bytes | str
    stderr: bytes | str
    pid: int | None = None

    @property
    def ok(self) -> bool:
        """True when the command exited 0."""
        return self.exit_code == 0


@dataclass
class ExecEvent:
    """One event of a streamed exec.

    ``type`` is ``start`` (``pid``), ``stdout`` or ``stderr`` (``data``), or
    ``exit`` (``exit_code``, ``signal``, ``timed_out``).
    """

    type: Literal["start", "stdout", "stderr", "exit"]
    data: bytes = b""
    pid: int | None = None
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False


@dataclass
class OutputChunk:
    """Bytes of a detached process's output: ``data`` is ``[offset, end)``.

    Reattaching from ``end`` repeats and loses nothing.
    """

    offset: int
    end: int
    data: bytes


@dataclass
class ProcessExit:
    """How a detached process ended."""

    exit_code: int | None
    signal: int | None


@dataclass
class ProcessOutput:
    """``Process.output()``: the bytes from ``offset`` to ``end`` and what came after.

    ``running`` is true when the process runs on (poll again from ``end``).
    """

    offset: int
    end: int
    data: bytes
    running: bool
    exit_code: int | None = None
    signal: int | None = None


@dataclass
class ProcessStatus:
    """``GET …/processes/{proc}``."""

    id: str
    pid: int | None
    command: list[str]
    running: bool
    exit_code: int | None
    signal: int | None
    timed_out: bool
    started_at_ms: int | None
    output_bytes: int
    tail: bytes = b""
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class StdinWrite:
    """``write_stdin``: bytes taken, and whether the stdin is still open."""

    written: int
    open: bool


@dataclass
class FileEntry:
    """An entry of ``files.list()``."""

    name: str
    type: str  # file, dir, symlink, other
    size: int
    mode: int
    mtime: int
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class FileStat:
    """``files.stat()``; ``target`` for a symlink (never followed)."""

    path: str
    type: str
    size: int
    mode: int
    mtime: int
    uid: int | None = None
    gid: int | None = None
    target: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def is_dir(self) -> bool:
        return self.type == "dir"

    @property
    def is_file(self) -> bool:
        return self.type == "file"


@dataclass
class TarResult:
    """What a tree upload or download moved."""

    bytes: int
    entries: int
    skipped: int = 0


@dataclass
class HostedPort:
    """A sandbox port served over HTTPS; ``str()`` is its URL."""

    sandbox_id: str
    port: int
    public: bool
    localhost: bool
    url: str | None
    token: str | None = None
    token_url: str | None = None
    created_at: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    def __str__(self) -> str:
        return self.url or ""

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "HostedPort":
        return cls(sandbox_id=d.get("sandboxId", ""), port=int(d.get("port", 0)),
                   public=bool(d.get("public")), localhost=bool(d.get("localhost")),
                   url=d.get("url"), token=d.get("token"), token_url=d.get("tokenUrl"),
                   created_at=d.get("createdAt"), raw=d)


@dataclass
class ApiKey:
    """An API key as sbxd lists it (``Sandboxer.keys()``): never its secret.

    ``sandbox_id`` is None for a host-wide key; ``expires_at`` None for one
    that never expires.
    """

    id: str
    name: str
    created_at: str | None
    sandbox_id: str | None = None
    read_only: bool = False
    expires_at: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "ApiKey":
        return cls(**_api_key_fields(d))


@dataclass
class NewKey(ApiKey):
    """``Sandboxer.create_key()``: the key and its ``secret`` (``sbxk_…``).

    sbxd shows the secret in this reply only (it keeps its SHA-256), so
    keep it now; ``repr()`` leaves it out.
    """

    secret: str = field(default="", repr=False)

    @classmethod
    def from_reply(cls, reply: dict[str, Any]) -> "NewKey":
        return cls(**_api_key_fields(reply.get("key") or {}), secret=str(reply.get("secret") or ""))


def _api_key_fields(d: dict[str, Any]) -> dict[str, Any]:
    return {"id": str(d.get("id", "")), "name": str(d.get("name") or ""), "created_at": d.get("createdAt"),
            "sandbox_id": d.get("sandboxId"), "read_only": bool(d.get("readOnly")),
            "expires_at": d.get("expiresAt"), "raw": d}


@dataclass
class DesktopInfo:
    """A sandbox's desktop (``sandbox.desktop.start()`` / ``.status()``).

    ``url`` opens it in a browser with mouse and keyboard, ``view_only_url``
    only shows it; both None when sbxd serves no links (and ``url`` for a
    read-only key). ``display``, ``width``, ``height`` and ``vnc_port`` are
    None while no X server runs; ``started`` (from ``start()`` only) says
    whether this call started it.
    """

    running: bool
    session_running: bool
    display: int | None = None
    width: int | None = None
    height: int | None = None
    vnc_port: int | None = None
    url: str | None = None
    view_only_url: str | None = None
    started: bool | None = None
    warnings: list[str] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_reply(cls, reply: dict[str, Any]) -> "DesktopInfo":
        d = reply.get("desktop") or {}
        return cls(running=bool(d.get("running")), session_running=bool(d.get("sessionRunning")),
                   display=d.get("display"), width=d.get("width"), height=d.get("height"),
                   vnc_port=d.get("vncPort"), url=d.get("url"), view_only_url=d.get("viewOnlyUrl"),
                   started=d.get("started"), warnings=list(reply.get("warnings") or []), raw=d)
