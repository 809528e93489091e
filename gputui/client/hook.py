"""Viewer side of the hook protocol, shared by the CLI and the attach screen.

    client = HookClient.connect(pid)          # reads hello; raises AttachError
    client.subscribe(history=1000)
    client.start(on_event=callback)           # background reader thread
    for event in client.events(timeout=1.0):  # or: client.get(timeout)
        ...                                   # StepBatch, Status, MemoryBatch, ...
    client.request_capture(steps=5)
    client.profile                            # newest PythonProfile, or None
    client.profile_unavailable()              # why there is none to show, or None
    client.close()

Every event is a frozen dataclass holding plain values; the last one is always
:class:`Disconnected`.  Free of textual: the TUI feeds ``on_event`` into
``call_from_thread``.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import pwd
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gputui import fmt
from gputui.errors import GputuiError
from gputui.host.processes import ancestors, read_environ
from gputui.protocol import PROTOCOL_VERSION, FrameError, FrameReader, messages, paths
from gputui.protocol.capture import CaptureResult, CaptureStatus
from gputui.protocol.compile import CompileReport
from gputui.protocol.deadline_io import recv_before
from gputui.protocol.fields import SchemaError
from gputui.protocol.memsnap import (
    MemorySnapshotRequest,
    MemorySnapshotResult,
    MemorySnapshotStatus,
)
from gputui.protocol.profile import SAMPLER_FAILED, GetPythonProfile, PythonProfile, SamplerInfo
from gputui.protocol.schema import (
    Bye,
    CaptureCancel,
    CaptureRequest,
    Hello,
    HookError,
    MemoryBatch,
    Ping,
    Pong,
    Status,
    StepBatch,
    Subscribe,
    Synced,
)
from gputui.protocol.wire import decode, encode_message

#: what the client defines; the wire's types are imported from gputui.protocol
__all__ = [
    "AttachError",
    "Disconnected",
    "Event",
    "HookClient",
    "Invalid",
    "parse_event",
]


class AttachError(GputuiError):
    """Could not connect to a job's hook; the message says what to do."""


def not_hooked_message(pid: int) -> str:
    hint = (
        f"gputui attach: process {pid} has no gputui hook. Start the job with "
        "'gputui run -- python train.py ...', or add 'import gputui.hook; "
        "gputui.hook.install()' to it; on Python >= 3.14 'gputui attach --inject "
        f"{pid}' loads the hook into the running job"
    )
    hooked_parent = next((p for p in ancestors(pid) if paths.find_socket(p)), None)
    if hooked_parent is not None:
        return (
            f"gputui attach: process {pid} is a child of the hooked job {hooked_parent} "
            "(a DataLoader worker or another helper process: the hook runs in the "
            f"training process); use 'gputui attach {hooked_parent}'"
        )
    if read_environ(pid).get("GPUTUI_RUN") == "1":
        hint = (
            f"gputui attach: process {pid} was started by 'gputui run' but has not "
            "started training yet (the hook opens its socket at the first step, "
            "data batch or forward); try again in a moment"
        )
    return hint


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
# The hook's messages are the protocol's typed classes (re-exported here for the
# viewers); two events are the client's own.
@dataclass(frozen=True)
class Disconnected:
    """Always the last event.  ``clean``: the job said bye (it is exiting)."""

    reason: str
    clean: bool


@dataclass(frozen=True)
class Invalid:
    """A message that failed the schema: skipped, and shown once as a line
    naming the field (``steps.steps[3].wall: expected a number, got 'x'``)."""

    type: str
    error: str


Event = (
    StepBatch
    | Synced
    | Status
    | MemoryBatch
    | CaptureStatus
    | CaptureResult
    | MemorySnapshotStatus
    | MemorySnapshotResult
    | PythonProfile
    | CompileReport
    | HookError
    | Pong
    | Invalid
    | Disconnected
)


