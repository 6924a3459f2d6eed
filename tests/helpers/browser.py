"""Headless Chromium driven over the DevTools protocol: load a page, evaluate JavaScript, read the network log.

Chromium's own ``--dump-dom`` cannot show which requests a page made, nor wait for something to happen
after the page opened (a live dashboard picking up a new point); the DevTools protocol can. Every wait here
is bounded.
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

# No background traffic of Chromium's own, so the network log holds the page's requests only.
_QUIET = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--hide-scrollbars",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--metrics-recording-only",
    "--mute-audio",
]


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """One headless Chromium with one page. Use as a context manager.

    Example::

        with Browser(tmp_path) as browser:
            browser.open(page.as_uri())
            assert browser.wait_for("document.body.dataset.rendered") == "8"
            assert browser.requests() == []
    """

    def __init__(self, profile: Path, window: tuple[int, int] = (1400, 2400), timeout: float = 60.0) -> None:
        self.profile = profile
        self.window = window
        self.timeout = timeout
        self._ids = itertools.count(1)
        self._events: list[dict[str, Any]] = []

    def __enter__(self) -> Browser:
        import websocket

        binary = chromium()
        if binary is None:
            raise RuntimeError("chromium is not installed (bash scripts/install_system_deps.sh)")
        self.profile.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [
                binary,
                *_QUIET,
                f"--window-size={self.window[0]},{self.window[1]}",
                f"--user-data-dir={self.profile}",
                "--remote-debugging-port=0",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + self.timeout
        while not (port_file.is_file() and port_file.read_text().strip()):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.close()
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as reply:
            targets = json.load(reply)
        page = next(t for t in targets if t.get("type") == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=self.timeout, suppress_origin=True)
        self.call("Network.enable")
        self.call("Page.enable")
        self.call("Runtime.enable")
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        ws = getattr(self, "ws", None)
        if ws is not None:
            ws.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one DevTools command and return its result; events that arrive meanwhile are kept."""
        ident = next(self._ids)
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._events.append(message)

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r} raised: {result['exceptionDetails']}")
        return result.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float = 30.0, interval: float = 0.2) -> Any:
        """Evaluate ``expression`` until it is truthy; return its value, or fail after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        error = None
        while True:
            try:  # while the page loads, `document.body` may not exist yet
                value = self.evaluate(expression)
            except RuntimeError as err:
                value, error = None, err
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"{expression!r} still falsy after {timeout}s (last error: {error})")
            time.sleep(interval)

    def requests(self) -> list[str]:
        """URLs of every request the page started, from the network log (the page itself included)."""
        self.evaluate("1")  # drains pending events
        return [e["params"]["request"]["url"] for e in self._events if e.get("method") == "Network.requestWillBeSent"]

    def console_errors(self) -> list[str]:
        self.evaluate("1")
        out = []
        for e in self._events:
            if e.get("method") == "Runtime.exceptionThrown":
                out.append(json.dumps(e["params"]["exceptionDetails"])[:500])
        return out

    def screenshot(self, path: Path) -> Path:
        import base64

        path.write_bytes(
            base64.b64decode(self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"])
        )
        return path
