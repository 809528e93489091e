"""Training-thread side of the hook: phase edges, step boundaries, CUDA events.

Everything here runs on the user's training thread, inside their optimizer step,
their forward call, their DataLoader ``__next__``, where every Python call and
attribute lookup runs cold.  So an edge only reads the clock and appends the
time and the phase to the step's edge log (plus a CUDA event from a pool on the
steps that are GPU-timed), and a step boundary hands the log to the I/O thread
in one tuple on a bounded deque.  No locks, no I/O, no dict updates.

The I/O thread replays the logs (``replay``): time is attributed exclusively to
the innermost open phase, so the phases of a step always add up to its wall time
("other" is whatever ran outside any phase).
"""

from __future__ import annotations

import collections
import math
import time
from collections.abc import Callable
from typing import Any

OTHER = "other"
DATA = "data"
FORWARD = "forward"
BACKWARD = "backward"
OPTIMIZER = "optimizer"

# Step flags (bit set per step record).
FLAG_PROFILED = 1  # a gputui capture was recording during this step (it is slower)
FLAG_COMPILE = 2  # a hook point was reached while torch.compile was tracing
FLAG_GRAPH_CAPTURE = 4  # a CUDA graph was being captured: no GPU times for the step

#: Finished step records waiting for the I/O thread.  It drains them 2-5 times a
#: second, so this only fills if that thread is starved for >16 s at 1000 steps/s;
#: overflow is counted from the gap in step indices, never silent.
RAW_CAPACITY = 16384

#: GPU times need a CUDA event at every phase edge and step boundary (~10 per step:
#: 3 µs each to record on the H100 machine, plus the I/O thread's reads and the GIL
#: hand-overs they cause).  On short steps that is a visible share of the step, so
#: events are recorded on one step in N, with N chosen so that a timed step comes
#: about every PHASE_GPU_PERIOD_S (5 a second: 300 GPU-timed steps a minute for
#: the statistics); the other steps have wall times only.
PHASE_GPU_PERIOD_S = 0.2
PHASE_GPU_MAX_EVERY = 64

#: CUDA events alive at once (pending + free).  If the GPU falls this far behind,
#: steps are recorded without GPU times rather than creating events without bound.
EVENT_POOL_MAX = 8192

#: A step's edge log is flushed to the I/O thread as a segment once it holds this
#: many entries (a loop with phases but no step boundary would grow it forever).
LOG_MAX = 4096

#: Tags an exit in the edge log: an entry is either ``name`` (enter) or
#: ``EXIT + name`` (exit).
EXIT = "\x00"

# A raw step record, as appended by the training thread:
# (index, start_perf, end_perf, log, events, last_event_shared, batch_size,
#  batches, samples, flags, gpu_phases_timed); log is [t, tag, t, tag, ...];
# events is None or [start event, one event per log edge..., end event].
# A segment of a long step's log: (SEGMENT, log, events_to_release, step_start).
RawStep = tuple
SEGMENT = -1


