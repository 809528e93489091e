"""The exporter's HTTP server: one thread, every connection, bounded by its limits."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from gputui.exporter import server as srv
from gputui.exporter.server import ExporterServer, make_server, split_request
from tests.helpers.deadlines import WAIT_S

BODY = b"# TYPE up gauge\nup 1\n"


@pytest.fixture
def server() -> Iterator[ExporterServer]:
    calls: list[int] = []

    def render() -> bytes:
        calls.append(1)
        return BODY

    s = make_server("127.0.0.1", 0, render, "test")
    thread = threading.Thread(target=s.serve_forever, daemon=True)
    thread.start()
    try:
        yield s
    finally:
        s.shutdown()
        s.server_close()
        thread.join(WAIT_S)
        assert not thread.is_alive()


def port(s: ExporterServer) -> int:
    return int(s.server_address[1])


def wait_until(predicate: object, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def read_responses(sock: socket.socket, count: int) -> list[bytes]:
    """``count`` responses of ``BODY`` read off ``sock``."""
    one = len(BODY)
    data = b""
    out = []
    sock.settimeout(WAIT_S)
    while len(out) < count:
        head_end = data.find(b"\r\n\r\n")
        if head_end >= 0 and len(data) >= head_end + 4 + one:
            out.append(data[: head_end + 4 + one])
            data = data[head_end + 4 + one :]
            continue
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection"
        data += chunk
    return out


def test_a_new_connection_for_every_scrape_is_answered_and_closed(server: ExporterServer) -> None:
    for _ in range(50):
        conn = http.client.HTTPConnection("127.0.0.1", port(server), timeout=WAIT_S)
        conn.request("GET", "/metrics", headers={"Connection": "close"})
        response = conn.getresponse()
        assert response.status == 200 and response.read() == BODY
        conn.close()
    wait_until(lambda: not server._connections, "every connection to be closed")


def test_pipelined_requests_are_answered_in_order(server: ExporterServer) -> None:
    with socket.create_connection(("127.0.0.1", port(server)), timeout=WAIT_S) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\n\r\n" * 5 + b"GET /nope HTTP/1.1\r\n\r\n")
        data = b""
        while not data.endswith(b"not found: try /metrics\n"):
            chunk = s.recv(65536)
            assert chunk, "the server closed the connection"
            data += chunk
        codes = [part[:3] for part in data.split(b"HTTP/1.1 ")[1:]]
        assert codes == [b"200"] * 5 + [b"404"]
        assert data.count(BODY) == 5


def test_a_request_sent_a_byte_at_a_time_is_answered(server: ExporterServer) -> None:
    with socket.create_connection(("127.0.0.1", port(server)), timeout=WAIT_S) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for byte in b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n":
            s.sendall(bytes([byte]))
        (answer,) = read_responses(s, 1)
        assert answer.startswith(b"HTTP/1.1 200")


def test_connections_over_the_limit_are_closed_and_the_others_served(
    server: ExporterServer,
) -> None:
    held = [
        socket.create_connection(("127.0.0.1", port(server)), timeout=WAIT_S)
        for _ in range(srv.MAX_CONNECTIONS)
    ]
    try:
        wait_until(lambda: len(server._connections) == srv.MAX_CONNECTIONS, "the connections")
        with socket.create_connection(("127.0.0.1", port(server)), timeout=WAIT_S) as extra:
            extra.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
            try:
                assert extra.recv(65536) == b""  # closed without an answer
            except ConnectionResetError:
                pass
        held[0].sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
        assert read_responses(held[0], 1)[0].startswith(b"HTTP/1.1 200")
    finally:
        for s in held:
            s.close()


def test_a_client_that_never_reads_does_not_hold_the_others(server: ExporterServer) -> None:
    big = make_server("127.0.0.1", 0, lambda: b"x" * 4_000_000, "big")
    thread = threading.Thread(target=big.serve_forever, daemon=True)
    thread.start()
    stuck = socket.create_connection(("127.0.0.1", port(big)), timeout=WAIT_S)
    try:
        stuck.sendall(b"GET /metrics HTTP/1.1\r\n\r\n" * 3)  # and never reads
        wait_until(lambda: any(c.writing for c in list(big._connections.values())), "a stall")
        conn = http.client.HTTPConnection("127.0.0.1", port(big), timeout=WAIT_S)
        conn.request("HEAD", "/metrics")
        response = conn.getresponse()
        response.read()
        assert response.status == 200
        assert response.getheader("Content-Length") == "4000000"
        conn.close()
    finally:
        stuck.close()
        big.shutdown()
        big.server_close()
        thread.join(WAIT_S)


def test_an_idle_connection_is_closed_after_the_idle_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(srv, "IDLE_TIMEOUT_S", 0.2)
    s = make_server("127.0.0.1", 0, lambda: BODY, "idle")
    thread = threading.Thread(target=s.serve_forever, daemon=True)
    thread.start()
    try:
        with socket.create_connection(("127.0.0.1", port(s)), timeout=WAIT_S) as idle:
            assert idle.recv(1) == b""  # closed by the server, not by this timeout
    finally:
        s.shutdown()
        s.server_close()
        thread.join(WAIT_S)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"GET / HTTP/1.1\r\nA: b\r\n", None),
        (b"GET / HTTP/1.1\r\n\r\nGET", (18, [b"GET / HTTP/1.1\r"])),
        (b"GET / HTTP/1.0\n\n", (16, [b"GET / HTTP/1.0"])),
        (b"x" * (srv.MAX_LINE + 1), 414),
        (b"GET / HTTP/1.1\r\n" + b"A: " + b"b" * srv.MAX_LINE, 431),
        (b"GET / HTTP/1.1\r\n" + b"A: b\r\n" * (srv.MAX_HEADERS + 1) + b"\r\n", 431),
    ],
    ids=["incomplete", "one-of-two", "bare-newlines", "long-line", "long-header", "many"],
)
def test_split_request(data: bytes, expected: object) -> None:
    got = split_request(data)
    if isinstance(expected, int):
        assert not isinstance(got, tuple) and got is not None and got.code == expected
    else:
        assert got == expected
