"""Where the rank view's events come from: one connection per local rank of a
job (live), or a multi-rank recording.

Each rank has its own :class:`AttachState`, filled by its own client's reader
thread (live) or by the replay thread; the rank view only reads snapshots of
them.  Selecting a rank opens the single-rank attach screen on that rank's state
through :class:`RankFeed`, so its history is there at once and its connection
stays open when the screen closes.  Nothing here imports textual.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gputui.client.hook import AttachError, HookClient
from gputui.client.job_group import JobGroup, group_jobs
from gputui.errors import GputuiError
from gputui.nvml.gpu_watch import GpuWatches
from gputui.protocol.fields import SchemaError
from gputui.protocol.schema import Hello
from gputui.recording.attach import (
    AttachRecorder,
    AttachRecording,
    read_attach_recording,
)
from gputui.recording.replay import RecordingError
from gputui.session.attach import STEP_WINDOW, AttachState, StateSnapshot
from gputui.session.feeds import CAPTURE_WARMUP_STEPS, Playback, ask_capture, roof_of
from gputui.session.rank_view import RankInput, sync_start
from gputui.session.reading import deliver
from gputui.snapshot.model import DeviceSnapshot

#: connections opened at once when attaching to a job's ranks
CONNECT_THREADS = 16


class RankLink:
    """One rank: what discovery said of it, its state, its connection."""

    def __init__(self, hello: Hello, stream: int) -> None:
        self.hello = hello
        self.pid = hello.pid
        self.stream = stream
        self.state = AttachState()
        self.client: HookClient | None = None

    @property
    def label(self) -> str:
        rank = self.hello.rank
        return f"rank {rank}" if rank is not None else f"pid {self.pid}"


def rank_input(snap: StateSnapshot, fallback: Hello) -> RankInput:
    """What :func:`gputui.session.rank_view.summarize` reads of one rank's state."""
    gone = None
    if snap.disconnected is not None:
        gone = snap.disconnected.reason
    elif snap.connect_error is not None:
        gone = snap.connect_error
    return RankInput(
        hello=snap.hello or fallback,
        steps=snap.steps,
        status=snap.status,
        memory=snap.memory,
        capture=snap.capture,
        gpu=snap.gpu_unprofiled,
        memory_snapshot=snap.memsnap,
        roof=snap.roof,
        python_profile=snap.python_profile,
        compile_report=snap.compile_report,
        gone=gone,
        gone_clean=bool(snap.disconnected is not None and snap.disconnected.clean),
    )


class RankFeed:
    """The single-rank attach screen's feed for one rank of the rank view: the
    rank's connection belongs to the rank view, so closing the screen leaves it
    open, and "connecting" finds it already connected."""

    def __init__(self, parent: LiveRanksFeed | ReplayRanksFeed, link: RankLink) -> None:
        self.parent = parent
        self.link = link
        self.pid: int | None = link.pid
        self.is_replay = parent.is_replay
        self.label = f"{link.label} of {parent.label}"

    def connect(self, state: AttachState) -> None:
        snap = state.snapshot()
        if isinstance(self.parent, LiveRanksFeed) and (
            snap.disconnected is not None or snap.connect_error is not None
        ):
            self.parent.reconnect(self.link)
            return
        state.set_connecting(False)

    def now(self) -> float:
        return self.parent.now()

    def request_capture(
        self, steps: int, flops: bool = False, capture_id: str | None = None, auto: bool = False
    ) -> str:
        client = self.link.client
        if client is None or not isinstance(self.parent, LiveRanksFeed):
            raise GputuiError("this is a recording: captures need a live job")
        return ask_capture(client, steps, flops, capture_id, auto)

    def request_memory_snapshot(self, steps: int) -> str:
        if not isinstance(self.parent, LiveRanksFeed):
            raise GputuiError("this is a recording: memory snapshots need a live job")
        client = self.link.client
        if client is None:
            raise GputuiError(f"gputui attach: {self.link.label} is not connected")
        return client.request_memory_snapshot(steps)

    def close(self) -> None:
        """The rank view owns the connection: nothing to close here."""


@dataclass(frozen=True)
class CaptureAsk:
    """A synchronized capture as asked: its id, the first step every rank
    records, and the ranks that could not be asked (with why)."""

    id: str
    start_step: int
    asked: int
    errors: tuple[str, ...]


