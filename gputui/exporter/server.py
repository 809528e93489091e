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
import socketserver
import threading
from collections.abc import Callable
from typing import Any

from gputui import __version__
from gputui.errors import GputuiError
from gputui.exporter.exposition import CONTENT_TYPE

MAX_CONNECTIONS = 16
IDLE_TIMEOUT_S = 30.0
MAX_LINE = 8192
MAX_HEADERS = 64


class _Handler(socketserver.StreamRequestHandler):
    """A small HTTP/1.1 server side: GET and HEAD, keep-alive, bounded reads.

    Not ``http.server``: its header parsing (the ``email`` package) cost more CPU
    per scrape than rendering the metrics.  Only the request line and the
    ``Connection`` header matter here; a request that announces a body, a line
    longer than :data:`MAX_LINE`, or more than :data:`MAX_HEADERS` headers ends
    the connection.
    """

    timeout = IDLE_TIMEOUT_S
    # Headers and body leave in one write: written separately, Nagle's algorithm and
    # the client's delayed ACK held every response for 40 ms.
    disable_nagle_algorithm = True
    server: ExporterServer

    def handle(self) -> None:
        try:
            while self._one_request():
                pass
        except (OSError, ValueError):  # timeouts, resets, a closed file: end quietly
            pass

    def _one_request(self) -> bool:
        line = self.rfile.readline(MAX_LINE + 1)
        if not line:
            return False
        if len(line) > MAX_LINE:
            self._send(414, b"request line too long\n", keep=False)
            return False
        parts = line.decode("latin-1").split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            self._send(400, b"bad request\n", keep=False)
            return False
        method, target, version = parts
        keep = version == "HTTP/1.1"
        for _ in range(MAX_HEADERS + 1):
            header = self.rfile.readline(MAX_LINE + 1)
            if header in (b"\r\n", b"\n", b""):
                break
            if len(header) > MAX_LINE:
                self._send(431, b"header too long\n", keep=False)
                return False
            name, _, value = header.partition(b":")
            name = name.strip().lower()
            if name == b"connection":
                token = value.strip().lower()
                keep = token == b"keep-alive" or (keep and token != b"close")
            elif name in (b"content-length", b"transfer-encoding") and value.strip() not in (
                b"0",
                b"",
            ):
                self._send(400, b"a request body is not accepted\n", keep=False)
                return False
        else:
            self._send(431, b"too many headers\n", keep=False)
            return False
        if method not in ("GET", "HEAD"):
            self._send(405, b"only GET and HEAD\n", keep=keep, extra="Allow: GET, HEAD\r\n")
            return keep
        head = method == "HEAD"
        path = target.split("?", 1)[0]
        if path == "/metrics":
            try:
                body = self.server.render_metrics()
            except Exception as exc:  # one bad scrape: say so, keep serving
                self._send(500, _error_text(exc), keep=keep, head=head)
                return keep
            self._send(200, body, keep=keep, head=head, content_type=CONTENT_TYPE)
        elif path in ("/", "/index.html"):
            page = self.server.landing_page()
            self._send(200, page, keep=keep, head=head, content_type="text/html; charset=utf-8")
        else:
            self._send(404, b"not found: try /metrics\n", keep=keep, head=head)
        return keep

    def _send(
        self,
        code: int,
        body: bytes,
        keep: bool,
        head: bool = False,
        content_type: str = "text/plain; charset=utf-8",
        extra: str = "",
    ) -> None:
        header = (
            f"HTTP/1.1 {code} {_REASONS.get(code, 'Error')}\r\n"
            f"Server: gputui-exporter/{__version__}\r\n"
            f"Content-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n"
            "Cache-Control: no-store\r\n"
            f"Connection: {'keep-alive' if keep else 'close'}\r\n{extra}\r\n"
        ).encode("latin-1")
        self.wfile.write(header if head else header + body)


_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    414: "URI Too Long",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
}


def _error_text(exc: BaseException) -> bytes:
    return f"gputui exporter: collection failed: {type(exc).__name__}\n".encode()


class ExporterServer(socketserver.ThreadingTCPServer):
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