class Recorder:
    """Per-process phase/step bookkeeping.  Not thread-safe by design: only the
    training thread calls the edge methods; the I/O thread only pops ``out``."""

    def __init__(
        self,
        on_first_activity: Callable[[], None] | None = None,
        report_error: Callable[[str, BaseException], None] | None = None,
    ) -> None:
        self.report_error = report_error
        self.clock = time.perf_counter
        self.out: collections.deque[RawStep] = collections.deque(maxlen=RAW_CAPACITY)
        self.enabled = True
        self.index = 0  # index of the step in progress
        self.step_start: float | None = None
        self.log: list[Any] = []  # this step's edges: time, tag, time, tag, ...
        self.batch_size: int | None = None
        self.batches = 0  # DataLoader batches taken this step
        self.samples = 0  # samples seen in those batches (first dim), when inferable
        self.flags = 0
        self.on_first_activity = on_first_activity
        self.on_boundary: Callable[[int], None] | None = None  # capture controller
        #: From this time.perf_counter() on, the I/O thread has a round due and
        #: wants waking at the next backward (see _server.BACKWARD_WAIT_SHARE).
        self.io_due = math.inf
        self.io_wake: Callable[[], None] | None = None
        # CUDA timing: set by the torch side once CUDA is initialised.
        self.torch: Any = None
        self.gpu_timing = False  # allowed by config
        self.device: int | None = None  # CUDA device of the training thread, once known
        self.edges: list[Any] | None = None  # this step's CUDA events, when GPU-timed
        self.event_pool: collections.deque[Any] = collections.deque()
        self.events_alive = 0
        self.pool_exhausted = 0
        self.capturing_graph = 0  # edges skipped because a CUDA graph was being captured
        self.phase_gpu = True  # this step is GPU-timed: an event at every edge
        #: () -> (stream id, device index, device type) of the current stream, from
        #: torch's private bindings when present; see _current_stream
        self._stream_query: Callable[[], tuple[int, int, int]] | None = None
        self._stream_key: tuple[int, int, int] | None = None
        self._stream_obj: Any = None
        #: (event, stream) -> None: the C binding under ``Event.record`` when
        #: there is one (a Python frame less per edge), else ``Event.record``.
        self._record: Callable[[Any, Any], None] = _call_record

    # -- phase edges ----------------------------------------------------------
    def _start(self, t: float) -> None:
        self.step_start = t
        if self.on_first_activity is not None:
            callback, self.on_first_activity = self.on_first_activity, None
            callback()
        self._begin_gpu()

    def _fail(self, where: str, exc: BaseException) -> None:
        # One error turns recording off for good: a half-working recorder would
        # produce wrong numbers, and the training loop must never see our errors.
        self.enabled = False
        if self.report_error is not None:
            self.report_error(where, exc)

    # The edge methods run several times per step inside the user's loop, where
    # every Python call and attribute lookup runs cold: they are written flat,
    # with the error guard inline rather than in a wrapper.
    def enter(self, name: str) -> None:
        if not self.enabled:
            return
        try:
            t = self.clock()
            if self.step_start is None:
                self._start(t)
            log = self.log
            log.append(t)
            log.append(name)
            if self.edges is not None:  # a GPU-timed step
                self._gpu_edge()
            if len(log) >= LOG_MAX:
                self._flush_segment()
        except Exception as exc:
            self._fail("phase enter", exc)

    def enter_wake(self, name: str) -> None:
        """``enter(name)`` for a phase in which the training thread waits with the
        GIL released (backward): also wakes the I/O thread if it has a round due."""
        self.enter(name)
        log = self.log
        if log and log[-2] >= self.io_due:  # the time enter() just logged
            self.io_due = math.inf
            wake = self.io_wake
            if wake is not None:
                try:
                    wake()
                except Exception as exc:
                    self._fail("waking the I/O thread", exc)

    def exit(self, name: str) -> None:
        if not self.enabled or self.step_start is None:
            return
        try:
            t = self.clock()
            log = self.log
            log.append(t)
            log.append(EXIT + name)
            if self.edges is not None:
                self._gpu_edge()
            if len(log) >= LOG_MAX:
                self._flush_segment()
        except Exception as exc:
            self._fail("phase exit", exc)

    def _flush_segment(self) -> None:
        # Rare: thousands of edges in one step.  The I/O thread folds the segment
        # into the step; the rest of the step goes without GPU times.
        self.out.append((SEGMENT, self.log, self.edges, self.step_start))
        self.log = []
        self.edges = None

    def exit_boundary(self, name: str) -> None:
        """``exit(name)`` and the step's end at the same instant (the optimizer
        step that ends a training step): the exit's CUDA event is the end's."""
        self.exit(name)
        if not self.enabled or self.step_start is None:
            return
        try:
            log = self.log
            self._end_step(log[-2] if log else self.clock())
        except Exception as exc:
            self._fail("step boundary", exc)

    def boundary(self) -> None:
        """End the step in progress and start the next one."""
        if not self.enabled:
            return
        try:
            t = self.clock()
            if self.step_start is None:
                self._start(t)
                return
            if self.edges is not None:
                self._gpu_edge()
            self._end_step(t)
        except Exception as exc:
            self._fail("step boundary", exc)

    def _end_step(self, t: float) -> None:
        """The end of a step at ``t`` (its last GPU event, if timed, is recorded)."""
        assert self.step_start is not None
        edges = self.edges  # None if the step is not GPU-timed or an edge failed
        wall = t - self.step_start
        every = 1
        if 0 < wall < PHASE_GPU_PERIOD_S:
            every = min(PHASE_GPU_MAX_EVERY, int(PHASE_GPU_PERIOD_S / wall))
        next_timed = (self.index + 1) % every == 0
        if not next_timed:
            next_gpu = False
        elif self.device is not None:  # CUDA is initialised (it stays so)
            next_gpu = self.gpu_timing
        else:
            next_gpu = self._gpu_wanted()
        # The event that ends this step also starts the next one when both are
        # timed: one record per boundary instead of two.
        shared = edges is not None and next_gpu
        self.out.append(
            (
                self.index,
                self.step_start,
                t,
                self.log,
                edges,
                shared,
                self.batch_size,
                self.batches,
                self.samples,
                self.flags,
                self.phase_gpu,
            )
        )
        self.index += 1
        self.phase_gpu = next_timed
        self.step_start = t
        self.log = []
        self.batches = 0
        self.samples = 0
        self.flags = 0
        if self.on_boundary is not None:
            self.on_boundary(self.index)
        if not next_gpu:
            self.edges = None
        elif shared:
            assert edges is not None
            self.edges = [edges[-1]]
        else:
            self.edges = []
            self._gpu_edge()

    def exit_batch(self, name: str, batch: Any) -> None:
        """``exit(name)`` for a phase that produced a DataLoader batch: also count
        the batch and, when cheap to see and no batch size was given, its samples."""
        self.exit(name)
        if not self.enabled:
            return
        self.batches += 1
        if self.batch_size is None:
            try:
                self.samples += _first_dim(batch)
            except Exception:
                pass

    # -- CUDA events ------------------------------------------------------------
    def _gpu_wanted(self) -> bool:
        if self.device is not None:  # CUDA was initialised (it stays so)
            return self.gpu_timing
        torch = self.torch
        if torch is None or not torch.cuda.is_initialized():
            return False
        self.device = torch.cuda.current_device()
        self._stream_query = _stream_query(torch)
        base = getattr(getattr(torch, "_C", None), "_CudaEventBase", None)
        record = getattr(base, "record", None)
        event_cls = torch.cuda.Event
        if (
            isinstance(base, type)
            and callable(record)
            and isinstance(event_cls, type)
            and issubclass(event_cls, base)
        ):
            self._record = record
        return self.gpu_timing

    def _begin_gpu(self) -> None:
        self.edges = None
        if self._gpu_wanted():
            self.edges = []
            self._gpu_edge()

    def _gpu_edge(self) -> None:
        edges = self.edges
        assert edges is not None
        cuda = self.torch.cuda
        # Recording a timing event inside CUDA graph capture is an error that would
        # break the user's capture; those steps go without GPU times.
        if cuda.is_current_stream_capturing():
            self.capturing_graph += 1
            self.flags |= FLAG_GRAPH_CAPTURE
            self.edges = None
            return
        pool = self.event_pool
        if pool:
            event = pool.pop()
        elif self.events_alive < EVENT_POOL_MAX:
            event = cuda.Event(enable_timing=True)
            self.events_alive += 1
        else:
            self.pool_exhausted += 1
            self.edges = None
            return
        stream = self._current_stream()
        if stream is None:
            event.record()
        else:
            self._record(event, stream)
        edges.append(event)

    def _current_stream(self) -> Any:
        """The current CUDA stream, or None to let ``Event.record()`` find it.

        ``record()`` with no argument builds a new ``torch.cuda.Stream`` each time
        (11 µs on the H100 machine, against 2 µs for ``record(stream)``): the
        stream object is kept and rebuilt only when the current stream changes."""
        ask = self._stream_query
        if ask is None:
            return None
        try:
            key = ask()
            if key != self._stream_key:
                self._stream_obj = self.torch.cuda.Stream(
                    stream_id=key[0], device_index=key[1], device_type=key[2]
                )
                self._stream_key = key
        except Exception:  # private API changed: the public route from now on
            self._stream_query = None
            return None
        return self._stream_obj


