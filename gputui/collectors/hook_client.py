"""Viewer side of the hook protocol, shared by the CLI and the attach screen.

    client = HookClient.connect(pid)          # reads hello; raises AttachError
    client.subscribe(history=1000)
    client.start(on_event=callback)           # background reader thread
    for event in client.events(timeout=1.0):  # or: client.get(timeout)
        ...                                   # StepBatch, Status, MemoryBatch, ...
    client.request_capture(steps=5)
    client.close()

Every event is a frozen dataclass holding plain values; the last one is always
:class:`Disconnected`.  Free of textual: the TUI feeds ``on_event`` into
``call_from_thread``.
"""

from __future__ import annotations

import errno
import itertools
import os
import pwd
import queue
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from gputui.errors import GputuiError
from gputui.protocol import PROTOCOL_VERSION, FrameError, FrameReader, encode, messages, paths


class AttachError(GputuiError):
    """Could not connect to a job's hook; the message says what to do."""


def not_hooked_message(pid: int) -> str:
    hint = (
        f"gputui attach: process {pid} has no gputui hook. Start the job with "
        "'gputui run -- python train.py ...', or add 'import gputui.hook; "
        "gputui.hook.install()' to it; on Python >= 3.14 'gputui attach --inject "
        f"{pid}' loads the hook into the running job"
    )
    if _env_of(pid).get("GPUTUI_RUN") == "1":
        hint = (
            f"gputui attach: process {pid} was started by 'gputui run' but has not "
            "started training yet (the hook opens its socket at the first step, "
            "data batch or forward); try again in a moment"
        )
    return hint


