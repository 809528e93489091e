"""Where the attach screen's events come from: a live hook, or a recording.

Both push events into an :class:`AttachState` from their own thread; the screen
only reads the state.  ``connect()`` may block (socket, hello): the screen calls
it from a thread worker, never on the UI thread.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Protocol

from gputui import fmt
from gputui.analysis.roofline import Roof
from gputui.ceilings.cache import roof_for
from gputui.client.hook import AttachError, HookClient
from gputui.errors import GputuiError
from gputui.nvml.gpu_watch import GpuWatch
from gputui.protocol import paths
from gputui.protocol.fields import SchemaError
from gputui.protocol.schema import Hello
from gputui.recording.attach import (
    AttachRecorder,
    AttachRecording,
    read_attach_bytes,
    read_attach_recording,
)
from gputui.recording.io import embedded_bytes
from gputui.recording.replay import RecordingError
from gputui.session.attach import STEP_WINDOW, AttachState
from gputui.session.reading import deliver
from gputui.snapshot.model import DeviceSnapshot

DEMO_RESOURCE = "attach_demo.jsonl.gz"
#: the embedded sessions ``gputui attach --demo NAME`` plays (the first: --demo);
#: "ddp" holds every rank of a job (the rank view)
DEMO_RESOURCES = {"h100": DEMO_RESOURCE, "ddp": "attach_demo_ddp.jsonl.gz"}
#: how each says what it is (a report's ``recording`` label, a screen's header)
DEMO_LABELS = {
    "h100": "demo: transformer training on an H100",
    "ddp": "demo: a DDP job on two H100s, one rank slower (the rank view)",
}
#: steps a capture asked for from a screen records, after its warm-up steps (one
#: rank's, or every rank's at once in the rank view)
CAPTURE_STEPS = 5
CAPTURE_WARMUP_STEPS = 1


def ask_capture(
    client: HookClient,
    steps: int,
    flops: bool,
    capture_id: str | None,
    auto: bool,
    start_step: int | None = None,
) -> str:
    """A capture as a screen asks one rank for it: after the warm-up steps, with
    the shapes where it has FLOPs; its id."""
    return client.request_capture(
        steps=steps,
        warmup=CAPTURE_WARMUP_STEPS,
        shapes=flops,
        flops=flops,
        start_step=start_step,
        capture_id=capture_id,
        auto=auto,
    )


class AttachFeed(Protocol):
    """What the screen needs from a source of hook events."""

    pid: int | None
    is_replay: bool
    label: str

    def connect(self, state: AttachState) -> None:
        """Start delivering events into ``state`` (may block; raises GputuiError)."""

    def now(self) -> float:
        """The time the data describes (a recording's own time when replaying)."""

    def request_capture(
        self, steps: int, flops: bool = False, capture_id: str | None = None, auto: bool = False
    ) -> str:
        """Ask for a profiler capture (``flops``: with FLOPs and shapes; ``auto``:
        the automatic capture, of id ``capture_id``); returns its id (raises
        GputuiError)."""

    def request_memory_snapshot(self, steps: int) -> str:
        """Ask for a memory snapshot; returns its id (raises GputuiError)."""

    def close(self) -> None: ...


def roof_of(hello: Hello) -> Roof | None:
    """The roof of the job's GPU: measured by ``gputui bench`` on it, else its
    datasheet (reads a small cache file: call it off the UI thread)."""
    device = hello.device
    if device is None:
        return None
    return roof_for(device.uuid, device.name)


class LiveFeed:
    """A hooked job on this machine.  ``connect`` again reconnects (key r)."""

    is_replay = False

    def __init__(
        self,
        pid: int,
        client: HookClient | None = None,
        record_path: str | os.PathLike[str] | None = None,
        history: int = STEP_WINDOW,
    ) -> None:
        self.pid: int | None = pid
        self.label = f"pid {pid}"
        self.history = history
        self._client = client  # an already connected client (the CLI connects first)
        self._record_path = record_path
        self._recorder: AttachRecorder | None = None
        self._live: HookClient | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._gpu_watch: GpuWatch | None = None
        #: sample the job's GPU while attached (tests without NVML turn it off)
        self.watch_gpu = True
        #: the hello of the last connection: a restarted job is found by it
        self._last_hello: Hello | None = client.hello if client is not None else None

    def _connect_or_follow(self) -> HookClient:
        """Connect to the job; when its process has exited and one hooked job of
        ours now runs the very same command (a restart), connect to that one."""
        assert self.pid is not None
        try:
            return HookClient.connect(self.pid)
        except AttachError:
            last = self._last_hello
            if last is None or paths.pid_alive(self.pid):
                raise
            gone = self.pid
        same = restarted_job(last, exclude=gone)
        if same is None:
            command = fmt.truncate(fmt.clean_all(last.argv), 60)
            raise AttachError(
                f"gputui attach: process {gone} has exited, and no hooked job of yours "
                f"runs its command ({command}) now; start it again, then r"
            )
        client = HookClient.connect(same)
        self.pid = same
        self.label = f"pid {same}"
        return client

    @property
    def recorder(self) -> AttachRecorder | None:
        return self._recorder

    def connect(self, state: AttachState) -> None:
        assert self.pid is not None
        with self._lock:
            client, self._client = self._client, None
            old = self._live
        if old is not None:
            old.close()
        if client is None:
            client = self._connect_or_follow()
        with self._lock:
            if self._closed:
                client.close()
                return
            self._live = client
            if self._recorder is None and self._record_path is not None:
                # One file per session: a reconnect keeps writing to it.
                self._recorder = AttachRecorder(
                    self._record_path, client.hello_raw, self.pid, note="gputui attach --record"
                )
        self._last_hello = client.hello
        state.set_hello(client.hello)
        state.set_roof(roof_of(client.hello))
        recorder = self._recorder
        client.start(on_event=state.add, on_raw=recorder.write if recorder else None)
        client.subscribe(history=self.history, memory=True)
        self._watch_gpu(client, state, recorder)

    def _watch_gpu(
        self, client: HookClient, state: AttachState, recorder: AttachRecorder | None
    ) -> None:
        """Sample the job's GPU (by the UUID its hook reported) while attached."""
        device = client.hello.device
        with self._lock:
            old, self._gpu_watch = self._gpu_watch, None
        if old is not None:
            old.stop()
        if device is None or not self.watch_gpu:
            state.set_gpu_reason("the job uses no CUDA device" if device is None else None)
            return

        def sampled(sample: DeviceSnapshot) -> None:
            state.add_gpu(sample)
            if recorder is not None:
                recorder.write_gpu(sample)

        watch = GpuWatch(
            device.uuid, device.index, on_sample=sampled, on_reason=state.set_gpu_reason
        )
        with self._lock:
            if self._closed:
                return
            self._gpu_watch = watch
        watch.start()

    def now(self) -> float:
        return time.time()

    def request_capture(
        self, steps: int, flops: bool = False, capture_id: str | None = None, auto: bool = False
    ) -> str:
        client = self._live
        if client is None:
            raise AttachError("gputui attach: not connected")
        return ask_capture(client, steps, flops, capture_id, auto)

    def request_memory_snapshot(self, steps: int) -> str:
        client = self._live
        if client is None:
            raise AttachError("gputui attach: not connected")
        return client.request_memory_snapshot(steps)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            client, self._live = self._live, None
            watch, self._gpu_watch = self._gpu_watch, None
        if watch is not None:
            watch.stop()
        if client is not None:
            client.close()
        if self._recorder is not None:
            self._recorder.close()


def restarted_job(hello: Hello, exclude: int, timeout_s: float = 1.0) -> int | None:
    """The one hooked job of ours, other than ``exclude``, that runs the same
    command in the same directory as ``hello`` said; None when none or several."""
    from gputui.client.hook import hook_summary

    found = []
    for pid in sorted(paths.list_sockets()):
        if pid == exclude:
            continue
        try:
            other = hook_summary(pid, timeout=timeout_s)
        except (GputuiError, OSError):
            continue
        if other.argv == hello.argv and other.cwd == hello.cwd:
            found.append(pid)
    return found[0] if len(found) == 1 else None


class Playback:
    """The pacing thread of a recording's replay (one at a time): started over on
    each connect, stopped and joined (up to 2 s) on close."""

    _thread: threading.Thread | None
    _stop: threading.Event

    def _start_playing(self, name: str) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._play, name=name, daemon=True)
        self._thread.start()

    def _play(self) -> None:
        raise NotImplementedError

    def _halt(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2.0)
        self._thread = None

    def close(self) -> None:
        self._halt()


