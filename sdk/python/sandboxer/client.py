"""The client: ``Sandboxer(host=..., api_key=...)``."""

from __future__ import annotations

import builtins
import datetime
import os
import uuid
from typing import Any, Callable, Iterable, Mapping, Sequence

from ._http import DEFAULT_HOST, Host, RetryPolicy, Transport, quote
from .models import ApiKey, HostedPort, NewKey
from .sandbox import Sandbox, _iter_sandboxes


def _labels_query(labels: Mapping[str, str] | Iterable[str] | str | None) -> str | None:
    if labels is None:
        return None
    if isinstance(labels, str):
        return labels
    if isinstance(labels, Mapping):
        return ",".join(f"{k}={v}" for k, v in labels.items()) or None
    return ",".join(labels) or None


def _states_query(state: str | Iterable[str] | None) -> str | None:
    if state is None or isinstance(state, str):
        return state
    return ",".join(state) or None


def _ttl_text(ttl: str | int | float | datetime.timedelta) -> str:
    if isinstance(ttl, str):
        return ttl
    seconds = ttl.total_seconds() if isinstance(ttl, datetime.timedelta) else ttl
    return f"{int(seconds)}s"


class Snapshot:
    """A named snapshot (``Sandbox.snapshot``); ``from_=name`` creates sandboxes from it."""

    def __init__(self, client: "Sandboxer", data: Mapping[str, Any]) -> None:
        self._client = client
        self.data: dict[str, Any] = dict(data)

    @property
    def name(self) -> str:
        return str(self.data["name"])

    @property
    def from_(self) -> str | None:
        """The sandbox it was taken from (which may be deleted since)."""
        return self.data.get("from")

    @property
    def image(self) -> str | None:
        return self.data.get("image")

    @property
    def memory(self) -> bool:
        return bool(self.data.get("memory"))

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
    def size_bytes(self) -> int | None:
        return self.data.get("sizeBytes")

    @property
    def created_at(self) -> str | None:
        return self.data.get("createdAt")

    def delete(self) -> None:
        """Deletes the snapshot (sandboxes made from it keep their disks)."""
        self._client.delete_snapshot(self.name)

    def __repr__(self) -> str:
        return f"Snapshot(name={self.data.get('name')!r}, memory={self.data.get('memory')!r})"