def _env_of(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            data = fh.read()
    except OSError:
        return {}
    env: dict[str, str] = {}
    for item in data.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return env


def _owner(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


# -- events -------------------------------------------------------------------------
@dataclass(frozen=True)
class Hello:
    pid: int
    argv: tuple[str, ...]
    python: str
    torch: str | None
    cuda: str | None
    cuda_in_use: bool
    device: Mapping[str, Any] | None
    rank: int | None
    local_rank: int | None
    world_size: int | None
    hostname: str
    hook_version: str
    protocol: int
    started: float
    steps: int
    recent_step_s: float | None
    raw: Mapping[str, Any] = field(repr=False)

    @classmethod
    def from_msg(cls, msg: Mapping[str, Any]) -> Hello:
        return cls(
            pid=int(msg.get("pid", 0)),
            argv=tuple(str(a) for a in msg.get("argv") or ()),
            python=str(msg.get("python", "")),
            torch=msg.get("torch"),
            cuda=msg.get("cuda"),
            cuda_in_use=bool(msg.get("cuda_in_use")),
            device=msg.get("device"),
            rank=msg.get("rank"),
            local_rank=msg.get("local_rank"),
            world_size=msg.get("world_size"),
            hostname=str(msg.get("hostname", "")),
            hook_version=str(msg.get("hook_version", "")),
            protocol=int(msg.get("protocol", msg.get("v", 0))),
            started=float(msg.get("started", 0.0)),
            steps=int(msg.get("steps", 0)),
            recent_step_s=msg.get("recent_step_s"),
            raw=msg,
        )


@dataclass(frozen=True)
class StepRecord:
    """One training step.  Times in seconds; ``phases`` is wall time per phase
    (they add up to ``wall``), ``gpu`` GPU time per phase when CUDA is in use."""

    index: int
    t: float  # wall-clock time the step ended (Unix seconds)
    wall: float
    phases: Mapping[str, float]
    gpu: Mapping[str, float] | None = None
    gpu_total: float | None = None
    samples: int | None = None
    samples_inferred: bool = False
    batches: int = 0
    flags: int = 0

    @property
    def profiled(self) -> bool:
        return bool(self.flags & 1)

    @classmethod
    def from_wire(cls, rec: Mapping[str, Any]) -> StepRecord:
        return cls(
            index=int(rec["i"]),
            t=float(rec.get("t", 0.0)),
            wall=float(rec["wall"]),
            phases=dict(rec.get("phases") or {}),
            gpu=rec.get("gpu"),
            gpu_total=rec.get("gpu_total"),
            samples=rec.get("samples"),
            samples_inferred=bool(rec.get("samples_inferred", False)),
            batches=int(rec.get("batches", 0)),
            flags=int(rec.get("flags", 0)),
        )


@dataclass(frozen=True)
class StepBatch:
    steps: tuple[StepRecord, ...]
    missed: int  # step records this viewer will never get (before steps[0])
    backlog: bool  # part of the history sent after subscribe


@dataclass(frozen=True)
class Synced:
    """The backlog asked for in subscribe() has been delivered."""

    steps: int


@dataclass(frozen=True)
class Status:
    steps: int
    last_step: int | None
    recent_step_s: float | None
    dropped: int
    viewers: int
    errors: tuple[str, ...]
    phases_coarse: bool
    coarse_reasons: tuple[str, ...]
    capture: Mapping[str, Any]
    raw: Mapping[str, Any] = field(repr=False)

    @classmethod
    def from_msg(cls, msg: Mapping[str, Any]) -> Status:
        return cls(
            steps=int(msg.get("steps", 0)),
            last_step=msg.get("last_step"),
            recent_step_s=msg.get("recent_step_s"),
            dropped=int(msg.get("dropped", 0)),
            viewers=int(msg.get("viewers", 0)),
            errors=tuple(msg.get("errors") or ()),
            phases_coarse=bool(msg.get("phases_coarse")),
            coarse_reasons=tuple(msg.get("coarse_reasons") or ()),
            capture=msg.get("capture") or {},
            raw=msg,
        )


@dataclass(frozen=True)
class MemorySample:
    t: float
    device: int
    allocated: int
    reserved: int
    active: int
    peak_allocated: int
    peak_reserved: int
    alloc_retries: int
    ooms: int


@dataclass(frozen=True)
class MemoryBatch:
    samples: tuple[MemorySample, ...]


@dataclass(frozen=True)
class CaptureStatus:
    state: str  # armed, warmup, recording, processing, refused, busy, cancelled, failed
    id: Any
    reason: str | None
    step: int | None
    raw: Mapping[str, Any] = field(repr=False)


@dataclass(frozen=True)
class CaptureResult:
    id: Any
    first_step: int | None
    last_step: int | None
    kernels: tuple[Mapping[str, Any], ...]
    cpu_ops: tuple[Mapping[str, Any], ...]
    by_class: Mapping[str, float]
    gpu_time: Mapping[str, Any] | None
    trace_path: str | None
    error: str | None
    replay: bool  # a result from before this viewer connected
    raw: Mapping[str, Any] = field(repr=False)

    @classmethod
    def from_msg(cls, msg: Mapping[str, Any]) -> CaptureResult:
        return cls(
            id=msg.get("id"),
            first_step=msg.get("first_step"),
            last_step=msg.get("last_step"),
            kernels=tuple(msg.get("kernels") or ()),
            cpu_ops=tuple(msg.get("cpu_ops") or ()),
            by_class=msg.get("by_class") or {},
            gpu_time=msg.get("gpu_time"),
            trace_path=msg.get("trace_path"),
            error=msg.get("error"),
            replay=bool(msg.get("replay")),
            raw=msg,
        )


@dataclass(frozen=True)
class HookMessage:
    """An ERROR from the hook (a request it could not serve) or a PONG."""

    type: str
    raw: Mapping[str, Any]


@dataclass(frozen=True)
class Disconnected:
    """Always the last event.  ``clean``: the job said bye (it is exiting)."""

    reason: str
    clean: bool


Event = (
    StepBatch
    | Synced
    | Status
    | MemoryBatch
    | CaptureStatus
    | CaptureResult
    | HookMessage
    | Disconnected
)


def parse_event(msg: Mapping[str, Any]) -> Event | None:
    kind = msg.get("type")
    if kind == messages.STEPS:
        steps = tuple(StepRecord.from_wire(r) for r in msg.get("steps") or ())
        return StepBatch(steps, int(msg.get("missed", 0)), bool(msg.get("backlog")))
    if kind == messages.STATUS:
        return Status.from_msg(msg)
    if kind == messages.MEMORY:
        samples = []
        for s in msg.get("samples") or ():
            samples.append(
                MemorySample(
                    t=float(s.get("t", 0.0)),
                    device=int(s.get("device", 0)),
                    allocated=int(s.get("allocated", 0)),
                    reserved=int(s.get("reserved", 0)),
                    active=int(s.get("active", 0)),
                    peak_allocated=int(s.get("peak_allocated", 0)),
                    peak_reserved=int(s.get("peak_reserved", 0)),
                    alloc_retries=int(s.get("alloc_retries", 0)),
                    ooms=int(s.get("ooms", 0)),
                )
            )
        return MemoryBatch(tuple(samples))
    if kind == messages.SYNCED:
        return Synced(int(msg.get("steps", 0)))
    if kind == messages.CAPTURE_STATUS:
        return CaptureStatus(
            state=str(msg.get("state")),
            id=msg.get("id"),
            reason=msg.get("reason"),
            step=msg.get("step"),
            raw=msg,
        )
    if kind == messages.CAPTURE_RESULT:
        return CaptureResult.from_msg(msg)
    if kind == messages.BYE:
        return Disconnected("the job is exiting", clean=True)
    if kind in (messages.ERROR, messages.PONG):
        return HookMessage(str(kind), msg)
    return None  # a newer hook's message type: ignore


# -- client -------------------------------------------------------------------------
class HookClient:
    """One connection to one job's hook."""

    _ids = itertools.count(1)

    def __init__(self, pid: int, sock: socket.socket, hello: Hello, reader: FrameReader) -> None:
        self.pid = pid
        self.hello = hello
        self._sock = sock
        self._reader = reader
        self._queue: queue.Queue[Event] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._send_lock = threading.Lock()
        self._closed = False
        self._pending: list[Event] = []  # frames that arrived together with hello
        self._pending_raw: list[Mapping[str, Any]] = []
        self._on_raw: Callable[[Mapping[str, Any]], None] | None = None

    @classmethod
    def connect(cls, pid: int, timeout: float = 5.0) -> HookClient:
        """Connect and read the hello.  Raises :class:`AttachError` with a message
        for the user: no such process, not hooked, another user's, no answer."""
        if pid <= 0:
            raise AttachError(f"gputui attach: invalid pid {pid}")
        path = paths.find_socket(pid)
        if path is None:
            if not paths.pid_alive(pid):
                raise AttachError(f"gputui attach: no process with pid {pid}")
            owner = _owner(pid)
            if owner is not None and owner != os.getuid():
                raise AttachError(
                    f"gputui attach: process {pid} belongs to user {_user_name(owner)}; "
                    "gputui only attaches to your own jobs"
                )
            raise AttachError(not_hooked_message(pid))
        if not paths.pid_alive(pid):
            try:
                os.unlink(path)
            except OSError:
                pass
            raise AttachError(
                f"gputui attach: no process with pid {pid} (removed its stale socket)"
            )
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(path)
        except PermissionError:
            sock.close()
            raise AttachError(f"gputui attach: permission denied on {path}") from None
        except OSError as exc:
            sock.close()
            if exc.errno in (errno.ECONNREFUSED, errno.ENOENT):
                raise AttachError(
                    f"gputui attach: the hook of process {pid} is not accepting connections "
                    "(the job may be exiting)"
                ) from None
            raise AttachError(f"gputui attach: cannot connect to {path}: {exc.strerror}") from None
        uid = paths.peer_uid(sock)
        if uid is not None and uid != paths.current_uid():
            sock.close()
            raise AttachError(f"gputui attach: socket {path} is served by uid {uid}, not us")
        reader = FrameReader()
        try:
            first = _read_one(sock, reader)
        except (OSError, FrameError) as exc:
            sock.close()
            raise AttachError(
                f"gputui attach: the hook of process {pid} did not say hello ({exc})"
            ) from None
        if first is None or first[0].get("type") != messages.HELLO:
            sock.close()
            raise AttachError(
                f"gputui attach: the hook of process {pid} closed the connection before hello"
            )
        hello_msg, rest = first
        if hello_msg.get("v") != PROTOCOL_VERSION:
            sock.close()
            raise AttachError(
                f"gputui attach: process {pid} speaks hook protocol {hello_msg.get('v')}, "
                f"this gputui speaks {PROTOCOL_VERSION}; use matching gputui versions"
            )
        sock.settimeout(None)
        client = cls(pid, sock, Hello.from_msg(hello_msg), reader)
        client._pending_raw = list(rest)
        for msg in rest:
            event = parse_event(msg)
            if event is not None:
                client._pending.append(event)
        return client

    # -- requests -------------------------------------------------------------------
    def _send(self, msg_type: str, **fields: Any) -> None:
        frame = encode(msg_type, **fields)
        with self._send_lock:
            try:
                self._sock.sendall(frame)
            except OSError as exc:
                raise AttachError(f"gputui attach: connection to {self.pid} lost ({exc})") from None

    def subscribe(self, history: int = 0, memory: bool = True) -> None:
        """Start the live stream, beginning with the last ``history`` steps."""
        self._send(messages.SUBSCRIBE, history=int(history), memory=bool(memory))

    def request_capture(
        self,
        steps: int = 5,
        warmup: int = 1,
        shapes: bool = False,
        stacks: bool = False,
        memory: bool = False,
    ) -> str:
        """Ask for a profiler capture of the next ``steps`` steps; returns its id
        (CaptureStatus/CaptureResult events carry it)."""
        cid = f"{os.getpid()}-{next(self._ids)}"
        self._send(
            messages.CAPTURE,
            id=cid,
            steps=int(steps),
            warmup=int(warmup),
            shapes=bool(shapes),
            stacks=bool(stacks),
            memory=bool(memory),
        )
        return cid

    def cancel_capture(self) -> None:
        self._send(messages.CAPTURE_CANCEL)

    def ping(self) -> None:
        self._send(messages.PING)

    # -- reading --------------------------------------------------------------------
    def start(
        self,
        on_event: Callable[[Event], None] | None = None,
        on_raw: Callable[[Mapping[str, Any]], None] | None = None,
    ) -> None:
        """Start the reader thread.  Events go to ``on_event`` (called on the
        reader thread) or, without it, to the queue read by get()/events().
        ``on_raw`` sees every decoded message first (to record a session)."""
        if self._thread is not None:
            return
        self._on_raw = on_raw
        deliver = on_event if on_event is not None else self._queue.put
        self._thread = threading.Thread(
            target=self._read_loop, args=(deliver,), name=f"gputui-attach-{self.pid}", daemon=True
        )
        self._thread.start()

    def _read_loop(self, deliver: Callable[[Event], None]) -> None:
        if self._on_raw is not None:
            for msg in self._pending_raw:
                self._on_raw(msg)
        self._pending_raw = []
        for event in self._pending:
            deliver(event)
        self._pending = []
        reason = "the job closed the connection"
        clean = False
        try:
            while True:
                try:
                    data = self._sock.recv(262144)
                except OSError as exc:
                    reason = "closed" if self._closed else f"connection error: {exc}"
                    break
                if not data:
                    if self._reader.pending:
                        reason = "the job closed the connection in the middle of a message"
                    break
                for msg in self._reader.feed(data):
                    if self._on_raw is not None:
                        self._on_raw(msg)
                    try:
                        parsed = parse_event(msg)
                    except (TypeError, ValueError, AttributeError):
                        continue  # a malformed message: skip it, keep the stream
                    if parsed is None:
                        continue
                    if isinstance(parsed, Disconnected):
                        reason, clean = parsed.reason, True
                        continue
                    deliver(parsed)
        except FrameError as exc:
            reason = f"bad data from the hook: {exc}"
        if self._closed:
            reason = "closed by the viewer"
        deliver(Disconnected(reason, clean))

    def get(self, timeout: float | None = None) -> Event | None:
        """The next event, or None after ``timeout`` seconds."""
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def events(self, timeout: float | None = None) -> Iterator[Event]:
        """Events until Disconnected (included) or until ``timeout`` passes
        without one."""
        while True:
            event = self.get(timeout)
            if event is None:
                return
            yield event
            if isinstance(event, Disconnected):
                return

    def close(self) -> None:
        self._closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()

    def __enter__(self) -> HookClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _read_one(
    sock: socket.socket, reader: FrameReader
) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """Block until one whole frame arrives; also return any frames after it."""
    while True:
        data = sock.recv(65536)
        if not data:
            return None
        msgs = reader.feed(data)
        if msgs:
            return msgs[0], msgs[1:]


def hook_summary(pid: int, timeout: float = 2.0) -> Hello:
    """Connect, read the hello, disconnect (``gputui ls``)."""
    client = HookClient.connect(pid, timeout=timeout)
    client.close()
    return client.hello