def parse_event(msg: Mapping[str, Any]) -> Event | None:
    """The event of one received (or recorded) message; None for a message type
    this version does not know.  A bye becomes :class:`Disconnected`; a message
    that does not fit the schema becomes :class:`Invalid`."""
    try:
        decoded = decode(msg)
    except SchemaError as exc:
        return Invalid(str(msg.get("type"))[:32], str(exc))
    if decoded is None or isinstance(decoded, Hello):
        return None  # unknown, or a second hello (never sent): nothing to do
    if isinstance(decoded, Bye):
        return Disconnected("the job is exiting", clean=True)
    if isinstance(
        decoded,
        (Subscribe, CaptureRequest, CaptureCancel, Ping, MemorySnapshotRequest, GetPythonProfile),
    ):
        return Invalid(str(msg.get("type")), "a viewer's request sent by the hook")
    return decoded


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
        #: the hello exactly as received (recordings keep it)
        self.hello_raw: Mapping[str, Any] = hello.to_wire()
        #: the newest Python profile the hook sent (kept by the reader thread;
        #: it is also delivered as an event), and the hook's sampler as its
        #: newest status said (None: a hook older than the sampler)
        self.profile: PythonProfile | None = None
        self.sampler: SamplerInfo | None = hello.status.sampler

    @classmethod
    def connect(cls, pid: int, timeout: float = 5.0) -> HookClient:
        """Connect and read the hello.  Raises :class:`AttachError` with a message
        for the user: no such process, not hooked, another user's, no answer."""
        if pid <= 0:
            raise AttachError(f"gputui attach: invalid pid {pid}")
        path = _socket_of(pid)
        sock = _open(path, pid, timeout)
        reader = FrameReader()
        try:
            hello_msg, rest = _read_hello(sock, reader, pid, timeout)
            hello = _checked_hello(hello_msg, pid)
        except AttachError:
            sock.close()
            raise
        sock.settimeout(None)
        client = cls(pid, sock, hello, reader)
        client.hello_raw = hello_msg
        client._pending_raw = list(rest)
        for msg in rest:
            event = parse_event(msg)
            if event is not None:
                client._pending.append(event)
        return client

    # -- requests -------------------------------------------------------------------
    def _send(
        self,
        msg: Subscribe
        | CaptureRequest
        | CaptureCancel
        | Ping
        | MemorySnapshotRequest
        | GetPythonProfile,
    ) -> None:
        frame = encode_message(msg)
        with self._send_lock:
            try:
                self._sock.sendall(frame)
            except OSError as exc:
                raise AttachError(f"gputui attach: connection to {self.pid} lost ({exc})") from None

    def subscribe(self, history: int = 0, memory: bool = True) -> None:
        """Start the live stream, beginning with the last ``history`` steps."""
        self._send(Subscribe(history=max(0, int(history)), memory=bool(memory)))

    def request_capture(
        self,
        steps: int = 5,
        warmup: int = 1,
        shapes: bool = False,
        stacks: bool = False,
        memory: bool = False,
        flops: bool = False,
        start_step: int | None = None,
        capture_id: str | None = None,
        auto: bool = False,
    ) -> str:
        """Ask for a profiler capture of the next ``steps`` steps (from step
        ``start_step`` on, when given: every rank of a job profiles the same
        steps); returns its id (CaptureStatus/CaptureResult events carry it).
        ``flops`` adds torch's FLOP counts and shapes, and the result's op rows
        (the roofline).  ``auto``: the viewer's automatic capture, not its user's
        (the result says so)."""
        cid = capture_id or f"{os.getpid()}-{next(self._ids)}"
        self._send(
            CaptureRequest(
                id=cid,
                steps=int(steps),
                warmup=int(warmup),
                shapes=bool(shapes),
                stacks=bool(stacks),
                memory=bool(memory),
                flops=bool(flops),
                start_step=None if start_step is None else max(0, int(start_step)),
                auto=bool(auto),
            )
        )
        return cid

    def request_memory_snapshot(self, steps: int, max_entries: int | None = None) -> str:
        """Ask for a memory snapshot of the next ``steps`` steps; returns its id
        (MemorySnapshotStatus/MemorySnapshotResult events carry it)."""
        sid = f"{os.getpid()}-m{next(self._ids)}"
        request = MemorySnapshotRequest(id=sid, steps=int(steps))
        if max_entries is not None:
            request = MemorySnapshotRequest(id=sid, steps=int(steps), max_entries=int(max_entries))
        self._send(request)
        return sid

    def cancel_capture(self) -> None:
        self._send(CaptureCancel())

    def request_profile(self) -> None:
        """Ask for the Python profile now (a subscribed viewer gets one about
        every 2 s anyway): a PythonProfile event answers, or a HookError
        saying why not (the sampler is off; a hook older than the sampler
        answers "unknown request type")."""
        self._send(GetPythonProfile())

    def profile_unavailable(self) -> str | None:
        """Why this job has no Python profile to show, or None when its hook
        samples (the profile may still be on its way)."""
        return profile_unavailable(self.sampler)

    def ping(self) -> None:
        self._send(Ping())

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
            self._keep(event)
            deliver(event)
        self._pending = []
        reason = "the job closed the connection"
        clean = False
        try:
            self._reader.raise_pending()  # a bad frame right after the hello
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
                    parsed = parse_event(msg)
                    if parsed is None:
                        continue
                    if isinstance(parsed, Disconnected):
                        reason, clean = parsed.reason, True
                        continue
                    self._keep(parsed)
                    deliver(parsed)
                self._reader.raise_pending()
        except FrameError as exc:
            reason = f"bad data from the hook: {exc}"
        if self._closed:
            reason = "closed by the viewer"
        deliver(Disconnected(reason, clean))

    def _keep(self, event: Event) -> None:
        """The latest values the client keeps (on the reader thread)."""
        if isinstance(event, PythonProfile):
            self.profile = event
        elif isinstance(event, Status) and event.sampler is not None:
            self.sampler = event.sampler

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