class Sandboxer:
    """A client of one sbxd.

    ``host``: ``unix:PATH`` or ``http://HOST:PORT`` (default ``$SBX_HOST``,
    else ``$SANDBOXER_API_URL`` inside a sandbox, else
    ``unix:/run/sandboxer/sbxd.sock``). ``api_key``: sent as a Bearer
    token on TCP only (default ``$SBX_API_KEY``, or ``$SANDBOXER_TOKEN``
    with ``$SANDBOXER_API_URL``). ``timeout``: seconds a read may wait
    (streams excepted). ``max_retries``, ``backoff``: see RetryPolicy.
    """

    def __init__(self, host: str | None = None, api_key: str | None = None, *,
                 timeout: float | None = 300.0, max_retries: int = 4, backoff: float = 0.5,
                 max_backoff: float = 30.0, max_retry_after: float = 120.0,
                 sleep: Callable[[float], None] | None = None) -> None:
        env_key = os.environ.get("SBX_API_KEY")
        if host is None:
            host = os.environ.get("SBX_HOST")
            if not host and os.environ.get("SANDBOXER_API_URL"):
                host = os.environ["SANDBOXER_API_URL"]
                env_key = env_key or os.environ.get("SANDBOXER_TOKEN")
            host = host or DEFAULT_HOST
        self.host = Host.parse(host)
        self.api_key = api_key if api_key is not None else env_key
        self.retry = RetryPolicy(max_retries=max_retries, backoff=backoff, max_backoff=max_backoff,
                                 max_retry_after=max_retry_after)
        kwargs = {"sleep": sleep} if sleep is not None else {}
        self._transport = Transport(self.host, self.api_key, timeout, self.retry, **kwargs)

    def __repr__(self) -> str:
        return f"Sandboxer(host={str(self.host)!r})"

    # -- host ----------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """``GET /v1/health``: host, version, uptimeSeconds."""
        return self._transport.call("GET", "/v1/health")

    def limits(self) -> dict[str, Any]:
        """The admission limits and current counts."""
        return dict(self._transport.call("GET", "/v1/limits").get("limits") or {})

    def events(self, after: int | None = None) -> list[dict[str, Any]]:
        """Up to 1000 events after the id ``after``, oldest first."""
        return list(self._transport.call("GET", "/v1/events", query={"after": after}).get("events") or [])

    def ca_certificate(self) -> str:
        """sbxd's CA (PEM), which signs the hosted ports' certificate."""
        return str(self._transport.call("GET", "/v1/ca").get("certificate"))

    # -- sandboxes -----------------------------------------------------------------------

    def create(self, *, size: str | None = None, cpus: int | None = None, memory_mib: int | None = None,
               disk_gib: int | None = None, from_: str | None = None,
               labels: Mapping[str, str] | None = None, env: Mapping[str, str] | None = None,
               no_env: bool = False, ttl: str | int | datetime.timedelta | None = None,
               idle_minutes: int | None = None, no_auto_stop: bool = False, cold: bool = False,
               egress: str | Sequence[str] | None = None, egress_allow: Sequence[str] | None = None,
               idempotency_key: str | None = None) -> Sandbox:
        """Creates a sandbox and returns it once its agent answers.

        ``size``: small, default, large or xlarge (``cpus``/``memory_mib``
        override it). ``from_``: an image or named snapshot. ``ttl``: ``"2h30m"``
        or seconds. ``egress``: internet, deny-all, allow-list, or a list of
        networks (an allow list). Sent with an Idempotency-Key (a new uuid4
        unless given), so that a retry gives the same sandbox.
        """
        body: dict[str, Any] = {}
        for key, value in (("size", size), ("cpus", cpus), ("memoryMib", memory_mib), ("diskGib", disk_gib),
                           ("from", from_), ("idleMinutes", idle_minutes)):
            if value is not None:
                body[key] = value
        if labels:
            body["labels"] = dict(labels)
        if env:
            body["env"] = dict(env)
        if no_env:
            body["noEnv"] = True
        if ttl is not None:
            body["ttl"] = _ttl_text(ttl)
        if no_auto_stop:
            body["noAutoStop"] = True
        if cold:
            body["cold"] = True
        if isinstance(egress, str):
            body["egress"] = egress
        elif egress is not None:
            body["egress"] = "allow-list"
            body["egressAllow"] = list(egress)
        if egress_allow is not None:
            body["egressAllow"] = list(egress_allow)
        key = idempotency_key or str(uuid.uuid4())
        reply = self._transport.call("POST", "/v1/sandboxes", json_body=body,
                                     headers={"Idempotency-Key": key})
        sandbox = Sandbox(self, reply["sandbox"])
        sandbox.warnings = list(reply.get("warnings") or [])
        sandbox.replayed = bool(reply.get("replayed"))
        sandbox.memory_restored = reply.get("memoryRestored")
        sandbox.start_reason = reply.get("startReason")
        return sandbox

    def get(self, id: str) -> Sandbox:
        """The sandbox with this id (NotFound otherwise)."""
        return Sandbox(self, self._transport.call("GET", f"/v1/sandboxes/{quote(id)}")["sandbox"])

    def list(self, labels: Mapping[str, str] | Iterable[str] | None = None,
             state: str | Iterable[str] | None = None) -> builtins.list[Sandbox]:
        """Sandboxes with every label given and in any of the states given."""
        reply = self._transport.call("GET", "/v1/sandboxes",
                                     query={"labels": _labels_query(labels), "state": _states_query(state)})
        return list(_iter_sandboxes(self, reply.get("sandboxes")))

    def find(self, labels: Mapping[str, str] | Iterable[str] | None = None,
             state: str | Iterable[str] | None = None) -> Sandbox | None:
        """The first sandbox ``list`` gives for these selectors, or None."""
        found = self.list(labels=labels, state=state)
        return found[0] if found else None

    def delete_where(self, labels: Mapping[str, str] | Iterable[str],
                     state: str | Iterable[str] | None = None, dry_run: bool = False) -> dict[str, Any]:
        """Deletes every sandbox with these labels: ``{"deleted": [ids], "failed": [...]}``."""
        query = {"labels": _labels_query(labels), "state": _states_query(state),
                 "dryRun": "true" if dry_run else None}
        if not query["labels"]:
            raise ValueError("delete_where needs labels")
        return self._transport.call("DELETE", "/v1/sandboxes", query=query, idempotent=dry_run)

    def _fork(self, parent: Sandbox, count: int, memory: bool, idempotency_key: str | None) -> builtins.list[Sandbox]:
        key = idempotency_key or str(uuid.uuid4())
        reply = self._transport.call("POST", f"/v1/sandboxes/{quote(parent.id)}/fork",
                                     json_body={"count": count, "memory": memory},
                                     headers={"Idempotency-Key": key})
        children = list(_iter_sandboxes(self, reply.get("sandboxes")))
        for child in children:
            child.replayed = bool(reply.get("replayed"))
        return children

    # -- snapshots and ports -------------------------------------------------------------

    def snapshots(self) -> builtins.list[Snapshot]:
        """Every named snapshot, oldest first."""
        return [Snapshot(self, s) for s in self._transport.call("GET", "/v1/snapshots").get("snapshots") or []]

    def snapshot(self, name: str) -> Snapshot:
        """The named snapshot (NotFound otherwise)."""
        return Snapshot(self, self._transport.call("GET", f"/v1/snapshots/{quote(name)}")["snapshot"])

    def delete_snapshot(self, name: str) -> None:
        """Deletes the named snapshot."""
        self._transport.call("DELETE", f"/v1/snapshots/{quote(name)}")

    def hosted_ports(self) -> builtins.list[HostedPort]:
        """Every sandbox's hosted ports (host-wide keys)."""
        return [HostedPort.from_json(p) for p in self._transport.call("GET", "/v1/ports").get("hostedPorts") or []]

    # -- API keys (host-wide callers only; a read-only key may only list) ----------------

    def create_key(self, name: str | None = None, sandbox_id: str | None = None, read_only: bool = False,
                   expires_in_seconds: int | datetime.timedelta | None = None) -> NewKey:
        """Makes an API key: host-wide, or scoped to ``sandbox_id`` (NotFound if
        there is no such sandbox); ``read_only``: GET and HEAD only;
        ``expires_in_seconds``: 1 s to 10 years (None: never).

        The returned key's ``secret`` is shown this once. Never re-sent: a
        retry could make a second key.
        """
        body: dict[str, Any] = {}
        if name is not None:
            body["name"] = name
        if sandbox_id is not None:
            body["sandboxId"] = sandbox_id
        if read_only:
            body["readOnly"] = True
        if expires_in_seconds is not None:
            seconds = (expires_in_seconds.total_seconds() if isinstance(expires_in_seconds, datetime.timedelta)
                       else expires_in_seconds)
            body["expiresInSeconds"] = int(seconds)
        return NewKey.from_reply(self._transport.call("POST", "/v1/keys", json_body=body))

    def keys(self) -> builtins.list[ApiKey]:
        """Every API key, oldest first (sandboxes' own keys too), without secrets."""
        return [ApiKey.from_json(k) for k in self._transport.call("GET", "/v1/keys").get("keys") or []]

    def delete_key(self, key_id: str) -> None:
        """Revokes the key with this id (``key_…``): the next request with it is Unauthorized."""
        self._transport.call("DELETE", f"/v1/keys/{quote(key_id)}")
