"""What a sandbox's parts (``sandbox.files``, ``sandbox.desktop``) share: their routes and transport."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._http import Transport, quote

if TYPE_CHECKING:
    from .sandbox import Sandbox


class SandboxPart:
    """The routes below ``/v1/sandboxes/{id}/<_route>``."""

    _route = ""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sandbox = sandbox

    @property
    def _base(self) -> str:
        return f"/v1/sandboxes/{quote(self._sandbox.id)}/{self._route}"

    @property
    def _transport(self) -> Transport:
        return self._sandbox._client._transport
