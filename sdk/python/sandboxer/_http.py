"""HTTP/1.1 to sbxd over http.client: hosts, retries, streamed bodies."""

from __future__ import annotations

import email.utils
import http.client
import json
import random
import socket
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from ._version import __version__
from .errors import SandboxerConnectionError, SandboxerError, error_from_body

DEFAULT_HOST = "unix:/run/sandboxer/sbxd.sock"

Query = Mapping[str, Any] | Sequence[tuple[str, Any]] | None
Body = bytes | Iterable[bytes] | None


class UnixHTTPConnection(http.client.HTTPConnection):
    """An HTTPConnection to a Unix socket path."""

    def __init__(self, socket_path: str, timeout: float | None = None) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = socket_path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.socket_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


@dataclass(frozen=True)
class Host:
    """Where sbxd is: ``unix:PATH``, ``http://HOST:PORT`` or ``https://HOST:PORT``."""

    scheme: str  # "unix", "http" or "https"
    address: str  # the socket path, or the host name
    port: int = 0

    @classmethod
    def parse(cls, text: str) -> "Host":
        """Parses SBX_HOST's syntax (IPv6 addresses in brackets)."""
        if text.startswith("unix:"):
            path = text[len("unix:"):]
            if path.startswith("//"):  # unix:///run/... as some tools write it
                path = path[2:]
            if not path:
                raise ValueError(f"bad host {text!r}: no socket path")
            return cls("unix", path)
        parsed = urllib.parse.urlsplit(text)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"bad host {text!r}: want unix:PATH or http://HOST:PORT")
        if parsed.path not in ("", "/") or parsed.query:
            raise ValueError(f"bad host {text!r}: no path allowed")
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        return cls(parsed.scheme, parsed.hostname, port)

    @property
    def is_tcp(self) -> bool:
        return self.scheme != "unix"

    def __str__(self) -> str:
        if self.scheme == "unix":
            return f"unix:{self.address}"
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{self.scheme}://{host}:{self.port}"

    def connection(self, timeout: float | None) -> http.client.HTTPConnection:
        if self.scheme == "unix":
            return UnixHTTPConnection(self.address, timeout=timeout)
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.address, self.port, timeout=timeout)
        return http.client.HTTPConnection(self.address, self.port, timeout=timeout)


@dataclass
class RetryPolicy:
    """Retries on 429 and 5xx (but 501 and 507) and on failed connections.

    A request is re-sent only when that is safe: GET, HEAD, PUT and DELETE,
    a POST marked idempotent, or one carrying an Idempotency-Key; a failure
    to connect (nothing sent) is retried for any request. The wait is
    ``Retry-After`` when the answer has one (refused when above
    ``max_retry_after``), else ``backoff * 2**n`` (with jitter, at most
    ``max_backoff``).
    """

    max_retries: int = 4
    backoff: float = 0.5
    max_backoff: float = 30.0
    max_retry_after: float = 120.0
    retry_statuses: frozenset[int] = frozenset({429, 500, 502, 503, 504})

    def delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return retry_after
        base = min(self.max_backoff, self.backoff * float(2 ** attempt))
        return float(base * random.uniform(0.5, 1.0))


def quote(segment: str) -> str:
    """A path segment, percent-encoded."""
    return urllib.parse.quote(str(segment), safe="")


def encode_query(query: Query) -> str:
    if not query:
        return ""
    items = query.items() if isinstance(query, Mapping) else query
    pairs = []
    for key, value in items:
        if value is None:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        pairs.append((key, str(value)))
    if not pairs:
        return ""
    return "?" + urllib.parse.urlencode(pairs, quote_via=urllib.parse.quote, safe="/")


def parse_retry_after(value: str | None) -> float | None:
    """Retry-After as seconds: a number, or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class _BodyError(Exception):
    """An error of the caller's body iterator (a local file), not of the connection."""


def _guarded(body: Iterable[bytes]) -> Iterator[bytes]:
    try:
        yield from body
    except Exception as e:
        raise _BodyError() from e