def replay(
    start: float,
    end: float,
    log: list[Any],
    stack: list[str],
    acc: dict[str, float] | None = None,
) -> dict[str, float]:
    """Wall seconds per phase from a step's edge log (on the I/O thread).

    ``stack`` holds the phases open when the log starts and is left holding those
    open when it ends (a phase may span steps).  Each interval goes to the
    innermost open phase; zero-length intervals add no phase."""
    acc = {} if acc is None else acc
    last = start
    for i in range(0, len(log) - 1, 2):
        t = log[i]
        if t != last:
            cur = stack[-1] if stack else OTHER
            acc[cur] = acc.get(cur, 0.0) + (t - last)
            last = t
        _apply(stack, log[i + 1])
    if end != last:
        cur = stack[-1] if stack else OTHER
        acc[cur] = acc.get(cur, 0.0) + (end - last)
    return acc


def replay_gpu(log: list[Any], events: list[Any], stack: list[str]) -> dict[str, float]:
    """GPU seconds per phase between a step's CUDA events: ``events`` are the
    step's start, one per edge of ``log``, and its end, unless the last edge
    ended the step (``exit_boundary``: one event for both); ``stack`` as the
    step started (a copy is used)."""
    if not len(log) // 2 + 1 <= len(events) <= len(log) // 2 + 2:
        raise ValueError("CUDA events do not match the step's edges")
    stack = list(stack)
    times: dict[str, float] = {}
    for k in range(len(events) - 1):
        seconds = events[k].elapsed_time(events[k + 1]) / 1000.0
        if seconds:  # as in replay(): an empty interval adds no phase
            cur = stack[-1] if stack else OTHER
            times[cur] = times.get(cur, 0.0) + seconds
        if k < len(log) // 2:
            _apply(stack, log[2 * k + 1])
    return times


