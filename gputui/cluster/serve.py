"""``gputui serve --stdio``: this node's snapshots as JSON lines on standard output.

The remote end of ``gputui cluster --ssh``.  No socket is opened: the stream is
the standard output of a process that ssh started, and it ends when its reader
goes away, whichever way that shows first: standard input reaches its end (ssh
closes it when the viewer's side closes) or a write fails (a broken pipe).

Between two snapshots the process sleeps on an event; a snapshot costs one
sample of the source, one JSON encoding and one write.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, BinaryIO

from gputui.cluster.wire import encode, hello_message, snapshot_message
from gputui.snapshot.model import Snapshot
from gputui.sources.base import SnapshotSource

#: the hooked jobs (a connection to each hook) are read again at least this often,
#: and whenever the set of hooked processes changes
JOBS_REFRESH_S = 10.0


class HostOnlySource(SnapshotSource):
    """A node without a usable NVIDIA driver: its host values, no GPU, and why."""

    label = "live"

    def __init__(self, reason: str) -> None:
        from gputui.host.collector import HostCollector

        self.reason = reason
        self._host = HostCollector()

    def sample(self) -> Snapshot:
        start = time.perf_counter()
        host = self._host.sample()
        return Snapshot(
            timestamp_s=time.time(),
            host=host,
            sample_latency_ms=(time.perf_counter() - start) * 1000.0,
            error=self.reason,
        )

    def close(self) -> None:
        pass


class JobsCache:
    """What ``gputui ls`` says, read again only when the hooked pids change or
    ``JOBS_REFRESH_S`` passed: most refreshes cost one directory listing."""

    def __init__(
        self,
        pids: Callable[[], set[int]],
        read: Callable[[], list[dict[str, Any]]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pids, self._read, self._clock = pids, read, clock
        self._seen: set[int] = set()
        self._jobs: list[dict[str, Any]] = []
        self._at = -JOBS_REFRESH_S

    def jobs(self) -> list[dict[str, Any]]:
        try:
            pids = self._pids()
        except OSError:
            pids = set()
        now = self._clock()
        if not pids:
            self._seen, self._jobs = set(), []
        elif pids != self._seen or now - self._at >= JOBS_REFRESH_S:
            try:
                self._jobs = self._read()
            except Exception:  # a job that vanished mid-read: the last list stands
                pass
            self._seen, self._at = pids, now
        return self._jobs


def _watch_eof(stream: BinaryIO, closed: threading.Event) -> None:
    try:
        while stream.read(4096):
            pass
    except (OSError, ValueError):
        pass
    closed.set()


def serve(
    source: SnapshotSource,
    out: BinaryIO,
    stdin: BinaryIO | None,
    interval_s: float,
    host: str,
    gputui_version: str,
    jobs: JobsCache | None = None,
    gpu_unavailable: str | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Write the hello, then a snapshot every ``interval_s`` until standard input
    ends, a write fails or ``stop`` is set.  Returns 0."""
    closed = stop or threading.Event()
    if stdin is not None:
        threading.Thread(
            target=_watch_eof, args=(stdin, closed), name="gputui-serve-stdin", daemon=True
        ).start()
    try:
        out.write(
            encode(
                hello_message(host, gputui_version, interval_s, source.label, source.is_recording)
            )
        )
        out.flush()
        next_at = time.monotonic()
        while True:  # the first snapshot is written even when the input is already closed
            try:
                snapshot = source.sample()
            except Exception as exc:  # a damaged recording line, a vanished process: said
                snapshot = Snapshot(timestamp_s=time.time(), error=f"sampling failed: {exc}")
            message = snapshot_message(
                snapshot, jobs.jobs() if jobs is not None else [], gpu_unavailable
            )
            out.write(encode(message))
            out.flush()
            next_at += interval_s
            delay = next_at - time.monotonic()
            if delay < 0:  # behind (a slow sample, a stopped process): no burst after
                next_at, delay = time.monotonic(), 0.0
            if closed.wait(delay):
                break
    except (BrokenPipeError, ConnectionResetError, ValueError):
        pass  # the reader went away (ValueError: the stream was closed under us)
    return 0
