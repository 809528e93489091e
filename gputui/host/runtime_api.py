"""Container names from the runtimes' HTTP APIs over their local Unix sockets.

Docker (and podman's Docker-compatible service) answer ``GET
/containers/<id>/json``; CRI-O answers ``GET /containers/<id>`` on its own
socket with the container's name and Kubernetes labels.  containerd has no
HTTP API (gRPC only): its containers keep their ids.  Every request has a short
timeout, and every answer (a failure too, for a while) is cached by container
id: a runtime that does not answer costs one timeout per container, not one
per refresh.  Nothing here raises.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from gputui.protocol.deadline_io import recv_before

#: runtime -> (its socket paths, tried in order; the request path, "{id}" filled in)
SOCKETS: dict[str, tuple[tuple[str, ...], str]] = {
    "docker": (("/var/run/docker.sock", "/run/docker.sock"), "/containers/{id}/json"),
    "podman": (("/run/podman/podman.sock",), "/containers/{id}/json"),
    "cri-o": (("/var/run/crio/crio.sock", "/run/crio/crio.sock"), "/containers/{id}"),
}
TIMEOUT_S = 0.25
#: the most of an answer read (an inspect document is a few KiB)
MAX_ANSWER_BYTES = 1 << 20
#: a failed look-up is tried again after this long
RETRY_S = 30.0
#: the Kubernetes labels docker (dockershim, cri-dockerd) and CRI-O put on a pod's containers
POD_NAME_LABEL = "io.kubernetes.pod.name"
POD_NAMESPACE_LABEL = "io.kubernetes.pod.namespace"
CONTAINER_NAME_LABEL = "io.kubernetes.container.name"
#: the longest name kept (Kubernetes names are at most 253 characters)
MAX_NAME_CHARS = 256

#: what a runtime said about one container: (its name, its pod's name, the pod's
#: namespace, why there are none), None where it did not say
Names = tuple[str | None, str | None, str | None, str | None]


def http_get_json(socket_path: str, path: str, timeout_s: float = TIMEOUT_S) -> Any:
    """``GET path`` over the Unix socket at ``socket_path``: the JSON answer.
    Raises OSError (including a timeout) or ValueError."""
    deadline = time.monotonic() + timeout_s
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        sock.connect(socket_path)
        request = f"GET {path} HTTP/1.0\r\nHost: localhost\r\nAccept: application/json\r\n\r\n"
        sock.sendall(request.encode("ascii"))
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_ANSWER_BYTES:
            chunk = recv_before(sock, deadline, "the runtime did not answer in time")
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        else:
            raise ValueError("answer too long")
    head, sep, body = b"".join(chunks).partition(b"\r\n\r\n")
    if not sep:
        raise ValueError("not an HTTP answer")
    status = head.split(b"\r\n", 1)[0].split()
    if len(status) < 2 or status[1] != b"200":
        raise ValueError(f"HTTP status {status[1:2]!r}")
    if b"chunked" in head.lower():
        body = _unchunk(body)
    return json.loads(body)


def _unchunk(body: bytes) -> bytes:
    out = bytearray()
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out += rest[:size]
        body = rest[size + 2 :]
    return bytes(out)


def _text(value: Any) -> str | None:
    if not isinstance(value, str) or not value:
        return None
    return value[:MAX_NAME_CHARS]


def _missing(note: str) -> Names:
    return (None, None, None, note)


def names_from_answer(runtime: str, doc: Any) -> Names:
    """The names in a runtime's answer about one container."""
    if not isinstance(doc, dict):
        return _missing(f"the {runtime} API gave no container")
    if runtime == "cri-o":
        labels = doc.get("labels")
        name = doc.get("name")
    else:
        config = doc.get("Config")
        labels = config.get("Labels") if isinstance(config, dict) else None
        name = doc.get("Name")
        if isinstance(name, str):
            name = name.lstrip("/")
    labels = labels if isinstance(labels, dict) else {}
    return (
        # a pod's container: Kubernetes' name for it, not the runtime's k8s_... name
        _text(labels.get(CONTAINER_NAME_LABEL)) or _text(name),
        _text(labels.get(POD_NAME_LABEL)),
        _text(labels.get(POD_NAMESPACE_LABEL)),
        None,
    )


class RuntimeNames:
    """Container names by (runtime, id), asked once and cached."""

    def __init__(
        self,
        sockets: dict[str, tuple[tuple[str, ...], str]] | None = None,
        timeout_s: float = TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sockets = SOCKETS if sockets is None else sockets
        self._timeout_s = timeout_s
        self._clock = clock
        #: (runtime, id) -> (names, when to ask again; None: never)
        self._cache: dict[tuple[str, str], tuple[Names, float | None]] = {}
        #: runtime -> (why it is not asked, until when): one that timed out or
        #: refused is not asked about its other containers meanwhile, so a hung
        #: daemon costs the poller one timeout per RETRY_S, not one per container
        self._down: dict[str, tuple[str, float]] = {}

    def lookup(self, runtime: str, container_id: str) -> Names:
        key = (runtime, container_id)
        cached = self._cache.get(key)
        now = self._clock()
        if cached is not None and (cached[1] is None or now < cached[1]):
            return cached[0]
        names = self._ask(runtime, container_id)
        retry = None if names[3] is None else now + RETRY_S
        if len(self._cache) > 4096:
            self._cache.clear()
        self._cache[key] = (names, retry)
        return names

    def _ask(self, runtime: str, container_id: str) -> Names:
        known = self._sockets.get(runtime)
        if known is None:
            if runtime == "containerd":
                return _missing("containerd has no HTTP API: ids only")
            return _missing("the cgroup does not name the runtime: ids only")
        paths, request = known
        present = [p for p in paths if os.path.exists(p)]
        if not present:
            return _missing(f"no {runtime} API socket ({', '.join(paths)}): ids only")
        socket_path = present[0]
        down = self._down.get(runtime)
        if down is not None and self._clock() < down[1]:
            return _missing(down[0])
        try:
            doc = http_get_json(socket_path, request.format(id=container_id), self._timeout_s)
        except PermissionError:
            note = f"not permitted to use {socket_path}: ids only"
            self._down[runtime] = (note, self._clock() + RETRY_S)
            return _missing(note)
        except OSError as exc:
            reason = str(exc) or type(exc).__name__
            note = f"the {runtime} API at {socket_path} did not answer ({reason})"
            self._down[runtime] = (note, self._clock() + RETRY_S)
            return _missing(note)
        except ValueError as exc:  # it answered: about this container only
            return _missing(f"the {runtime} API at {socket_path} gave no answer here ({exc})")
        return names_from_answer(runtime, doc)
