"""``/metrics`` and a landing page over HTTP (standard library only).

HTTP/1.1 with keep-alive, so a Prometheus server that scrapes every few seconds
reuses one connection.  One thread serves every connection: a selector waits on
the listening socket and the open connections, reads what arrived, answers each
complete request and writes without blocking, so neither a new connection (no
thread to start) nor a slow client costs more than its bytes; with nothing to do
the thread sleeps until a connection's idle deadline (no polling).

Limits: at most :data:`MAX_CONNECTIONS` connections at once (more are closed at
once), an idle connection is closed after :data:`IDLE_TIMEOUT_S`, a request line
or header longer than :data:`MAX_LINE` or more than :data:`MAX_HEADERS` headers
end the connection with an error, only GET and HEAD are answered, and nothing
from the request is echoed back.
"""

from __future__ import annotations

import html
import selectors
import socket
import threading
import time
from collections.abc import Callable

from gputui import __version__
from gputui.errors import GputuiError
from gputui.exporter.exposition import CONTENT_TYPE

MAX_CONNECTIONS = 16
IDLE_TIMEOUT_S = 30.0
MAX_LINE = 8192
MAX_HEADERS = 64
#: bytes read at a time from a connection
READ_BYTES = 65536
#: the pause after an accept that failed for want of file descriptors
ACCEPT_BACKOFF_S = 0.05
#: the longest wait for the serving thread to stop
STOP_TIMEOUT_S = 10.0


class _Connection:
    """One client: what it sent that is not answered yet, what is not sent yet."""

    __slots__ = ("close_after", "deadline", "out", "pending", "sock", "writing")

    def __init__(self, sock: socket.socket, now: float) -> None:
        self.sock = sock
        self.pending = b""
        self.out = b""
        self.close_after = False
        self.writing = False
        self.deadline = now + IDLE_TIMEOUT_S


class _Reply:
    """A response, and whether the connection stays open after it."""

    __slots__ = ("body", "code", "content_type", "extra", "head", "keep")

    def __init__(
        self,
        code: int,
        body: bytes,
        keep: bool,
        head: bool = False,
        content_type: str = "text/plain; charset=utf-8",
        extra: str = "",
    ) -> None:
        self.code, self.body, self.keep, self.head = code, body, keep, head
        self.content_type, self.extra = content_type, extra

    def encode(self) -> bytes:
        # Headers and body leave in one write: written separately, Nagle's algorithm
        # and the client's delayed ACK held every response for 40 ms.
        header = (
            f"HTTP/1.1 {self.code} {_REASONS.get(self.code, 'Error')}\r\n"
            f"Server: gputui-exporter/{__version__}\r\n"
            f"Content-Type: {self.content_type}\r\n"
            f"Content-Length: {len(self.body)}\r\n"
            "Cache-Control: no-store\r\n"
            f"Connection: {'keep-alive' if self.keep else 'close'}\r\n{self.extra}\r\n"
        ).encode("latin-1")
        return header if self.head else header + self.body


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


def split_request(data: bytes) -> tuple[int, list[bytes]] | _Reply | None:
    """The first request of ``data``: how many bytes it takes and its lines (the
    request line, then the headers); None while it is not complete; a reply that
    ends the connection when it breaks a limit.

    Not ``http.server``: its header parsing (the ``email`` package) cost more CPU
    per scrape than rendering the metrics.
    """
    lines: list[bytes] = []
    start = 0
    while True:
        end = data.find(b"\n", start)
        if end < 0:
            if len(data) - start > MAX_LINE:
                return _Reply(414 if not lines else 431, _LIMIT_TEXT[bool(lines)], keep=False)
            return None
        if end + 1 - start > MAX_LINE:
            return _Reply(414 if not lines else 431, _LIMIT_TEXT[bool(lines)], keep=False)
        line = data[start:end]
        start = end + 1
        if lines and line in (b"\r", b""):
            return start, lines
        lines.append(line)
        if len(lines) > MAX_HEADERS + 1:
            return _Reply(431, b"too many headers\n", keep=False)


_LIMIT_TEXT = {False: b"request line too long\n", True: b"header too long\n"}


