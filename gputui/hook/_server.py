"""The hook's I/O thread: one daemon thread, one selector, many viewers.

It drains the training thread's step tuples, waits for their CUDA events off the
training thread, keeps a ring of recent steps, samples device memory, and streams
frames to viewers.  Viewers are served with non-blocking sockets and bounded
output buffers; a slow viewer simply falls behind in the ring and is told exactly
how many step records it missed; a viewer that sends garbage or an oversized frame
is dropped.  Nothing here can block the training thread.
"""

from __future__ import annotations

import collections
import os
import selectors
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gputui.hook._recorder import SEGMENT, replay, replay_gpu, unpack
from gputui.protocol import framing, messages, paths

if TYPE_CHECKING:
    from gputui.hook._core import Hook

#: Step records kept for late or slow viewers (the issue asks for >= 10,000).
HISTORY = 16384
MEMORY_HISTORY = 1200  # 10 minutes at 2 Hz
MEMORY_PERIOD_S = 0.5  # <= 2 Hz
STATUS_PERIOD_S = 1.0
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
GPU_PENDING_MAX = 4096  # steps waiting for CUDA events before we stop waiting


class Ring:
    """Finalized step records addressed by a global sequence number.

    Items go in as compact tuples and become the wire's dicts only when read
    (``slice``, ``last``), once each: with no viewer, a step costs the I/O thread
    an append, not the building of a dict the training thread would wait for.
    """

    def __init__(self, capacity: int, convert: Callable[[Any], dict[str, Any]]) -> None:
        self.capacity = capacity
        self.convert = convert
        self.items: list[Any] = []
        self.base = 0  # sequence number of items[0]

    @property
    def end(self) -> int:
        return self.base + len(self.items)

    def append(self, item: Any) -> None:
        self.items.append(item)
        if len(self.items) >= 2 * self.capacity:
            cut = len(self.items) - self.capacity
            del self.items[:cut]
            self.base += cut

    @property
    def start(self) -> int:
        """Oldest sequence number still guaranteed (capacity-bounded view)."""
        return max(self.base, self.end - self.capacity)

    def slice(self, seq: int, count: int) -> list[dict[str, Any]]:
        lo = max(0, seq - self.base)
        return self._read(lo, min(len(self.items), lo + count))

    def last(self, count: int) -> list[dict[str, Any]]:
        return self._read(max(0, len(self.items) - count), len(self.items)) if count else []

    def _read(self, lo: int, hi: int) -> list[dict[str, Any]]:
        items = self.items
        out = []
        for k in range(lo, hi):
            item = items[k]
            if type(item) is tuple:
                item = items[k] = self.convert(item)
            out.append(item)
        return out


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
    def __init__(self, hook: Hook, path: str) -> None:
        self.hook = hook
        self.path = path
        self.pid = os.getpid()
        self.sel = selectors.DefaultSelector()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if os.path.exists(path):
                os.unlink(path)  # our pid's name: left by an earlier process with this pid
            self.listener.bind(path)
            # The 0700 directory already shuts others out between bind and chmod.
            os.chmod(path, 0o600)
            self.listener.listen(16)
            self.listener.setblocking(False)
        except OSError:
            self.listener.close()
            raise
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.wake_w.setblocking(False)
        self.sel.register(self.listener, selectors.EVENT_READ, None)
        self.sel.register(self.wake_r, selectors.EVENT_READ, None)
        self.viewers: dict[int, Viewer] = {}
        self.next_vid = 1
        self.ring = Ring(HISTORY, self._record)
        self.gpu_pending: collections.deque[tuple[Any, ...]] = collections.deque()
        self.memory: collections.deque[dict[str, Any]] = collections.deque(maxlen=MEMORY_HISTORY)
        self.expected_index: int | None = None
        # Replaying the training thread's edge logs: the phases open between
        # steps, and the phase times of a long step's first segments.
        self.open_phases: list[str] = []
        self.partial: dict[str, float] | None = None
        self.partial_since = 0.0
        self.partial_counts = [0, 0, 0]
        self.batch_samples = 0.0  # samples per DataLoader batch, as last looked into
        self.dropped = 0  # step records lost before reaching the ring (training-side overflow)
        self.refused = 0  # connections refused (other uid, too many viewers)
        self.bad_frames = 0
        self.steps_total = 0
        self.perf0 = time.perf_counter()
        self.wall0 = time.time()
        self.stopping = threading.Event()
        self.last_status = 0.0
        self.last_memory = 0.0
        self.next_tick = 0.0  # time.perf_counter() of the next periodic round
        self.period = IDLE_TICK_S
        self.memory_error: str | None = None
        self.thread = threading.Thread(target=self._run, name="gputui-hook-io", daemon=True)

    def start(self) -> None:
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
        self.viewers = {}

    def _run(self) -> None:
        try:
            recorder = self.hook.recorder
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
                        viewer = key.data
                        if mask & selectors.EVENT_READ:
                            self._read(viewer)
                        if mask & selectors.EVENT_WRITE and viewer.id in self.viewers:
                            self._flush(viewer)
                self._deliver_outbox()  # capture progress and results: at once
                now = time.perf_counter()
                if now >= self.next_tick:
                    self._tick(now)
                    subscribed = any(v.subscribed for v in self.viewers.values())
                    self.period = TICK_S if subscribed else IDLE_TICK_S
                    self.next_tick = now + self.period
            self._shutdown()
        except Exception as exc:
            self.hook.report_error("I/O thread", exc)
            try:
                self._shutdown()
            except Exception:
                pass

    def _shutdown(self) -> None:
        self._collect()
        bye = framing.encode(messages.BYE, pid=self.pid, steps=self.steps_total)
        for viewer in list(self.viewers.values()):
            viewer.out += bye
            try:
                viewer.sock.setblocking(True)
                viewer.sock.settimeout(0.2)
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
            if (uid is not None and uid != paths.current_uid()) or len(self.viewers) >= MAX_VIEWERS:
                self.refused += 1
                conn.close()
                continue
            conn.setblocking(False)
            viewer = Viewer(self.next_vid, conn)
            self.next_vid += 1
            self.viewers[viewer.id] = viewer
            self.sel.register(conn, selectors.EVENT_READ, viewer)
            self._collect()
            self._send(viewer, framing.encode_obj(self.hook.hello(self)))

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
        self.hook.capture.viewer_gone(viewer.id)

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

    def _handle(self, viewer: Viewer, msg: dict[str, Any]) -> None:
        kind = msg.get("type")
        if kind == messages.SUBSCRIBE:
            self._subscribe(viewer, msg)
        elif kind == messages.CAPTURE:
            reply = self.hook.capture.request(viewer.id, msg)
            if reply is not None:
                self._send(viewer, framing.encode_obj(reply))
        elif kind == messages.CAPTURE_CANCEL:
            reply = self.hook.capture.cancel(viewer.id)
            self._send(viewer, framing.encode_obj(reply))
        elif kind == messages.PING:
            self._send(viewer, framing.encode(messages.PONG, t=time.time()))
        else:
            self._send(
                viewer,
                framing.encode(messages.ERROR, error=f"unknown request type {kind!r}"),
            )

    def _subscribe(self, viewer: Viewer, msg: dict[str, Any]) -> None:
        self._collect()
        history = msg.get("history", 0)
        if not isinstance(history, int) or history < 0:
            history = 0
        history = min(history, HISTORY)
        viewer.want_memory = bool(msg.get("memory", True))
        viewer.subscribed = True
        viewer.cursor = max(self.ring.start, self.ring.end - history)
        first = self.ring.slice(viewer.cursor, 1)
        viewer.last_index = first[0]["i"] - 1 if first else self._last_finalized()
        backlog_steps = self.ring.end - viewer.cursor
        self._pump_steps(viewer, backlog=True)
        if viewer.want_memory and self.memory:
            self._send(viewer, framing.encode(messages.MEMORY, samples=list(self.memory)))
        self._send(viewer, framing.encode_obj(self.hook.status(self)))
        last = self.hook.capture.last_result
        if last is not None:
            replay = dict(last)
            replay["replay"] = True
            self._send(viewer, framing.encode_obj(replay))
        self._send(viewer, framing.encode(messages.SYNCED, steps=backlog_steps))
        self.next_tick = min(self.next_tick, time.perf_counter() + TICK_S)
        self.period = TICK_S

    def expected_index_minus_one(self) -> int | None:
        return None if self.expected_index is None else self.expected_index - 1

    def _last_finalized(self) -> int:
        # Step indices start at 0, so before any step "-1" makes the first
        # batch's missed count exact too.
        return -1 if self.expected_index is None else self.expected_index - 1

    # -- output -------------------------------------------------------------------
    def _send(self, viewer: Viewer, frame: bytes) -> None:
        if viewer.id not in self.viewers:
            return
        if len(viewer.out) > MAX_OUT:
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

    def send_to(self, vid: int, obj: dict[str, Any]) -> None:
        viewer = self.viewers.get(vid)
        if viewer is not None:
            self._send(viewer, framing.encode_obj(obj))

    def _pump_steps(self, viewer: Viewer, backlog: bool = False) -> None:
        while viewer.subscribed and len(viewer.out) < LOW_WATER and viewer.id in self.viewers:
            if viewer.cursor < self.ring.start:
                viewer.cursor = self.ring.start  # aged out: counted as missed below
            if viewer.cursor >= self.ring.end:
                return
            batch = self.ring.slice(viewer.cursor, STEPS_PER_FRAME)
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
        if not self.hook.outbox:
            return
        self._collect()  # steps before a capture message reach viewers before it
        for target, obj in self.hook.take_outbox():
            if target is None:
                self.broadcast(obj)
            else:
                self.broadcast(obj, extra=target)

    def _tick(self, now: float) -> None:
        self._collect()
        if now - self.last_memory >= MEMORY_PERIOD_S * 0.9:
            self.last_memory = now
            self._sample_memory()
            try:
                self.hook.torch_hooks.recheck_roots()
            except Exception as exc:
                self.hook.report_error("rechecking root modules", exc)
        if now - self.last_status >= STATUS_PERIOD_S * 0.9:
            self.last_status = now
            if any(v.subscribed for v in self.viewers.values()):
                self.broadcast(self.hook.status(self))
            self.hook.capture.periodic(now)
        for viewer in list(self.viewers.values()):
            if viewer.subscribed:
                self._pump_steps(viewer)

    def _collect(self) -> None:
        """Move finished steps from the training thread into the ring."""
        out = self.hook.recorder.out
        pending = self.gpu_pending
        while out:
            try:
                raw = out.popleft()
            except IndexError:
                break
            pending.append(raw)
        while pending:
            raw = pending[0]
            if type(raw) is list:  # a plain step
                pending.popleft()
                self._finalize(raw[0], raw[1], raw[-2], raw, None, None, 0, False)
                continue
            if raw[0] == SEGMENT:  # the first part of a long step's edge log
                pending.popleft()
                _, log, events, until = raw
                if self.partial is None:
                    since, self.partial_counts = log[1], [0, 0, 0]
                else:
                    since = self.partial_since
                self.partial = replay(
                    since, until, log, self.open_phases, self.partial, self.partial_counts
                )
                self.partial_since = until
                self._release(events, keep_last=False)
                continue
            step = unpack(raw)
            edges = step.events
            gpu: dict[str, float] | None = None
            if edges is not None:
                if not _query(edges[-1]):
                    if len(pending) < GPU_PENDING_MAX:
                        break
                    edges = None  # the GPU is hopelessly behind: give up on this step
                else:
                    try:
                        gpu = replay_gpu(step.log, edges, self.open_phases)
                    except Exception:
                        gpu = None
                    finally:
                        self._release(edges, keep_last=step.shared)
            pending.popleft()
            self._finalize(*step[:4], gpu, step.batch_size, step.flags, True)

    def _release(self, events: list[Any] | None, keep_last: bool) -> None:
        """CUDA events back to the recorder's pool, except an end event that also
        starts the next step."""
        if not events:
            return
        pool = self.hook.recorder.event_pool
        pool.extend(events[:-1] if keep_last else events)

    def _finalize(
        self,
        index: int,
        start: float,
        end: float,
        log: list[Any],
        gpu: dict[str, float] | None,
        batch_size: int | None,
        flags: int,
        full: bool,
    ) -> None:
        """A whole step into the ring; ``batch_size`` and ``flags`` are as a
        full step saw them (a plain step has neither)."""
        if self.expected_index is not None and index > self.expected_index:
            self.dropped += index - self.expected_index
        self.expected_index = index + 1
        counts = [0, 0, 0]  # batches, samples seen, batches whose samples were seen
        if self.partial is not None:  # the step's earlier segments
            counts = self.partial_counts
            acc = replay(self.partial_since, end, log, self.open_phases, self.partial, counts)
            self.partial = None
        else:
            acc = replay(start, end, log, self.open_phases, None, counts)
        if not full:
            batch_size = self.hook.recorder.batch_size
        batches, samples, sampled = counts
        if batch_size:
            samples = 0  # the given batch size wins
        elif sampled:
            self.batch_samples = samples / sampled  # samples per batch, last seen
        elif batches and self.batch_samples:
            # A plain step: its batches are counted, not looked into; they are
            # taken to be the size of the last batches seen.
            samples = round(batches * self.batch_samples)
        # The dict is built when a viewer (or the status) reads it: see Ring.
        self.ring.append((index, start, end, acc, gpu, batch_size, batches, samples, flags))
        self.steps_total += 1

    def _record(self, item: tuple[Any, ...]) -> dict[str, Any]:
        """A step as the wire carries it (the ``steps`` message's records)."""
        index, start, end, acc, gpu, batch_size, batches, samples, flags = item
        rec: dict[str, Any] = {
            "i": index,
            "t": round(self.wall0 + (end - self.perf0), 4),
            "wall": round(end - start, 7),
            "phases": {k: round(v, 7) for k, v in acc.items()},
        }
        if gpu is not None:
            rec["gpu"] = {k: round(v, 7) for k, v in gpu.items()}
            rec["gpu_total"] = round(sum(gpu.values()), 7)
        if batch_size:
            rec["samples"] = batch_size * max(1, batches)
        elif samples:
            rec["samples"] = samples
            rec["samples_inferred"] = True
        if batches:
            rec["batches"] = batches
        if flags:
            rec["flags"] = flags
        return rec

    def recent_step_s(self, count: int = 20) -> float | None:
        recent = self.ring.last(count)
        if not recent:
            return None
        return round(sum(r["wall"] for r in recent) / len(recent), 7)

    def _sample_memory(self) -> None:
        torch = self.hook.recorder.torch
        device = self.hook.recorder.device
        if torch is None or device is None or self.memory_error is not None:
            return
        try:
            if not torch.cuda.is_initialized():
                return
            sample = memory_sample(torch, device)
        except Exception as exc:
            self.memory_error = f"{type(exc).__name__}: {exc}"
            return
        sample["t"] = round(time.time(), 3)
        self.memory.append(sample)
        frame = framing.encode(messages.MEMORY, samples=[sample])
        for viewer in list(self.viewers.values()):
            if viewer.subscribed and viewer.want_memory:
                self._send(viewer, frame)