class LiveRanksFeed:
    """The local ranks of a running job, one hook connection each."""

    is_replay = False
    _ids = itertools.count(1)

    def __init__(
        self,
        job: JobGroup,
        record_path: str | os.PathLike[str] | None = None,
        history: int = STEP_WINDOW,
        connect: Callable[[int], HookClient] = HookClient.connect,
    ) -> None:
        self.job = job
        self.links = [RankLink(h, k) for k, h in enumerate(job.hellos)]
        self.history = history
        self.label = _job_label(job)
        self._connect = connect
        self._record_path = record_path
        self._recorder: AttachRecorder | None = None
        self._watches: GpuWatches | None = None
        self._lock = threading.Lock()
        self._closed = False
        #: sample the ranks' GPUs while attached (tests without NVML turn it off)
        self.watch_gpu = True

    @property
    def recorder(self) -> AttachRecorder | None:
        return self._recorder

    def now(self) -> float:
        return time.time()

    def connect(self) -> None:
        """Connect to every rank at once (blocks: call it off the UI thread)."""
        for link in self.links:
            link.state.set_connecting(True)
        with ThreadPoolExecutor(max_workers=min(CONNECT_THREADS, len(self.links))) as pool:
            clients = list(pool.map(self._open, self.links))
        connected = [
            (link, c) for link, c in zip(self.links, clients, strict=True) if c is not None
        ]
        with self._lock:
            if self._closed:
                for _link, client in connected:
                    client.close()
                return
            if self._record_path is not None and connected and self._recorder is None:
                first = connected[0][1]
                self._recorder = AttachRecorder(
                    self._record_path,
                    first.hello_raw,
                    first.pid,
                    note="gputui attach --record (the ranks of a job)",
                    ranks=[c.pid for _l, c in connected],
                )
                # Streams follow the connected ranks; the first one's hello is
                # the header's.
                for stream, (link, client) in enumerate(connected):
                    link.stream = stream
                    if stream:
                        self._recorder.write(client.hello_raw, stream)
            if self.watch_gpu and self._watches is None:
                self._watches = GpuWatches()
        for link, client in connected:
            self._start(link, client)

    def _open(self, link: RankLink) -> HookClient | None:
        try:
            return self._connect(link.pid)
        except GputuiError as exc:
            link.state.set_connecting(False, str(exc))
        except OSError as exc:
            link.state.set_connecting(False, f"cannot connect: {exc}")
        return None

    def _start(self, link: RankLink, client: HookClient) -> None:
        link.client = client
        link.hello = client.hello
        link.state.set_hello(client.hello)
        link.state.set_roof(roof_of(client.hello))
        recorder = self._recorder
        stream = link.stream
        on_raw = None if recorder is None else (lambda msg: recorder.write(msg, stream))
        client.start(on_event=link.state.add, on_raw=on_raw)
        try:
            client.subscribe(history=self.history, memory=True)
        except AttachError as exc:
            link.state.set_connecting(False, str(exc))
            return
        watches = self._watches
        if watches is not None:
            device = client.hello.device
            state = link.state

            def sampled(sample: DeviceSnapshot) -> None:
                state.add_gpu(sample)
                if recorder is not None:
                    recorder.write_gpu(sample, stream)

            watches.add(None if device is None else device.uuid, sampled, state.set_gpu_reason)
        else:
            link.state.set_gpu_reason(
                "the job uses no CUDA device" if client.hello.device is None else None
            )

    def reconnect(self, link: RankLink) -> None:
        """Connect one rank again (its screen's r key), into the same state."""
        old, link.client = link.client, None
        if old is not None:
            old.close()
        link.state.set_connecting(True)
        client = self._open(link)
        if client is None:
            return
        with self._lock:
            if self._closed:
                client.close()
                return
            if self._recorder is not None:
                self._recorder.write(client.hello_raw, link.stream)
        self._start(link, client)

    def rank_feed(self, link: RankLink) -> RankFeed:
        return RankFeed(self, link)

    def request_capture(
        self, steps: int, capture_id: str | None = None, auto: bool = False
    ) -> CaptureAsk:
        """Ask every connected rank to profile the same ``steps`` steps (with
        FLOPs and shapes, as every capture), from a step far enough ahead that
        the request reaches all of them first; ``auto``: the automatic capture,
        of id ``capture_id``."""
        snaps = [link.state.snapshot() for link in self.links]
        lasts = [_last(s) for s in snaps]
        step_s = _typical_step(snaps)
        start = sync_start(lasts, step_s, CAPTURE_WARMUP_STEPS)
        cid = capture_id or f"ranks-{os.getpid()}-{next(self._ids)}"
        errors: list[str] = []
        asked = 0
        for link, snap in zip(self.links, snaps, strict=True):
            client = link.client
            if client is None or snap.disconnected is not None:
                errors.append(f"{link.label}: not connected")
                continue
            try:
                ask_capture(client, steps, True, cid, auto, start_step=start)
            except GputuiError as exc:
                errors.append(f"{link.label}: {exc}")
                continue
            link.state.set_capture_wanted(cid)
            asked += 1
        if not asked:
            raise GputuiError("no rank is connected: nothing to capture")
        return CaptureAsk(cid, start, asked, tuple(errors))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            watches, self._watches = self._watches, None
            clients = [link.client for link in self.links]
        if watches is not None:
            watches.stop()
        for client in clients:
            if client is not None:
                client.close()
        if self._recorder is not None:
            self._recorder.close()


