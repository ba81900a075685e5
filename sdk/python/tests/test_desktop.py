"""The desktop's methods against a tiny local http.server (test_retry's): the requests they make, what they return."""

from __future__ import annotations

import base64
import json
import unittest
from typing import Any

import sandboxer
from test_retry import SANDBOX, Script, error, serve

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256))
DESKTOP = {"running": True, "sessionRunning": True, "display": 1, "width": 1280, "height": 800, "vncPort": 5901,
           "url": "https://d-desktop.sbx.localhost:8443/vnc.html?_token=t", "viewOnlyUrl": None}
BASE = f"/v1/sandboxes/{SANDBOX['id']}/desktop"


def done(action: str, result: dict[str, Any] | None = None) -> tuple[int, dict[str, str], Any]:
    return 200, {}, {"ok": True, "requestId": "req_0123", "action": action, "result": result or {}}


class DesktopTest(unittest.TestCase):
    def serve(self, answers: list[tuple[int, dict[str, str], Any]]) -> tuple[Script, sandboxer.Desktop]:
        script, client = serve(self, answers)
        return script, sandboxer.Sandbox(client, SANDBOX).desktop

    @staticmethod
    def bodies(script: Script) -> list[dict[str, Any]]:
        return [json.loads(r["body"]) for r in script.requests]

    def test_start_and_status(self) -> None:
        script, desktop = self.serve([
            (200, {}, {"ok": True, "warnings": ["w"], "desktop": {**DESKTOP, "width": 1024, "height": 768,
                                                                  "started": True}}),
            (200, {}, {"ok": True, "desktop": {"running": False, "sessionRunning": False, "display": None,
                                               "width": None, "height": None, "vncPort": None, "url": None,
                                               "viewOnlyUrl": None}}),
        ])
        info = desktop.start(width=1024, height=768)
        self.assertEqual((info.running, info.display, info.width, info.height, info.vnc_port, info.started),
                         (True, 1, 1024, 768, 5901, True))
        self.assertEqual((info.url, info.view_only_url, info.warnings), (DESKTOP["url"], None, ["w"]))
        self.assertEqual((script.requests[0]["method"], script.requests[0]["path"]), ("POST", BASE))
        self.assertEqual(json.loads(script.requests[0]["body"]), {"width": 1024, "height": 768})
        off = desktop.status()
        self.assertEqual((off.running, off.display, off.url, off.started), (False, None, None, None))
        self.assertEqual((script.requests[1]["method"], script.requests[1]["path"]), ("GET", BASE))

    def test_start_is_retried(self) -> None:  # it starts one desktop however often it is asked
        script, desktop = self.serve([(503, {}, error(503, "capacity_exceeded")),
                                      (200, {}, {"ok": True, "desktop": DESKTOP})])
        self.assertTrue(desktop.start().running)
        self.assertEqual(self.bodies(script), [{}, {}])

    def test_screenshot_and_zoom(self) -> None:
        script, desktop = self.serve([
            (200, {"Content-Type": "image/png", "X-Image-Width": "640", "X-Image-Height": "400"}, PNG),
            done("zoom", {"png": base64.b64encode(PNG).decode(), "width": 10, "height": 20}),
        ])
        self.assertEqual(desktop.screenshot(max_width=640), PNG)
        self.assertEqual(script.requests[0]["path"], BASE + "/screenshot?maxWidth=640")
        self.assertEqual(desktop.zoom((0, 0, 10, 20)), PNG)
        self.assertEqual(script.requests[1]["path"], BASE + "/actions")
        self.assertEqual(json.loads(script.requests[1]["body"]), {"action": "zoom", "region": [0, 0, 10, 20]})

    def test_actions_as_computer_use_bodies(self) -> None:
        script, desktop = self.serve([done("x")])
        desktop.click(10, 20)
        desktop.click(button="right")
        desktop.click(1, 2, count=2, hold="shift")
        desktop.click(1, 2, count=3)
        desktop.click(1, 2, button="middle")
        desktop.move(5, 6)
        desktop.drag((1, 2), (30, 40))
        desktop.mouse_down(7, 8)
        desktop.mouse_up()
        desktop.scroll(100, 200, "down", 5, hold="ctrl")
        desktop.scroll(None, None, "left")
        desktop.type("hello\nworld")
        desktop.key("ctrl+s")
        desktop.hold_key("shift", 0.5)
        desktop.wait(1.5)
        self.assertEqual(desktop.action("screenshot", max_width=800, max_height=None), {})
        self.assertEqual(self.bodies(script), [
            {"action": "left_click", "coordinate": [10, 20]},
            {"action": "right_click"},
            {"action": "double_click", "coordinate": [1, 2], "text": "shift"},
            {"action": "triple_click", "coordinate": [1, 2]},
            {"action": "middle_click", "coordinate": [1, 2]},
            {"action": "mouse_move", "coordinate": [5, 6]},
            {"action": "left_click_drag", "start_coordinate": [1, 2], "coordinate": [30, 40]},
            {"action": "left_mouse_down", "coordinate": [7, 8]},
            {"action": "left_mouse_up"},
            {"action": "scroll", "coordinate": [100, 200], "scroll_direction": "down", "scroll_amount": 5,
             "text": "ctrl"},
            {"action": "scroll", "scroll_direction": "left", "scroll_amount": 3},
            {"action": "type", "text": "hello\nworld"},
            {"action": "key", "text": "ctrl+s"},
            {"action": "hold_key", "text": "shift", "duration": 0.5},
            {"action": "wait", "duration": 1.5},
            {"action": "screenshot", "max_width": 800},
        ])
        self.assertTrue(all(r["path"] == BASE + "/actions" and r["method"] == "POST" for r in script.requests))

    def test_cursor_position(self) -> None:
        script, desktop = self.serve([done("cursor_position", {"x": 12, "y": 34})])
        self.assertEqual(desktop.cursor_position(), (12, 34))
        self.assertEqual(self.bodies(script), [{"action": "cursor_position"}])

    def test_bad_arguments_make_no_request(self) -> None:
        script, desktop = self.serve([done("x")])
        with self.assertRaises(ValueError):
            desktop.click(1)
        with self.assertRaises(ValueError):
            desktop.click(1, 2, button="right", count=2)
        with self.assertRaises(ValueError):
            desktop.click(1, 2, button="fourth")
        self.assertEqual(script.requests, [])

    def test_errors_are_typed_and_actions_not_resent(self) -> None:
        script, desktop = self.serve([(409, {}, error(409, "invalid_state"))])
        with self.assertRaises(sandboxer.InvalidState):
            desktop.screenshot()
        with self.assertRaises(sandboxer.InvalidState):
            desktop.key("Return")
        script, desktop = self.serve([(502, {}, error(502, "agent_unavailable"))])
        with self.assertRaises(sandboxer.AgentUnavailable):
            desktop.click(1, 2)
        self.assertEqual(len(script.requests), 1)  # a click may have happened: never sent twice
        script, desktop = self.serve([done("zoom", {"png": "!!", "width": 1, "height": 1})])
        with self.assertRaises(sandboxer.SandboxerError) as cm:
            desktop.zoom([0, 0, 1, 1])
        self.assertEqual(cm.exception.code, "bad_response")


if __name__ == "__main__":
    unittest.main()