class ReplayFeed(Playback):
    """Plays an attach recording at its own pace (times ``speed``) from a thread.

    ``advance_to(t)`` plays it synchronously instead (tests, screenshots): the
    screen then shows exactly the recording's state at ``t`` seconds, and "now"
    is the recording's time, so ages and uptimes are reproducible.
    """

    is_replay = True

    def __init__(self, recording: AttachRecording, label: str, speed: float = 1.0) -> None:
        if not speed > 0:
            raise GputuiError("gputui attach: --speed must be greater than 0")
        self.recording = recording
        self.pid = recording.pid
        self.label = label
        self.speed = speed
        try:
            self.hello = Hello.from_wire(recording.hello)
        except SchemaError as exc:
            raise RecordingError(f"{label}: the recorded hello is invalid ({exc})") from None
        self.roof = roof_of(self.hello)
        self._position = 0
        self._played_t = 0.0
        self._state: AttachState | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        # The recording's wall clock at its start: hello's own time, else the header's.
        self._t0 = self.hello.status.t or recording.created_s or 0.0

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], speed: float = 1.0) -> ReplayFeed:
        recording = read_attach_recording(path)
        return cls(recording, f"replay of {Path(path).name}", speed)

    @classmethod
    def demo(cls, speed: float = 1.0) -> ReplayFeed:
        return cls(demo_recording("h100"), DEMO_LABELS["h100"], speed)

    @property
    def duration_s(self) -> float:
        return self.recording.messages[-1][0] if self.recording.messages else 0.0

    @property
    def played_s(self) -> float:
        return self._played_t

    @property
    def finished(self) -> bool:
        return self._position >= len(self.recording.messages)

    def connect(self, state: AttachState, autoplay: bool = True) -> None:
        """Start over from the beginning (key r replays the recording again)."""
        self._halt()
        with self._lock:
            self._position = 0
            self._played_t = 0.0
            self._state = state
        state.reset()
        state.set_hello(self.hello)
        state.set_roof(self.roof)
        if autoplay:
            self._start_playing("gputui-attach-replay")

    def advance_to(self, t: float) -> None:
        """Deliver every message recorded up to ``t`` seconds, on this thread."""
        state = self._state
        if state is None:
            raise RuntimeError("connect() first")
        messages = self.recording.messages
        with self._lock:
            while self._position < len(messages) and messages[self._position][0] <= t:
                self._played_t, msg = messages[self._position]
                deliver(msg, state)
                self._position += 1
            self._played_t = max(self._played_t, min(t, self.duration_s))

    def play_all(self) -> None:
        self.advance_to(float("inf"))

    def _play(self) -> None:
        started = time.monotonic()
        messages = self.recording.messages
        stop = self._stop
        while not stop.is_set():
            with self._lock:
                if self._position >= len(messages):
                    return
                due = messages[self._position][0] / self.speed
            wait = due - (time.monotonic() - started)
            # Pacing the playback, not synchronisation: an Event wait wakes at once on close.
            if wait > 0 and stop.wait(min(wait, 0.25)):
                return
            if wait <= 0:
                self.advance_to((time.monotonic() - started) * self.speed)

    def now(self) -> float:
        return self._t0 + self._played_t

    def request_capture(
        self, steps: int, flops: bool = False, capture_id: str | None = None, auto: bool = False
    ) -> str:
        raise GputuiError("this is a recording: captures need a live job")

    def request_memory_snapshot(self, steps: int) -> str:
        raise GputuiError("this is a recording: memory snapshots need a live job")


def demo_recording(name: str) -> AttachRecording:
    """The embedded attach session ``name`` (:data:`DEMO_RESOURCES`)."""
    try:
        raw = embedded_bytes(DEMO_RESOURCES[name])
    except (FileNotFoundError, OSError):
        raise RecordingError("the embedded demo recording is missing from this install") from None
    return read_attach_bytes(raw, f"attach demo recording {name!r}")
