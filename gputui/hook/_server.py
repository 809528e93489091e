"""The hook's I/O thread: one daemon thread, one selector, many viewers.

It drains the training thread's step tuples, waits for their CUDA events off the
training thread, keeps a ring of recent steps, samples device memory, and streams
frames to viewers.  Viewers are served with non-blocking sockets and bounded
output buffers; a slow viewer simply falls behind in the ring and is told exactly
how many step records it missed; a viewer that sends garbage or an oversized frame
is dropped.  Nothing here can block the training thread.
"""

from __future__ import annotations

import os
import selectors
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from gputui.hook._capture import CaptureController
from gputui.hook._collect import StepCollector
from gputui.hook._memory import MEMORY_PERIOD_S, MemorySampler
from gputui.hook._memsnap import MemorySnapshotController
from gputui.hook._outbox import Outbox
from gputui.hook._recorder import Recorder
from gputui.protocol import framing, messages, paths, spec
from gputui.protocol.capture import CaptureStatus
from gputui.protocol.fields import SchemaError
from gputui.protocol.memsnap import FAILED, MemorySnapshotRequest, MemorySnapshotStatus
from gputui.protocol.profile import GetPythonProfile
from gputui.protocol.schema import Bye, CaptureRequest, HookError, Pong, Subscribe
from gputui.protocol.wire import decode

STATUS_PERIOD_S = 1.0
#: the Python profile goes to subscribed viewers this often
PROFILE_PERIOD_S = 2.0
#: The I/O thread's cadence.  It needs the GIL for its work, and taking it from a
#: training thread that holds it is what costs that thread most: while we wait,
#: every GIL release of the training loop (one per torch op) wakes us in vain, a
#: futex wake-up paid on the training thread each time.  So the thread does all
#: its periodic work in one round on a fixed schedule (not after each socket
#: event): 5 Hz while a viewer is subscribed keeps its 4 Hz screen fed; without
#: one, 2 Hz drains the training thread's queue (16 s deep at 1,000 steps/s) and
#: samples memory.
TICK_S = 0.2
IDLE_TICK_S = 0.5
#: ...and a round that is due waits, up to this share of the period, for the
#: training thread to enter backward: on CUDA, backward runs on autograd's own
#: threads while the training thread waits with the GIL released, so the round
#: takes a free GIL and runs alongside backward, costing the training loop
#: nothing.  (The backward hook wakes us: one socket write per round.)
BACKWARD_WAIT_SHARE = 0.5
STEPS_PER_FRAME = 512
LOW_WATER = 256 * 1024  # refill a viewer's buffer with steps only below this
MAX_OUT = 16 * 1024 * 1024  # a viewer this far behind on non-step frames is dropped
MAX_VIEWERS = 32
#: at the job's end, how long the last steps and the bye may take to reach the
#: viewers, all of them together (a stuck viewer must not hold the I/O thread;
#: the job's exit waits for that thread a second at most, see ``stop``)
BYE_SEND_S = 1.0


class Viewer:
    def __init__(self, vid: int, sock: socket.socket) -> None:
        self.id = vid
        self.sock = sock
        self.reader = framing.FrameReader()
        self.out = bytearray()
        self.subscribed = False
        self.want_memory = True
        self.cursor = 0  # next ring sequence number to send
        self.last_index: int | None = None  # last step index sent


