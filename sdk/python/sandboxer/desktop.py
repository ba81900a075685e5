"""A sandbox's graphical desktop: ``sandbox.desktop`` (docs/api.md, "The desktop").

``action()`` takes any action of Anthropic's computer-use tool by its name
and fields, as an agent's tool call gives them; the other methods are
shorthands for them. Coordinates are the screen's pixels.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Sequence

from ._part import SandboxPart
from .errors import SandboxerError
from .models import DesktopInfo

_CLICKS = {("left", 1): "left_click", ("right", 1): "right_click", ("middle", 1): "middle_click",
           ("left", 2): "double_click", ("left", 3): "triple_click"}


def _point(x: int | None, y: int | None) -> list[int] | None:
    """``[x, y]``, or None for both None (the pointer's place)."""
    if x is None and y is None:
        return None
    if x is None or y is None:
        raise ValueError("give both x and y, or neither (where the pointer is)")
    return [int(x), int(y)]


class Desktop(SandboxPart):
    """Starts, shows and drives a sandbox's desktop (XFCE over VNC in the guest)."""

    _route = "desktop"

    def start(self, *, display: int | None = None, width: int | None = None,
              height: int | None = None) -> DesktopInfo:
        """Starts the desktop unless one runs (display :1, 1280 x 800 unless given); a
        running one is only reported (``started`` False, its own display and size)."""
        body = {k: v for k, v in (("display", display), ("width", width), ("height", height)) if v is not None}
        return DesktopInfo.from_reply(self._transport.call("POST", self._base, json_body=body, idempotent=True))

    def status(self) -> DesktopInfo:
        """Whether it runs, its display, size and links."""
        return DesktopInfo.from_reply(self._transport.call("GET", self._base))

    def screenshot(self, max_width: int | None = None) -> bytes:
        """The screen as PNG bytes, scaled down to at most ``max_width`` pixels wide
        (aspect kept) when given."""
        with self._transport.open("GET", self._base + "/screenshot", query={"maxWidth": max_width}) as resp:
            return resp.read_all()

    def action(self, action: str, **fields: Any) -> dict[str, Any]:
        """One computer-use action (``"left_click"``, ``coordinate=[640, 400]``); fields
        that are None are left out. Its result: ``{}``, ``{"x", "y"}`` for
        ``cursor_position``, ``{"png": base64, "width", "height"}`` for ``screenshot``
        and ``zoom``."""
        body = {"action": action, **{k: v for k, v in fields.items() if v is not None}}
        return dict(self._transport.call("POST", self._base + "/actions", json_body=body).get("result") or {})

    def zoom(self, region: Sequence[int]) -> bytes:
        """``[x0, y0, x1, y1]`` of the screen as PNG bytes, at full resolution."""
        png = self.action("zoom", region=[int(v) for v in region]).get("png")
        try:
            return base64.b64decode(str(png), validate=True) if png else b""
        except (binascii.Error, ValueError) as e:
            raise SandboxerError("zoom's image is not base64", code="bad_response") from e

    def click(self, x: int | None = None, y: int | None = None, *, button: str = "left", count: int = 1,
              hold: str | None = None) -> None:
        """Clicks ``button`` (left, right, middle) at ``(x, y)`` (default where the pointer
        is), ``count`` times (2 and 3 with the left button), with the ``hold`` keys down
        (``"shift"``, ``"ctrl+shift"``)."""
        name = _CLICKS.get((button, count))
        if name is None:
            raise ValueError("button is left, right or middle; count 2 or 3 only with the left button")
        self.action(name, coordinate=_point(x, y), text=hold)

    def move(self, x: int, y: int) -> None:
        """Moves the pointer to ``(x, y)``."""
        self.action("mouse_move", coordinate=_point(x, y))

    def drag(self, start: Sequence[int], end: Sequence[int]) -> None:
        """Presses the left button at ``start`` (x, y), moves to ``end``, releases it."""
        self.action("left_click_drag", start_coordinate=_point(*start), coordinate=_point(*end))

    def mouse_down(self, x: int | None = None, y: int | None = None) -> None:
        """Presses the left button (at ``(x, y)`` when given)."""
        self.action("left_mouse_down", coordinate=_point(x, y))

    def mouse_up(self, x: int | None = None, y: int | None = None) -> None:
        """Releases the left button (at ``(x, y)`` when given)."""
        self.action("left_mouse_up", coordinate=_point(x, y))

    def scroll(self, x: int | None, y: int | None, direction: str, amount: int = 3, *,
               hold: str | None = None) -> None:
        """Turns the wheel ``amount`` clicks ``direction`` (up, down, left, right) at
        ``(x, y)`` (None, None: where the pointer is), with the ``hold`` keys down."""
        self.action("scroll", coordinate=_point(x, y), scroll_direction=direction, scroll_amount=int(amount),
                    text=hold)

    def type(self, text: str) -> None:
        """Types ``text`` (line breaks as Return; at most 4096 bytes)."""
        self.action("type", text=text)

    def key(self, keys: str) -> None:
        """Presses key combinations, xdotool's names: ``"ctrl+s"``, ``"Return"``, ``"ctrl+a Delete"``."""
        self.action("key", text=keys)

    def hold_key(self, keys: str, seconds: float) -> None:
        """Holds key combinations down for ``seconds`` (0 to 100)."""
        self.action("hold_key", text=keys, duration=seconds)

    def cursor_position(self) -> tuple[int, int]:
        """Where the pointer is: ``(x, y)``."""
        r = self.action("cursor_position")
        return int(r.get("x", 0)), int(r.get("y", 0))

    def wait(self, seconds: float) -> None:
        """Waits ``seconds`` (0 to 100) in the guest, as the tool's ``wait`` does."""
        self.action("wait", duration=seconds)