#: Open phases kept at most by the replay (entries never exited fall off the bottom).
MAX_OPEN_PHASES = 64


def _apply(stack: list[str], tag: str) -> None:
    if not tag.startswith(EXIT):
        stack.append(tag)
        if len(stack) > MAX_OPEN_PHASES:
            del stack[0]
        return
    name = tag[1:]
    if stack and stack[-1] == name:
        stack.pop()
        return
    # Mismatched nesting (an exception skipped an exit): drop the innermost entry
    # with this name, if any, so the stack cannot grow forever.
    for i in range(len(stack) - 1, -1, -1):
        if stack[i] == name:
            del stack[i]
            return


def _call_record(event: Any, stream: Any) -> None:
    event.record(stream)


def _stream_query(torch: Any) -> Callable[[], tuple[int, int, int]] | None:
    """What ``torch.cuda.current_stream()`` asks, without building a Stream."""
    bindings = getattr(torch, "_C", None)
    get_stream = getattr(bindings, "_cuda_getCurrentStream", None)
    get_device = getattr(bindings, "_cuda_getDevice", None)
    if not callable(get_stream) or not callable(get_device):
        return None

    def query() -> tuple[int, int, int]:
        stream_id, device_index, device_type = get_stream(get_device())
        return (stream_id, device_index, device_type)

    return query


def _first_dim(batch: Any) -> int:
    """Samples in a batch: the first dimension of its first tensor (0 if unknown)."""
    for _ in range(3):  # look through a couple of container levels, no further
        kind = type(batch)
        if kind is tuple or kind is list:  # the usual (inputs, targets): no getattr miss
            if not batch:
                return 0
            batch = batch[0]
            continue
        shape = getattr(batch, "shape", None)
        if shape is not None:
            try:
                return int(shape[0]) if len(shape) else 0
            except (TypeError, ValueError):
                return 0
        if isinstance(batch, (list, tuple)) and batch:
            batch = batch[0]
        elif isinstance(batch, dict) and batch:
            batch = next(iter(batch.values()))
        else:
            return 0
    return 0