def _last(snap: StateSnapshot) -> int | None:
    last = snap.steps[-1].index if snap.steps else None
    status = snap.status
    if status is not None and status.last_step is not None:
        last = max(last if last is not None else -1, status.last_step)
    return last


def _typical_step(snaps: Sequence[StateSnapshot]) -> float | None:
    recent = [s.status.recent_step_s for s in snaps if s.status and s.status.recent_step_s]
    return max(recent) if recent else None


def _job_label(job: JobGroup) -> str:
    world = job.world_size
    text = f"{len(job.hellos)} local ranks" + (f" of {world}" if world else "")
    if job.launcher_pid is not None:
        text += f", launcher pid {job.launcher_pid}"
    return text


class ReplayRanksFeed(Playback):
    """A recorded multi-rank session, played into the ranks' states at its own
    pace (times ``speed``) from a thread, or up to a moment with ``advance_to``
    (tests, screenshots)."""

    is_replay = True

    def __init__(self, recording: AttachRecording, label: str, speed: float = 1.0) -> None:
        if not speed > 0:
            raise GputuiError("gputui attach: --speed must be greater than 0")
        if not recording.ranks:
            raise RecordingError(f"{label}: a recording of one process, not of a job's ranks")
        self.recording = recording
        self.speed = speed
        hellos: list[Hello] = []
        for stream in recording.ranks:
            try:
                hellos.append(Hello.from_wire(stream.hello))
            except SchemaError as exc:
                raise RecordingError(f"{label}: a recorded hello is invalid ({exc})") from None
        self.job = JobGroup(tuple(hellos), launcher_pid=_common_parent(hellos))
        self.links = [RankLink(h, k) for k, h in enumerate(hellos)]
        self.label = f"{label}: {_job_label(self.job)}"
        # One timeline: (t, stream, message), in recorded order.
        merged = [
            (t, k, msg) for k, stream in enumerate(recording.ranks) for t, msg in stream.messages
        ]
        merged.sort(key=lambda item: (item[0], item[1]))
        self._timeline = merged
        self._position = 0
        self._played_t = 0.0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._t0 = hellos[0].status.t or recording.created_s or 0.0

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], speed: float = 1.0) -> ReplayRanksFeed:
        recording = read_attach_recording(path)
        return cls(recording, f"replay of {Path(path).name}", speed)

    @property
    def duration_s(self) -> float:
        return self._timeline[-1][0] if self._timeline else 0.0

    @property
    def played_s(self) -> float:
        return self._played_t

    @property
    def finished(self) -> bool:
        return self._position >= len(self._timeline)

    def now(self) -> float:
        return self._t0 + self._played_t

    def connect(self, autoplay: bool = True) -> None:
        """Start over from the beginning."""
        self._halt()
        with self._lock:
            self._position = 0
            self._played_t = 0.0
        for link in self.links:
            link.state.reset()
            link.state.set_hello(link.hello)
        if autoplay:
            self._start_playing("gputui-ranks-replay")

    def advance_to(self, t: float) -> None:
        """Deliver every message recorded up to ``t`` seconds, on this thread."""
        timeline = self._timeline
        with self._lock:
            while self._position < len(timeline) and timeline[self._position][0] <= t:
                self._played_t, stream, msg = timeline[self._position]
                _deliver(msg, self.links[stream].state)
                self._position += 1
            self._played_t = max(self._played_t, min(t, self.duration_s))

    def _play(self) -> None:
        started = time.monotonic()
        stop = self._stop
        while not stop.is_set():
            with self._lock:
                if self._position >= len(self._timeline):
                    return
                due = self._timeline[self._position][0] / self.speed
            wait = due - (time.monotonic() - started)
            # Pacing the playback, not synchronisation: an Event wait wakes at once on close.
            if wait > 0 and stop.wait(min(wait, 0.25)):
                return
            if wait <= 0:
                self.advance_to((time.monotonic() - started) * self.speed)

    def rank_feed(self, link: RankLink) -> RankFeed:
        return RankFeed(self, link)

    def request_capture(
        self, steps: int, capture_id: str | None = None, auto: bool = False
    ) -> CaptureAsk:
        raise GputuiError("this is a recording: captures need a live job")


def _deliver(msg: Mapping[str, Any], state: AttachState) -> None:
    if msg.get("type") == "hello":  # the rank was connected again
        try:
            state.set_hello(Hello.from_wire(msg))
        except SchemaError:
            pass
        return
    deliver(msg, state)


def _common_parent(hellos: Sequence[Hello]) -> int | None:
    jobs = group_jobs(hellos)
    return jobs[0].launcher_pid if len(jobs) == 1 else None
