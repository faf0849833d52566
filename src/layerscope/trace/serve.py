"""Serve one trace file to ui.perfetto.dev from 127.0.0.1, once.

The Perfetto UI can open a trace from a URL (``https://ui.perfetto.dev/#!/?url=…``); the browser
then fetches it cross-origin, so the file is served with CORS for the UI's origin only (and the
Private Network Access header Chrome asks for when a public page reads from loopback). The server
listens on a free port of 127.0.0.1, serves nothing but that one file (requests from any other
web origin get 403), and stops once the file was sent in full (or when the caller interrupts it).

A request must also name the server itself in its ``Host`` header (``127.0.0.1``, ``localhost`` or
``[::1]`` with its port): a web page that points its own host name at 127.0.0.1 (DNS rebinding)
sends that name, and gets 421 and no trace bytes.
"""

from __future__ import annotations

import http.server
import logging
import os
import threading
import urllib.parse
from collections.abc import Callable
from pathlib import Path

from layerscope.errors import TraceError

log = logging.getLogger(__name__)

__all__ = ["LOOPBACK_HOSTS", "PERFETTO_UI_ORIGIN", "TraceServer", "open_in_perfetto"]

PERFETTO_UI_ORIGIN = "https://ui.perfetto.dev"

#: The names a request may call the server by (with its port): loopback only.
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


class TraceServer:
    """Serves ``path`` at ``http://127.0.0.1:PORT/NAME`` until it has been fetched once."""

    def __init__(self, path: str | os.PathLike[str], *, origin: str = PERFETTO_UI_ORIGIN,
                 host: str = "127.0.0.1") -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise TraceError(f"trace {str(self.path)!r}: no such file")
        self.origin = origin
        self.fetched = threading.Event()
        self.name = urllib.parse.quote(self.path.name)
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                log.info("serve: " + format, *args)

            def _host_ok(self) -> bool:
                """Whether the Host header names this server on loopback; else answers 421."""
                host = (self.headers.get("Host") or "").strip().lower()
                if host in server.allowed_hosts:
                    return True
                # Misdirected Request: the request was meant for another host name.
                self.send_error(421)
                return False

            def _cors(self) -> None:
                if self.headers.get("Origin") == server.origin:
                    self.send_header("Access-Control-Allow-Origin", server.origin)
                    self.send_header("Vary", "Origin")

            def do_OPTIONS(self) -> None:
                if not self._host_ok():
                    return
                self.send_response(204)
                self._cors()
                if self.headers.get("Origin") == server.origin:
                    self.send_header("Access-Control-Allow-Methods", "GET")
                    self.send_header("Access-Control-Allow-Headers", "*")
                    self.send_header("Access-Control-Allow-Private-Network", "true")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self) -> None:
                if not self._host_ok():
                    return
                origin = self.headers.get("Origin")
                if origin is not None and origin != server.origin:
                    # Another web page must neither read the trace nor end the serving.
                    self.send_error(403)
                    return
                if urllib.parse.urlsplit(self.path).path != "/" + server.name:
                    self.send_error(404)
                    return
                size = server.path.stat().st_size
                self.send_response(200)
                self._cors()
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(size))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                with server.path.open("rb") as fh:
                    while chunk := fh.read(1 << 20):
                        self.wfile.write(chunk)
                server.fetched.set()

        self._httpd = http.server.ThreadingHTTPServer((host, 0), Handler)
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None
        #: ``Host`` header values accepted (lower case): the loopback names with this server's port.
        self.allowed_hosts = frozenset(f"{name}:{self.port}" for name in LOOPBACK_HOSTS)

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """Where the file is served."""
        return f"http://127.0.0.1:{self.port}/{self.name}"

    @property
    def ui_url(self) -> str:
        """The Perfetto UI address that opens the served file."""
        return f"{self.origin}/#!/?url={self.url}"

    def describe(self) -> dict[str, object]:
        """What is served, where: the file (absolute path, bytes), its URL and port, the UI address."""
        return {"path": str(self.path.resolve()), "bytes": self.path.stat().st_size, "url": self.url,
                "port": self.port, "ui_url": self.ui_url, "origin": self.origin}

    def start(self) -> TraceServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                        daemon=True)
        self._thread.start()
        return self

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until the file was sent (True) or ``timeout_s`` passed (False). Wakes often so
        Ctrl-C is seen promptly."""
        waited = 0.0
        while not self.fetched.wait(0.2):
            waited += 0.2
            if timeout_s is not None and waited >= timeout_s:
                return False
        return True

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> TraceServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_in_perfetto(
    path: str | os.PathLike[str],
    *,
    open_browser: Callable[[str], bool] | None = None,
    on_ready: Callable[[TraceServer], None] | None = None,
    timeout_s: float | None = None,
) -> tuple[str, bool]:
    """Serve ``path`` once and point the Perfetto UI at it.

    ``on_ready(server)`` is called when the server listens (the CLI prints its URL there);
    ``open_browser(ui_url)`` (default: :func:`webbrowser.open`) returns whether a browser opened.
    Blocks until the UI fetched the file, ``timeout_s`` passed, or KeyboardInterrupt (re-raised
    after the server stopped). Returns ``(ui_url, fetched)``.
    """
    if open_browser is None:
        import webbrowser

        open_browser = webbrowser.open
    with TraceServer(path) as srv:
        url = srv.ui_url
        if on_ready is not None:
            on_ready(srv)
        opened = bool(open_browser(url))
        log.info("browser %s", "opened" if opened else "not available")
        fetched = srv.wait(timeout_s)
    return url, fetched
