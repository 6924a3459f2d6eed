"""``python -m lightning_mgpu dashboard RUN --serve``: the dashboard, live, on 127.0.0.1.

The page is the same self-contained one that ``render`` writes, with ``data-live`` set: every few seconds it
asks ``data.json`` for news and, when the run changed, redraws in place (``Plotly.react``, keeping zoom and
legend toggles). A watcher thread re-reads the run folder when a file in it changed (size or mtime), so a
poll costs nothing while training writes nothing new. Standard library only: ``http.server`` in threads.

Example::

    python examples/train.py --gpu-monitor --output-dir outputs &
    python -m lightning_mgpu dashboard outputs/logs --serve          # then open http://127.0.0.1:8050/
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from lightning_mgpu.dashboard.reader import RunFormatError, locate_run, read_run
from lightning_mgpu.dashboard.render import (
    build_sections,
    page_state,
    render_html,
    run_diagnoses,
)

log = logging.getLogger(__name__)

HOST = "127.0.0.1"  # never a public interface: the page shows paths and hyperparameters


class PortInUseError(OSError):
    """The port ``--serve`` asked for is taken; the message names it and the fix."""


def _fingerprint(folder: Path) -> tuple[tuple[str, int, int], ...]:
    """Name, size and mtime of every file under the run folder (the dashboard's own output excluded)."""
    entries = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d != "dashboard"]
        for name in files:
            try:
                st = os.stat(os.path.join(root, name))
            except FileNotFoundError:  # a logger renamed it in between
                continue
            entries.append((os.path.join(root, name), st.st_size, st.st_mtime_ns))
    return tuple(sorted(entries))


@dataclass
class LiveRun:
    """The run's current page state, re-read when its files change.

    Args:
        path: what the user passed (a run folder, or a parent whose newest run is shown).
        interval: seconds between checks of the folder.
    """

    path: str
    interval: float = 3.0
    version: int = 0
    state: dict[str, Any] = field(default_factory=dict)
    page: str = ""
    error: str | None = None
    _seen: tuple = ()
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)

    def refresh(self) -> bool:
        """Re-read the run if any of its files changed; ``True`` when the state moved to a new version."""
        _, folder, _ = locate_run(self.path)  # a parent folder may gain a newer run while we watch
        seen = (str(folder), _fingerprint(folder))
        if seen == self._seen:
            return False
        try:
            run = read_run(self.path)
        except (OSError, ValueError) as err:  # a file mid-write: keep the last good state, try again next time
            self.error = f"could not re-read {folder}: {err}"
            log.warning("dashboard --serve: %s", self.error)
            return False
        sections = build_sections(run)
        diagnoses, source = run_diagnoses(run)
        with self._lock:
            self.version += 1
            self.state = page_state(run, sections, diagnoses, source, version=self.version)
            self.page = render_html(run, sections, diagnoses, source, live_interval=self.interval, state=self.state)
            self._seen = seen
            self.error = None
        return True

    def watch(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.refresh()
            except Exception as err:  # the watcher must outlive any one bad read
                self.error = str(err)
                log.warning("dashboard --serve: %s", err)

    def stop(self) -> None:
        self._stop.set()

    def snapshot(self) -> tuple[str, bytes]:
        with self._lock:
            return self.page, json.dumps(self.state, separators=(",", ":")).encode()


def _handler(live: LiveRun) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "lightning_mgpu-dashboard"

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            page, data = live.snapshot()
            route = self.path.split("?", 1)[0]
            if route in ("/", "/index.html"):
                self._send(200, "text/html; charset=utf-8", page.encode())
            elif route == "/data.json":
                self._send(200, "application/json", data)
            else:
                self._send(404, "text/plain; charset=utf-8", b"not found: the dashboard serves / and /data.json\n")

        def _send(self, status: int, kind: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            log.debug("dashboard --serve: " + format, *args)

    return Handler


def make_server(live: LiveRun, port: int) -> ThreadingHTTPServer:
    """Bind ``127.0.0.1:port`` (0 picks a free port).

    Raises:
        PortInUseError: the port is taken, with the fix.
    """
    try:
        server = ThreadingHTTPServer((HOST, port), _handler(live))
    except OSError as err:
        if err.errno == errno.EADDRINUSE:
            raise PortInUseError(
                err.errno,
                f"port {port} on {HOST} is already in use (another dashboard, or another server). Pass a free port with"
                f" `--port N`, or `--port 0` to let the system pick one; `ss -ltnp 'sport = :{port}'` shows who holds"
                " it.",
            ) from err
        raise
    server.daemon_threads = True
    return server


def _wait_for_run(live: LiveRun, run_path: str, interval: float) -> None:
    """Start the live view before training writes: while RUN does not exist yet, or is an empty folder, wait until
    a run appears in it (Ctrl-C stops). A folder that already holds files but no run is refused at once."""
    path = Path(run_path).expanduser()
    if path.exists() and (path.is_file() or any(path.iterdir())):
        return  # refresh() below says what is wrong, if anything
    sys.stdout.write(f"dashboard: waiting for {run_path} to be written (start training; Ctrl-C stops)\n")
    sys.stdout.flush()
    while True:
        try:
            live.refresh()
            return
        except (FileNotFoundError, RunFormatError):
            time.sleep(interval)  # not there yet, or its logger has not written its first file


def serve(run_path: str, port: int = 8050, interval: float = 3.0, ready: threading.Event | None = None) -> int:
    """Serve the live dashboard until Ctrl-C; returns the exit code.

    Raises:
        FileNotFoundError, RunFormatError: ``run_path`` holds no run.
        PortInUseError: the port is taken.
        ValueError: ``interval`` is not positive.
    """
    if not interval > 0:
        raise ValueError(f"--interval {interval} must be a positive number of seconds")
    live = LiveRun(run_path, interval=interval)
    server = None
    # Ctrl-C stops cleanly from the first line printed on: a user (or a test) may press it as soon as they read one.
    try:
        _wait_for_run(live, run_path, interval)
        live.refresh()  # fails here, before binding, if RUN holds no run
        server = make_server(live, port)
        watcher = threading.Thread(target=live.watch, name="dashboard-watch", daemon=True)
        watcher.start()
        host, bound = str(server.server_address[0]), server.server_address[1]
        sys.stdout.write(
            f"dashboard: serving {run_path} live at http://{host}:{bound}/ (re-read every {interval:g} s;"
            " Ctrl-C stops)\n"
        )
        sys.stdout.flush()
        if ready is not None:
            ready.set()
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        sys.stdout.write("dashboard: stopped\n")
    finally:
        live.stop()
        if server is not None:
            server.server_close()
    return 0


def main(args: argparse.Namespace) -> int:
    """``python -m lightning_mgpu dashboard RUN --serve [--port P] [--interval S]``."""
    try:
        return serve(args.run, port=args.port, interval=args.interval)
    except (FileNotFoundError, RunFormatError, PortInUseError, ValueError) as err:
        sys.stderr.write(
            f"lightning-mgpu dashboard: error: {err.strerror if isinstance(err, PortInUseError) else err}\n"
        )
        return 2