def memory_sample(torch: Any, device: int) -> dict[str, Any]:
    """The caching allocator's counters for one device.

    ``torch.cuda.memory_stats()`` flattens the allocator's nested statistics into
    a dict of ~100 keys in Python (150-210 µs, holding the GIL the training thread
    needs); the nested form it starts from is read directly when torch has it."""
    raw = getattr(getattr(torch, "_C", None), "_cuda_memoryStats", None)
    if callable(raw):
        try:
            stats = raw(device)
            return {
                "device": device,
                "allocated": int(stats["allocated_bytes"]["all"]["current"]),
                "reserved": int(stats["reserved_bytes"]["all"]["current"]),
                "active": int(stats["active_bytes"]["all"]["current"]),
                "peak_allocated": int(stats["allocated_bytes"]["all"]["peak"]),
                "peak_reserved": int(stats["reserved_bytes"]["all"]["peak"]),
                "alloc_retries": int(stats.get("num_alloc_retries", 0)),
                "ooms": int(stats.get("num_ooms", 0)),
            }
        except (KeyError, TypeError, ValueError):
            pass  # another layout: the public route below
    stats = torch.cuda.memory_stats(device)
    return {
        "device": device,
        "allocated": stats.get("allocated_bytes.all.current", 0),
        "reserved": stats.get("reserved_bytes.all.current", 0),
        "active": stats.get("active_bytes.all.current", 0),
        "peak_allocated": stats.get("allocated_bytes.all.peak", 0),
        "peak_reserved": stats.get("reserved_bytes.all.peak", 0),
        "alloc_retries": stats.get("num_alloc_retries", 0),
        "ooms": stats.get("num_ooms", 0),
    }


def _query(event: Any) -> bool:
    try:
        return bool(event.query())
    except Exception:
        return True


def python_version() -> str:
    return "{}.{}.{}".format(*sys.version_info[:3])