class ExporterServer:
    """The exporter's HTTP server: bind in the constructor, then ``serve_forever``
    on a thread of its own; ``shutdown`` from another thread stops it and
    ``server_close`` releases the port (``socketserver``'s names)."""

    def __init__(
        self,
        address: tuple[str, int],
        render_metrics: Callable[[], bytes],
        description: str,
    ) -> None:
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen(MAX_CONNECTIONS)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self.socket = sock
        self.server_address = sock.getsockname()
        self.render_metrics = render_metrics
        self._description = description
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._stopping = False
        self._stopped = threading.Event()
        self._stopped.set()
        self._connections: dict[socket.socket, _Connection] = {}
        self._selector: selectors.BaseSelector | None = None

    # -- the loop ---------------------------------------------------------------------
    def serve_forever(self) -> None:
        self._stopped.clear()
        selector = self._selector = selectors.DefaultSelector()
        # a connection's key holds the connection; the others, what to call
        selector.register(self.socket, selectors.EVENT_READ, self._accept)
        selector.register(self._wake_r, selectors.EVENT_READ, self._drain_wake)
        try:
            while not self._stopping:
                for key, events in selector.select(self._timeout()):
                    target = key.data
                    if isinstance(target, _Connection):
                        self._serve(target, events)
                    else:
                        target()
                self._expire()
        finally:
            for conn in list(self._connections.values()):
                self._close(conn)
            selector.close()
            self._selector = None
            self._stopped.set()

    def shutdown(self) -> None:
        """Stop ``serve_forever`` (from another thread) and wait for it to end."""
        self._stopping = True
        try:
            self._wake_w.send(b"x")
        except OSError:  # the pipe is full (it wakes the loop anyway) or closed
            pass
        self._stopped.wait(STOP_TIMEOUT_S)

    def server_close(self) -> None:
        self.socket.close()
        self._wake_r.close()
        self._wake_w.close()

    def _timeout(self) -> float | None:
        if not self._connections:
            return None
        soonest = min(conn.deadline for conn in self._connections.values())
        return max(0.0, soonest - time.monotonic())

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(64):
                pass
        except OSError:
            pass

    def _accept(self) -> None:
        assert self._selector is not None
        while True:
            try:
                sock, _ = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:  # the client left before it was accepted
                continue
            except OSError:
                # no file descriptor left (EMFILE, ENFILE): the listening socket stays
                # readable, so wait a little instead of spinning on it
                time.sleep(ACCEPT_BACKOFF_S)
                return
            if len(self._connections) >= MAX_CONNECTIONS:
                sock.close()  # too many at once: refuse, do not queue
                continue
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                sock.close()
                continue
            conn = _Connection(sock, time.monotonic())
            self._connections[sock] = conn
            self._selector.register(sock, selectors.EVENT_READ, conn)

    def _expire(self) -> None:
        if not self._connections:
            return
        now = time.monotonic()
        for conn in [c for c in self._connections.values() if c.deadline <= now]:
            self._close(conn)

    def _close(self, conn: _Connection) -> None:
        if self._connections.pop(conn.sock, None) is None:
            return
        if self._selector is not None:
            try:
                self._selector.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
        try:
            conn.sock.shutdown(socket.SHUT_WR)
            # what the client sent that was not read: unread, closing would reset
            # the connection, and the client could lose the answer sent before
            for _ in range(4):
                if not conn.sock.recv(READ_BYTES):
                    break
        except OSError:
            pass
        conn.sock.close()

    # -- one connection ---------------------------------------------------------------
    def _serve(self, conn: _Connection, events: int) -> None:
        try:
            if events & selectors.EVENT_READ:
                data = conn.sock.recv(READ_BYTES)
                if not data:
                    self._close(conn)
                    return
                conn.pending += data
            self._answer(conn)
        except Exception:  # resets, a closed socket, anything: this connection ends
            self._close(conn)  # quietly, the loop and the others go on

    def _answer(self, conn: _Connection) -> None:
        """Answer the complete requests received, one at a time: the next is read
        only once the previous answer has left (a client that sends and never
        reads holds one answer, not a queue of them)."""
        assert self._selector is not None
        conn.deadline = time.monotonic() + IDLE_TIMEOUT_S
        while True:
            if not conn.out:
                split = split_request(conn.pending) if conn.pending else None
                if split is None:
                    break
                if isinstance(split, _Reply):
                    reply, conn.pending = split, b""
                else:
                    used, lines = split
                    conn.pending = conn.pending[used:]
                    reply = self._reply(lines)
                conn.out = reply.encode()
                conn.close_after = not reply.keep
            sent = conn.sock.send(conn.out)
            conn.out = conn.out[sent:]
            if conn.out:  # the client reads slowly: the rest when it can take it
                if not conn.writing:
                    conn.writing = True
                    self._selector.modify(conn.sock, selectors.EVENT_WRITE, conn)
                return
            if conn.close_after:
                self._close(conn)
                return
        if conn.writing:
            conn.writing = False
            self._selector.modify(conn.sock, selectors.EVENT_READ, conn)

    def _reply(self, lines: list[bytes]) -> _Reply:
        parts = lines[0].decode("latin-1").split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            return _Reply(400, b"bad request\n", keep=False)
        method, target, version = parts
        keep = version == "HTTP/1.1"
        for header in lines[1:]:
            name, _, value = header.partition(b":")
            name = name.strip().lower()
            if name == b"connection":
                token = value.strip().lower()
                keep = token == b"keep-alive" or (keep and token != b"close")
            elif name in (b"content-length", b"transfer-encoding") and value.strip() not in (
                b"0",
                b"",
            ):
                return _Reply(400, b"a request body is not accepted\n", keep=False)
        if method not in ("GET", "HEAD"):
            return _Reply(405, b"only GET and HEAD\n", keep, extra="Allow: GET, HEAD\r\n")
        head = method == "HEAD"
        path = target.split("?", 1)[0]
        if path == "/metrics":
            try:
                body = self.render_metrics()
            except Exception as exc:  # one bad scrape: say so, keep serving
                return _Reply(500, _error_text(exc), keep, head)
            return _Reply(200, body, keep, head, content_type=CONTENT_TYPE)
        if path in ("/", "/index.html"):
            page = self.landing_page()
            return _Reply(200, page, keep, head, content_type="text/html; charset=utf-8")
        return _Reply(404, b"not found: try /metrics\n", keep, head)

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
