"""Typed errors: one class per API error code (docs/api.md, "Errors")."""

from __future__ import annotations

import json
from typing import Any, Mapping

__all__ = [
    "SandboxerError", "SandboxerConnectionError", "CommandError",
    "BadRequest", "InvalidArgument", "Unauthorized", "Forbidden", "NotFound",
    "MethodNotAllowed", "InvalidState", "IdempotencyConflict", "AlreadyExists",
    "PayloadTooLarge", "HeadersTooLarge", "RateLimited", "LimitReached",
    "InternalError", "Unimplemented", "NoReadyMachine", "AgentUnavailable",
    "CapacityExceeded", "InsufficientStorage", "error_from_body", "error_for_code",
]


class SandboxerError(Exception):
    """Base of every error the SDK raises.

    ``code`` is the API's stable code (``not_found``, ``invalid_state``...),
    ``status`` the HTTP status (0 when no response came), ``message`` the
    server's text, ``request_id`` the request's ``X-Request-Id`` (or None).
    """

    code: str = "error"
    status: int = 0

    def __init__(self, message: str, *, code: str | None = None, status: int | None = None,
                 request_id: str | None = None, retry_after: float | None = None,
                 body: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        self.request_id = request_id
        self.retry_after = retry_after
        self.body: dict[str, Any] = dict(body or {})

    def __str__(self) -> str:
        where = f" [{self.request_id}]" if self.request_id else ""
        return f"{self.code} ({self.status}): {self.message}{where}"


class SandboxerConnectionError(SandboxerError, ConnectionError):
    """sbxd could not be reached, or a connection broke (a stream cut short)."""

    code = "connection_failed"
    status = 0


class CommandError(SandboxerError):
    """``exec(..., check=True)`` of a command that did not exit 0."""

    code = "command_failed"
    status = 0

    def __init__(self, message: str, result: Any) -> None:
        super().__init__(message)
        self.result = result


class BadRequest(SandboxerError):
    """400 ``bad_request``: the request could not be read."""
    code, status = "bad_request", 400


class InvalidArgument(SandboxerError):
    """400 ``invalid_argument``: a field, header or parameter is wrong."""
    code, status = "invalid_argument", 400


class Unauthorized(SandboxerError):
    """401 ``unauthorized``: no key, or a malformed, unknown or expired one."""
    code, status = "unauthorized", 401


class Forbidden(SandboxerError):
    """403 ``forbidden``: a scoped or read-only key outside its reach."""
    code, status = "forbidden", 403


class NotFound(SandboxerError):
    """404 ``not_found``: no such route, sandbox, snapshot, process or path."""
    code, status = "not_found", 404


class MethodNotAllowed(SandboxerError):
    """405 ``method_not_allowed``."""
    code, status = "method_not_allowed", 405


class InvalidState(SandboxerError):
    """409 ``invalid_state``: the sandbox's state does not allow this."""
    code, status = "invalid_state", 409


class IdempotencyConflict(SandboxerError):
    """409 ``idempotency_conflict``: an Idempotency-Key reused with another body."""
    code, status = "idempotency_conflict", 409


class AlreadyExists(SandboxerError):
    """409 ``already_exists``: e.g. a snapshot name in use."""
    code, status = "already_exists", 409


class PayloadTooLarge(SandboxerError):
    """413 ``payload_too_large``: a JSON body over 1 MiB."""
    code, status = "payload_too_large", 413


class HeadersTooLarge(SandboxerError):
    """431 ``headers_too_large``."""
    code, status = "headers_too_large", 431


class RateLimited(SandboxerError):
    """429 ``rate_limited``: too many starts per minute; see ``retry_after``."""
    code, status = "rate_limited", 429


class LimitReached(SandboxerError):
    """429 ``limit_reached``: a concurrency limit."""
    code, status = "limit_reached", 429


class InternalError(SandboxerError):
    """500 ``internal``."""
    code, status = "internal", 500


class Unimplemented(SandboxerError):
    """501 ``not_implemented``: this sbxd cannot do it."""
    code, status = "not_implemented", 501


class NoReadyMachine(SandboxerError):
    """502 ``no_ready_machine``: no VMM could be made ready (retryable)."""
    code, status = "no_ready_machine", 502


class AgentUnavailable(SandboxerError):
    """502 ``agent_unavailable``: the sandbox's agent failed or is unreachable."""
    code, status = "agent_unavailable", 502


class CapacityExceeded(SandboxerError):
    """503 ``capacity_exceeded``: no room on this host (retryable)."""
    code, status = "capacity_exceeded", 503


class InsufficientStorage(SandboxerError):
    """507 ``insufficient_storage``: the host's disk filled while saving memory."""
    code, status = "insufficient_storage", 507


_BY_CODE: dict[str, type[SandboxerError]] = {
    cls.code: cls for cls in (
        BadRequest, InvalidArgument, Unauthorized, Forbidden, NotFound, MethodNotAllowed,
        InvalidState, IdempotencyConflict, AlreadyExists, PayloadTooLarge, HeadersTooLarge,
        RateLimited, LimitReached, InternalError, Unimplemented, NoReadyMachine,
        AgentUnavailable, CapacityExceeded, InsufficientStorage)
}


def error_for_code(code: str, message: str, *, status: int | None = None,
                   request_id: str | None = None, retry_after: float | None = None,
                   body: Mapping[str, Any] | None = None) -> SandboxerError:
    """The typed error for an API ``code`` (a plain SandboxerError for an unknown one)."""
    cls = _BY_CODE.get(code, SandboxerError)
    if status is None:
        status = cls.status if cls is not SandboxerError else 0
    return cls(message, code=code, status=status, request_id=request_id,
               retry_after=retry_after, body=body)


_STATUS_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
                 405: "method_not_allowed", 409: "invalid_state", 413: "payload_too_large",
                 429: "limit_reached", 431: "headers_too_large", 500: "internal",
                 501: "not_implemented", 502: "agent_unavailable", 503: "capacity_exceeded",
                 507: "insufficient_storage"}


def error_from_body(status: int, raw: bytes, request_id: str | None = None,
                    retry_after: float | None = None) -> SandboxerError:
    """The error for an HTTP error response's status and body."""
    body: dict[str, Any] = {}
    try:
        parsed = json.loads(raw.decode("utf-8"))
        if isinstance(parsed, dict):
            body = parsed
    except (UnicodeDecodeError, ValueError):
        pass
    code = body.get("code")
    if not isinstance(code, str):
        code = _STATUS_CODES.get(status, "http_error")
    message = body.get("message")
    if not isinstance(message, str):
        message = raw[:500].decode("utf-8", "replace").strip() or f"HTTP {status}"
    request_id = body.get("requestId") if isinstance(body.get("requestId"), str) else request_id
    if retry_after is None and isinstance(body.get("retryAfterSeconds"), (int, float)):
        retry_after = float(body["retryAfterSeconds"])
    err = error_for_code(code, message, status=status, request_id=request_id,
                         retry_after=retry_after, body=body)
    return err
