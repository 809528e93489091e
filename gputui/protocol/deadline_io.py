"""Reading a socket against a deadline, however slowly the bytes trickle in."""

from __future__ import annotations

import socket
import time

#: the most read at once
CHUNK_BYTES = 65536


def recv_before(sock: socket.socket, deadline: float, what: str) -> bytes:
    """One ``recv`` that waits until ``deadline`` (``time.monotonic``) at the
    latest; TimeoutError(``what``) once it has passed.  b"" when the peer closed."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError(what)
    sock.settimeout(remaining)
    return sock.recv(CHUNK_BYTES)
