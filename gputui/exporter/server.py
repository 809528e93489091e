"""``/metrics`` and a landing page over HTTP (standard library only).

HTTP/1.1 with keep-alive, so a Prometheus server that scrapes every few seconds
reuses one connection and one thread.  Limits: at most
:data:`MAX_CONNECTIONS` connections at once (more are closed at once), an idle
connection is closed after :data:`IDLE_TIMEOUT_S`, only GET and HEAD are
answered, and nothing from the request is echoed back.
"""

from __future__ import annotations

import html
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from gputui import __version__
from gputui.errors import GputuiError
from gputui.exporter.exposition import CONTENT_TYPE

MAX_CONNECTIONS = 16
IDLE_TIMEOUT_S = 30.0


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = f"gputui-exporter/{__version__}"
    sys_version = ""
    timeout = IDLE_TIMEOUT_S
    # Headers and body leave in one write: written separately, Nagle's algorithm and
    # the client's delayed ACK held every response for 40 ms.
    disable_nagle_algorithm = True
    wbufsize = 1 << 18
    server: ExporterServer

    def do_GET(self) -> None:  # the name http.server dispatches to
        self._answer(send_body=True)

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def _answer(self, send_body: bool) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            try:
                body = self.server.render_metrics()
            except Exception as exc:  # one bad scrape: say so, keep serving
                self._send(500, "text/plain; charset=utf-8", _error_text(exc), send_body)
                return
            self._send(200, CONTENT_TYPE, body, send_body)
        elif path in ("/", "/index.html"):
            self._send(200, "text/html; charset=utf-8", self.server.landing_page(), send_body)
        else:
            self._send(404, "text/plain; charset=utf-8", b"not found: try /metrics\n", send_body)

    def _send(self, code: int, content_type: str, body: bytes, send_body: bool) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per scrape on stderr would drown everything else


def _error_text(exc: BaseException) -> bytes:
    return f"gputui exporter: collection failed: {type(exc).__name__}\n".encode()


class ExporterServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        render_metrics: Callable[[], bytes],
        description: str,
    ) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.render_metrics = render_metrics
        self._description = description
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)  # too many at once: refuse, do not queue
            return
        try:
            super().process_request(request, client_address)
        except Exception:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)  # type: ignore[misc]
        finally:
            self._slots.release()

    def landing_page(self) -> bytes:
        text = html.escape(self._description)
        page = (
            "<!doctype html><html><head><meta charset='utf-8'>"
            f"<title>gputui exporter</title></head><body><h1>gputui exporter {__version__}</h1>"
            f"<p>{text}</p><p><a href='/metrics'>/metrics</a></p></body></html>\n"
        )
        return page.encode()


def make_server(
    listen: str, port: int, render_metrics: Callable[[], bytes], description: str
) -> ExporterServer:
    """Bind the server; a port in use or a bad address is one clear error."""
    try:
        return ExporterServer((listen, port), render_metrics, description)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise GputuiError(f"gputui exporter: cannot listen on {listen}:{port}: {reason}") from None