class Server:
    """Serves one job's socket.  Its collaborators are handed in by the hook:
    the recorder (the training thread's side), the step collector and memory
    sampler it drives, the capture controller it forwards requests to, the
    outbox other threads post to, and functions that build the hello and status
    messages and run the hook's periodic checks."""

    def __init__(
        self,
        path: str,
        recorder: Recorder,
        collector: StepCollector,
        memory: MemorySampler,
        capture: CaptureController,
        outbox: Outbox,
        hello: Callable[[], dict[str, Any]],
        status: Callable[[], dict[str, Any]],
        periodic: Callable[[], None],
        report_error: Callable[[str, BaseException], None],
        memsnap: MemorySnapshotController | None = None,
        profile: Callable[[], dict[str, Any] | str] | None = None,
    ) -> None:
        self.path = path
        #: the Python profile's message, or why there is none
        self.profile = profile
        self.memsnap = memsnap
        self.recorder = recorder
        self.collector = collector
        self.memory = memory
        self.capture = capture
        self.outbox = outbox
        self.hello = hello
        self.status = status
        self.periodic = periodic
        self.report_error = report_error
        self.pid = os.getpid()
        self.sel = selectors.DefaultSelector()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # Bound under a temporary name and renamed once it listens: a viewer that
        # finds the socket file (gputui attach right after the job starts) never
        # gets "connection refused" from a socket that is not listening yet.
        pending = path + ".new"
        try:
            for stale in (path, pending):  # our pid's names: left by an earlier process
                if os.path.lexists(stale):
                    os.unlink(stale)
            self.listener.bind(pending)
            # The 0700 directory already shuts others out between bind and chmod.
            os.chmod(pending, 0o600)
            self.listener.listen(16)
            os.rename(pending, path)
            self.listener.setblocking(False)
        except OSError:
            self.listener.close()
            try:
                os.unlink(pending)
            except OSError:
                pass
            raise
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.wake_w.setblocking(False)
        self.sel.register(self.listener, selectors.EVENT_READ, None)
        self.sel.register(self.wake_r, selectors.EVENT_READ, None)
        self.viewers: dict[int, Viewer] = {}
        self.next_vid = 1
        self.refused = 0  # connections refused (other uid, too many viewers)
        self.bad_frames = 0
        self.stuck_viewers = 0  # dropped for leaving MAX_OUT unread
        self.stopping = threading.Event()
        self.last_status = 0.0
        self.last_memory = 0.0
        self.last_profile = 0.0
        self.last_compile: dict[str, Any] | None = None  # the compile report last sent
        self.next_tick = 0.0  # time.perf_counter() of the next periodic round
        self.period = IDLE_TICK_S
        self.thread = threading.Thread(target=self._run, name="gputui-hook-io", daemon=True)

    @property
    def ring(self) -> Any:
        return self.collector.ring

    def start(self) -> None:
        self.outbox.wake = self.wake
        self.thread.start()

    # -- lifecycle ----------------------------------------------------------------
    def wake(self) -> None:
        try:
            self.wake_w.send(b"\0")
        except OSError:
            pass  # buffer full: a wake-up is already pending

    def stop(self, timeout: float = 1.0) -> None:
        """Say bye, close everything and remove the socket (atexit, uninstall)."""
        self.stopping.set()
        self.wake()
        if self.thread.is_alive() and threading.current_thread() is not self.thread:
            self.thread.join(timeout)
        self._unlink()

    def _unlink(self) -> None:
        if os.getpid() != self.pid:
            return  # a forked child must never remove its parent's socket
        try:
            os.unlink(self.path)
        except OSError:
            pass

    def close_in_child(self) -> None:
        """After fork: drop inherited descriptors without touching the socket file."""
        for sock in [self.listener, self.wake_r, self.wake_w] + [
            v.sock for v in self.viewers.values()
        ]:
            try:
                sock.close()
            except OSError:
                pass
        try:
            self.sel.close()  # the epoll descriptor too: the child must not keep it
        except (OSError, ValueError):
            pass
        self.viewers = {}

    def _run(self) -> None:
        try:
            # The wire classes' methods compile on their first use (an exec of
            # their source): all of them now, on this thread, not as the job
            # exits.  An exec of a string anywhere in the process after an
            # unhandled KeyboardInterrupt makes CPython forget it, and the job
            # exits 1 rather than by SIGINT (Ctrl-C's 130 in a shell): a bye, a
            # profile or a capture first sent to a viewer then would do it.
            spec.compile_declared()
            recorder = self.recorder
            recorder.io_wake = self.wake
            while not self.stopping.is_set():
                recorder.io_due = self.next_tick
                grace = self.period * BACKWARD_WAIT_SHARE
                timeout = max(0.0, self.next_tick + grace - time.perf_counter())
                for key, mask in self.sel.select(timeout):
                    if key.fileobj is self.listener:
                        self._accept()
                    elif key.fileobj is self.wake_r:
                        self._drain_wake()
                    else:
                        self._serve(key.data, mask)
                self._deliver_outbox()  # capture progress and results: at once
                now = time.perf_counter()
                if now >= self.next_tick:
                    self._tick(now)
                    subscribed = any(v.subscribed for v in self.viewers.values())
                    self.period = TICK_S if subscribed else IDLE_TICK_S
                    self.next_tick = now + self.period
            self._shutdown()
        except Exception as exc:
            self.report_error("I/O thread", exc)
            try:
                self._shutdown()
            except Exception:
                pass

    def _serve(self, viewer: Viewer, mask: int) -> None:
        # One viewer's request must never end the thread that serves the others
        # (and drains the training thread's queue): a failure is that viewer's.
        try:
            if mask & selectors.EVENT_READ:
                self._read(viewer)
            if mask & selectors.EVENT_WRITE and viewer.id in self.viewers:
                self._flush(viewer)
        except Exception as exc:
            self.report_error("serving a viewer", exc)
            self._drop(viewer)

    def _shutdown(self) -> None:
        self.collector.collect()
        bye = framing.encode_obj(Bye(pid=self.pid, steps=self.collector.steps_total).to_wire())
        deadline = time.monotonic() + BYE_SEND_S
        for viewer in list(self.viewers.values()):
            # The job's last steps (since the last round) go out before the bye,
            # all that the ring still holds for this viewer: none is lost uncounted.
            self._pump_steps(viewer, limit=MAX_OUT)
            if viewer.id not in self.viewers:
                continue
            viewer.out += bye
            try:
                viewer.sock.setblocking(True)
                viewer.sock.settimeout(max(0.01, deadline - time.monotonic()))
                viewer.sock.sendall(bytes(viewer.out))
            except OSError:
                pass
            self._drop(viewer)
        for sock in (self.listener, self.wake_r, self.wake_w):
            try:
                self.sel.unregister(sock)
            except (KeyError, ValueError):
                pass
            sock.close()
        self._unlink()

    # -- connections ------------------------------------------------------------
    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            uid = paths.peer_uid(conn)
            if uid is not None and uid != paths.current_uid():
                self._refuse(conn, f"refused: uid {uid} is not this job's user")
                continue
            if len(self.viewers) >= MAX_VIEWERS:
                self._refuse(
                    conn,
                    f"too many viewers: {len(self.viewers)} are connected, the most this "
                    "job serves; close one and try again",
                )
                continue
            conn.setblocking(False)
            viewer = Viewer(self.next_vid, conn)
            self.next_vid += 1
            self.viewers[viewer.id] = viewer
            self.sel.register(conn, selectors.EVENT_READ, viewer)
            self.collector.collect()
            self._send(viewer, framing.encode_obj(self.hello()))

    def _refuse(self, conn: socket.socket, reason: str) -> None:
        """Close a connection we will not serve, saying why in one frame instead of
        the hello (so the viewer need not guess from a closed socket).  The frame
        is small enough for an empty socket buffer; if even that fails, closing
        says enough."""
        self.refused += 1
        try:
            conn.setblocking(False)
            conn.send(framing.encode_obj(HookError(reason).to_wire()))
        except OSError:
            pass
        conn.close()

    def _drop(self, viewer: Viewer) -> None:
        if self.viewers.pop(viewer.id, None) is None:
            return
        try:
            self.sel.unregister(viewer.sock)
        except (KeyError, ValueError):
            pass
        try:
            viewer.sock.close()
        except OSError:
            pass
        self.capture.viewer_gone(viewer.id)
        if self.memsnap is not None:
            self.memsnap.viewer_gone(viewer.id)

    def _read(self, viewer: Viewer) -> None:
        try:
            data = viewer.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(viewer)
            return
        if not data:
            self._drop(viewer)
            return
        try:
            msgs = viewer.reader.feed(data)
        except framing.FrameError:
            self.bad_frames += 1
            self._drop(viewer)
            return
        for msg in msgs:
            if viewer.id not in self.viewers:
                return
            self._handle(viewer, msg)
        try:
            viewer.reader.raise_pending()  # a bad frame after good ones: served those first
        except framing.FrameError:
            self.bad_frames += 1
            self._drop(viewer)

    def _handle(self, viewer: Viewer, msg: dict[str, Any]) -> None:
        kind = msg.get("type")
        try:
            request = decode(msg) if kind in messages.VIEWER_TYPES else None
        except SchemaError as exc:
            self.bad_frames += 1
            if kind == messages.CAPTURE:  # the requester waits for its capture's status
                cid = msg.get("id") if isinstance(msg.get("id"), str) else None
                reply = CaptureStatus(messages.CAPTURE_FAILED, cid, f"invalid request: {exc}")
                self._send(viewer, framing.encode_obj(reply.to_wire()))
            elif kind == messages.MEMSNAP:  # so does the requester of a memory snapshot
                cid = msg.get("id") if isinstance(msg.get("id"), str) else None
                failed = MemorySnapshotStatus(FAILED, cid, f"invalid request: {exc}")
                self._send(viewer, framing.encode_obj(failed.to_wire()))
            else:
                error = HookError(f"invalid {kind} request: {exc}")
                self._send(viewer, framing.encode_obj(error.to_wire()))
            return
        if isinstance(request, Subscribe):
            self._subscribe(viewer, request)
        elif isinstance(request, CaptureRequest):
            status = self.capture.request(viewer.id, request)
            if status is not None:
                self._send(viewer, framing.encode_obj(status.to_wire()))
        elif isinstance(request, MemorySnapshotRequest) and self.memsnap is not None:
            armed = self.memsnap.request(viewer.id, request)
            self._send(viewer, framing.encode_obj(armed.to_wire()))
        elif isinstance(request, GetPythonProfile):
            profile = self._profile()
            if isinstance(profile, str):
                profile = HookError(profile).to_wire()
            self._send(viewer, framing.encode_obj(profile))
        elif kind == messages.CAPTURE_CANCEL:
            status = self.capture.cancel(viewer.id)
            self._send(viewer, framing.encode_obj(status.to_wire()))
        elif kind == messages.PING:
            self._send(viewer, framing.encode_obj(Pong(round(time.time(), 3)).to_wire()))
        else:
            error = HookError(f"unknown request type {str(kind)[:64]!r}")
            self._send(viewer, framing.encode_obj(error.to_wire()))

    def _subscribe(self, viewer: Viewer, request: Subscribe) -> None:
        collector = self.collector
        collector.collect()
        ring = collector.ring
        history = min(request.history, ring.capacity)
        viewer.want_memory = request.memory
        viewer.subscribed = True
        viewer.cursor = max(ring.start, ring.end - history)
        first = ring.slice(viewer.cursor, 1)
        viewer.last_index = first[0]["i"] - 1 if first else collector.last_index
        backlog_steps = ring.end - viewer.cursor
        self._pump_steps(viewer, backlog=True)
        if viewer.want_memory and self.memory.samples:
            self._send(viewer, framing.encode(messages.MEMORY, samples=list(self.memory.samples)))
        self._send(viewer, framing.encode_obj(self.status()))
        profile = self._profile()
        if not isinstance(profile, str):
            self._send(viewer, framing.encode_obj(profile))
        compiled = self._compile_report()
        if compiled is not None:
            self._send(viewer, framing.encode_obj(compiled))
        for last in (
            self.capture.last_result,
            None if self.memsnap is None else self.memsnap.last_result,
        ):
            if last is not None:
                replay = dict(last)
                replay["replay"] = True
                self._send(viewer, framing.encode_obj(replay))
        self._send(viewer, framing.encode(messages.SYNCED, steps=backlog_steps))
        self.next_tick = min(self.next_tick, time.perf_counter() + TICK_S)
        self.period = TICK_S

    # -- output -------------------------------------------------------------------
    def _send(self, viewer: Viewer, frame: bytes) -> None:
        if viewer.id not in self.viewers:
            return
        if len(viewer.out) > MAX_OUT:
            self.stuck_viewers += 1
            self._drop(viewer)  # not reading at all: a dead or stuck viewer
            return
        viewer.out += frame
        self._flush(viewer)

    def _flush(self, viewer: Viewer) -> None:
        while viewer.out:
            try:
                sent = viewer.sock.send(viewer.out)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self._drop(viewer)
                return
            del viewer.out[:sent]
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if viewer.out else 0)
        try:
            self.sel.modify(viewer.sock, events, viewer)
        except (KeyError, ValueError):
            pass

    def broadcast(self, obj: dict[str, Any], extra: int | None = None) -> None:
        frame = framing.encode_obj(obj)
        for viewer in list(self.viewers.values()):
            if viewer.subscribed or viewer.id == extra:
                self._send(viewer, frame)

    def _pump_steps(self, viewer: Viewer, backlog: bool = False, limit: int = LOW_WATER) -> None:
        ring = self.collector.ring
        while viewer.subscribed and len(viewer.out) < limit and viewer.id in self.viewers:
            if viewer.cursor < ring.start:
                viewer.cursor = ring.start  # aged out: counted as missed below
            if viewer.cursor >= ring.end:
                return
            batch = ring.slice(viewer.cursor, STEPS_PER_FRAME)
            first = batch[0]["i"]
            missed = max(
                0, first - (viewer.last_index if viewer.last_index is not None else -1) - 1
            )
            viewer.cursor += len(batch)
            viewer.last_index = batch[-1]["i"]
            self._send(
                viewer,
                framing.encode(messages.STEPS, steps=batch, missed=missed, backlog=backlog),
            )

    # -- periodic work ------------------------------------------------------------
    def _drain_wake(self) -> None:
        try:
            while self.wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError, OSError):
            pass

    def _deliver_outbox(self) -> None:
        if not self.outbox:
            return
        # The steps a capture message speaks of reach viewers before it: a short
        # capture ends, and is processed, between two of the I/O thread's rounds.
        self.collector.collect()
        for viewer in list(self.viewers.values()):
            if viewer.subscribed:
                self._pump_steps(viewer, limit=MAX_OUT)
        for target, obj in self.outbox.take():
            self.broadcast(obj, extra=target)

    def _tick(self, now: float) -> None:
        self.collector.collect()
        if now - self.last_memory >= MEMORY_PERIOD_S * 0.9:
            self.last_memory = now
            self._sample_memory()
            try:
                self.periodic()
            except Exception as exc:
                self.report_error("periodic checks", exc)
        if now - self.last_status >= STATUS_PERIOD_S * 0.9:
            self.last_status = now
            if any(v.subscribed for v in self.viewers.values()):
                self.broadcast(self.status())
                compiled = self._compile_report()
                if compiled is not None and compiled != self.last_compile:
                    self.last_compile = compiled
                    self.broadcast(compiled)
            self.capture.periodic(now)
        if now - self.last_profile >= PROFILE_PERIOD_S * 0.9 and any(
            v.subscribed for v in self.viewers.values()
        ):
            self.last_profile = now
            profile = self._profile()
            if not isinstance(profile, str):
                self.broadcast(profile)
        for viewer in list(self.viewers.values()):
            if viewer.subscribed:
                self._pump_steps(viewer)

    def _compile_report(self) -> dict[str, Any] | None:
        try:
            return self.collector.compile_watch.report()
        except Exception as exc:  # torch's private state changed shape: say so once
            self.report_error("torch.compile report", exc)
            return None

    def _profile(self) -> dict[str, Any] | str:
        if self.profile is None:
            return "this hook has no Python sampler"
        try:
            return self.profile()
        except Exception as exc:  # the profile's failure is not the I/O thread's
            self.report_error("python profile", exc)
            return f"the Python profile failed: {type(exc).__name__}"

    def _sample_memory(self) -> None:
        sample = self.memory.sample(
            self.recorder.torch, self.recorder.device, self.collector.last_index
        )
        if sample is None:
            return
        frame = framing.encode(messages.MEMORY, samples=[sample])
        for viewer in list(self.viewers.values()):
            if viewer.subscribed and viewer.want_memory:
                self._send(viewer, frame)