def profile_unavailable(sampler: SamplerInfo | None) -> str | None:
    """Why a job's Python profile cannot be shown, from its hook's status
    (``status.sampler``), or None when it samples.  The reason is text from
    the job: clean it before display."""
    if sampler is None:
        return "unavailable: the job's gputui hook predates the Python sampler"
    if sampler.on:
        return None
    reason = f" ({sampler.reason})" if sampler.reason else ""
    if sampler.state == SAMPLER_FAILED:
        return f"unavailable: the Python sampler failed{reason}"
    return f"unavailable: the Python sampler is off{reason}"


def _socket_of(pid: int) -> str:
    """The socket of process ``pid``'s hook, or the reason there is none to use."""
    path = paths.find_socket(pid)
    if path is None:
        if not paths.pid_alive(pid):
            raise AttachError(f"gputui attach: no process with pid {pid}")
        owner = _owner(pid)
        if owner is not None and owner != os.getuid():
            name = fmt.clean(_user_name(owner))
            raise AttachError(
                f"gputui attach: process {pid} belongs to user {name}; gputui only "
                f"attaches to your own jobs (as that user: sudo -u {name} gputui attach {pid})"
            )
        raise AttachError(not_hooked_message(pid))
    if not paths.pid_alive(pid):
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise AttachError(f"gputui attach: no process with pid {pid} (removed its stale socket)")
    return path


def _open(path: str, pid: int, timeout: float) -> socket.socket:
    """A connection to the hook's socket, served by this user."""
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
    return sock


def _read_hello(
    sock: socket.socket, reader: FrameReader, pid: int, timeout: float
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The first frame and the frames read with it."""
    try:
        first = _read_one(sock, reader, time.monotonic() + timeout)
    except TimeoutError:
        raise AttachError(
            f"gputui attach: the hook of process {pid} did not say hello within "
            f"{timeout:g} s (the job may be stopped, or its hook stuck)"
        ) from None
    except (OSError, FrameError) as exc:
        raise AttachError(
            f"gputui attach: the hook of process {pid} did not say hello ({exc})"
        ) from None
    if first is None:
        raise AttachError(
            f"gputui attach: the hook of process {pid} closed the connection before hello"
        )
    return first


def _checked_hello(hello_msg: dict[str, Any], pid: int) -> Hello:
    """The hello, or why this hook will not or cannot be talked to."""
    kind = hello_msg.get("type")
    if kind == messages.ERROR:  # the hook said why it will not serve us
        try:
            why = HookError.from_wire(hello_msg).error
        except SchemaError as exc:
            why = f"an invalid error message ({exc})"
        raise AttachError(
            f"gputui attach: the hook of process {pid} refused the connection: {fmt.clean(why)}"
        )
    if kind != messages.HELLO:
        raise AttachError(
            f"gputui attach: the socket of process {pid} sent a {str(kind)[:32]!r} frame "
            "where a hello was due: not a gputui hook of this version"
        )
    if hello_msg.get("v") != PROTOCOL_VERSION:
        raise AttachError(
            f"gputui attach: process {pid} speaks hook protocol {hello_msg.get('v')}, "
            f"this gputui speaks {PROTOCOL_VERSION}; use matching gputui versions"
        )
    try:
        return Hello.from_wire(hello_msg)
    except SchemaError as exc:
        raise AttachError(
            f"gputui attach: the hook of process {pid} sent an invalid hello ({exc})"
        ) from None


def _read_one(
    sock: socket.socket, reader: FrameReader, deadline: float
) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """Wait, until ``deadline`` (monotonic), for one whole frame; also return any
    frames after it.  None when the peer closes first; TimeoutError at the
    deadline, however slowly the bytes trickle in."""
    while True:
        data = recv_before(sock, deadline, "no hello")
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