class Response:
    """An open response whose body is read as it comes (never whole)."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> None:
        self._conn = conn
        self._resp = resp
        self.status = resp.status
        self.headers = resp.headers

    @property
    def request_id(self) -> str | None:
        return self.headers.get("X-Request-Id")

    def read(self, amount: int = 65536) -> bytes:
        """Up to ``amount`` bytes; b"" at the end. A cut-short body raises."""
        try:
            return self._resp.read1(amount) if amount > 0 else self._resp.read()
        except (OSError, http.client.HTTPException) as e:
            raise SandboxerConnectionError(f"the response broke off: {e!r}",
                                           request_id=self.request_id) from e

    def readline(self, limit: int = -1) -> bytes:
        try:
            return self._resp.readline(limit)
        except (OSError, http.client.HTTPException) as e:
            raise SandboxerConnectionError(f"the response broke off: {e!r}",
                                           request_id=self.request_id) from e

    def iter_chunks(self, size: int = 65536) -> Iterator[bytes]:
        while True:
            chunk = self.read(size)
            if not chunk:
                return
            yield chunk

    def iter_lines(self) -> Iterator[bytes]:
        """Lines without their end; a last line without one too."""
        while True:
            line = self.readline()
            if not line:
                return
            yield line.rstrip(b"\r\n") if line.endswith(b"\n") else line

    def read_all(self) -> bytes:
        return b"".join(self.iter_chunks())

    def json(self) -> dict[str, Any]:
        raw = self.read_all()
        try:
            value = json.loads(raw.decode("utf-8")) if raw else {}
        except ValueError as e:
            raise SandboxerError(f"sbxd answered something other than JSON: {raw[:200]!r}",
                                 code="bad_response", status=self.status,
                                 request_id=self.request_id) from e
        if not isinstance(value, dict):
            raise SandboxerError("sbxd answered JSON that is not an object", code="bad_response",
                                 status=self.status, request_id=self.request_id)
        return value

    def close(self) -> None:
        try:
            self._resp.close()
        finally:
            self._conn.close()

    def __enter__(self) -> "Response":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Transport:
    """Sends requests to one sbxd, one connection per request."""

    def __init__(self, host: Host, api_key: str | None, timeout: float | None,
                 retry: RetryPolicy, sleep: Callable[[float], None] = time.sleep) -> None:
        self.host = host
        self.api_key = api_key
        self.timeout = timeout
        self.retry = retry
        self._sleep = sleep

    def _headers(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        headers = {"User-Agent": f"sandboxer-python/{__version__}", "Accept": "*/*"}
        if self.host.is_tcp and self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        if extra:
            headers.update(extra)
        return headers

    def open(self, method: str, path: str, *, query: Query = None, json_body: Any = None,
             body: Body = None, headers: Mapping[str, str] | None = None,
             idempotent: bool | None = None, timeout: float | None | bool = True,
             stream_timeout: float | None | bool = True) -> Response:
        """Sends a request and returns the open response once its status is 2xx.

        An error status raises its typed error (after any retries).
        ``timeout`` applies until the headers came (True: the client's),
        ``stream_timeout`` to each read of the body after that.
        """
        url = path + encode_query(query)
        hdrs = self._headers(headers)
        payload: Body = body
        if json_body is not None:
            payload = json.dumps(json_body, separators=(",", ":")).encode()
            hdrs["Content-Type"] = "application/json"
        replayable_body = payload is None or isinstance(payload, (bytes, bytearray))
        if idempotent is None:
            idempotent = method in ("GET", "HEAD", "PUT", "DELETE") or any(
                k.lower() == "idempotency-key" for k in hdrs)
        may_resend = idempotent and replayable_body
        request_timeout = self.timeout if timeout is True else timeout
        attempt = 0
        while True:
            conn = self.host.connection(request_timeout)
            try:
                conn.connect()
            except OSError as e:
                conn.close()
                if attempt < self.retry.max_retries:
                    self._sleep(self.retry.delay(attempt, None))
                    attempt += 1
                    continue
                raise SandboxerConnectionError(f"cannot connect to sbxd at {self.host}: {e}") from e
            try:
                if payload is None or isinstance(payload, (bytes, bytearray)):
                    conn.request(method, url, body=payload, headers=hdrs)
                else:
                    conn.request(method, url, body=_guarded(payload), headers=hdrs, encode_chunked=True)
                resp = conn.getresponse()
            except _BodyError as e:
                conn.close()
                assert e.__cause__ is not None
                raise e.__cause__
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                if may_resend and attempt < self.retry.max_retries:
                    self._sleep(self.retry.delay(attempt, None))
                    attempt += 1
                    continue
                raise SandboxerConnectionError(f"{method} {path} to {self.host} failed: {e!r}") from e
            response = Response(conn, resp)
            if resp.status < 400:
                if stream_timeout is not True and conn.sock is not None:
                    conn.sock.settimeout(stream_timeout)
                return response
            try:
                raw = response._resp.read(1 << 20)
            except (OSError, http.client.HTTPException):
                raw = b""
            finally:
                response.close()
            retry_after = parse_retry_after(resp.headers.get("Retry-After"))
            err = error_from_body(resp.status, raw, resp.headers.get("X-Request-Id"), retry_after)
            if (may_resend and resp.status in self.retry.retry_statuses
                    and attempt < self.retry.max_retries
                    and (err.retry_after is None or err.retry_after <= self.retry.max_retry_after)):
                self._sleep(self.retry.delay(attempt, err.retry_after))
                attempt += 1
                continue
            raise err

    def call(self, method: str, path: str, *, query: Query = None, json_body: Any = None,
             body: Body = None, headers: Mapping[str, str] | None = None,
             idempotent: bool | None = None, timeout: float | None | bool = True) -> dict[str, Any]:
        """A request whose answer is one JSON object."""
        with self.open(method, path, query=query, json_body=json_body, body=body,
                       headers=headers, idempotent=idempotent, timeout=timeout) as resp:
            return resp.json()
