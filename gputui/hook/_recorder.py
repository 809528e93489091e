"""Training-thread side of the hook: phase edges, step boundaries, CUDA events.

Everything here runs on the user's training thread, inside their optimizer step,
their forward call, their DataLoader ``__next__``, where every Python call and
attribute lookup runs cold.  So an edge only reads the clock and appends the
time and the phase to the step's edge log (plus a CUDA event from a pool on the
steps that are GPU-timed), and a step boundary hands the log itself to the I/O
thread on a bounded deque (see ``Recorder.out``).  No locks, no I/O, no dict
updates.

The I/O thread replays the logs (``replay``): time is attributed exclusively to
the innermost open phase, so the phases of a step always add up to its wall time
("other" is whatever ran outside any phase).
"""

from __future__ import annotations

import collections
import math
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from gputui.protocol.messages import BACKWARD, COMM, DATA, FORWARD, OPTIMIZER, OTHER, StepFlag

# Step flags as plain ints: the hot paths or them into the step's flags.
FLAG_PROFILED = int(StepFlag.PROFILED)
FLAG_COMPILE = int(StepFlag.COMPILE)
FLAG_GRAPH_CAPTURE = int(StepFlag.GRAPH_CAPTURE)
FLAG_LOADER_START = int(StepFlag.LOADER_START)

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

#: The exit tags of the automatic phases, built once for the hot paths.
X_DATA = EXIT + DATA
X_FORWARD = EXIT + FORWARD
X_BACKWARD = EXIT + BACKWARD
X_OPTIMIZER = EXIT + OPTIMIZER
X_COMM = EXIT + COMM

#: Tags a marker: a ``(value, tag)`` pair in the log that is not a phase edge.
MARK = "\x01"
END = MARK + "end"  # (time, END): the step ended at that time (boundary())
SAMPLES = MARK + "samples"  # (n, SAMPLES): the DataLoader batch just taken had n samples
NO_BATCH = MARK + "nobatch"  # (0, NO_BATCH): the data phase just exited with no batch

# What the training thread hands the I/O thread on ``Recorder.out``:
# - a plain step: its edge log, a list ``[index, start, t, tag, t, tag, ...]``
#   whose last pair is the step's end (the optimizer's exit, or END);
# - a full step: ``(FULL, log, events, shared, batch_size, flags)``, where events
#   is None or [start event, one event per edge of the log..., end event] (no end
#   event when the last edge ended the step) and ``shared`` says that the end
#   event also starts the next step;
# - a segment of a long step: ``(SEGMENT, log, events, t)``, the log's edges up
#   to ``t``; the rest of the step follows, with the same index and start.
# ``unpack`` reads any of them.
RawStep = Any
SEGMENT = -1
FULL = -2


class Unpacked(NamedTuple):
    idx: int  # the step index
    start: float
    end: float
    log: list[Any]
    events: list[Any] | None
    shared: bool
    batch_size: int | None
    flags: int
    full: bool  # a full step: batch_size and flags are as the step saw them


def unpack(raw: RawStep) -> Unpacked:
    """Any step entry of ``Recorder.out`` (not a segment) as named fields."""
    if type(raw) is list:
        return Unpacked(raw[0], raw[1], raw[-2], raw, None, False, None, 0, False)
    _, log, events, shared, batch_size, flags = raw
    return Unpacked(log[0], log[1], log[-2], log, events, shared, batch_size, flags, True)


class Recorder:
    """Per-process phase/step bookkeeping.  Not thread-safe by design: only the
    training thread calls the edge methods; the I/O thread only pops ``out``.

    Most steps are *plain*: their edges are a time and a tag appended to the log,
    and their end hands the log over and starts a new one.  About every
    PHASE_GPU_PERIOD_S a step is *full*: CUDA events at its edges (GPU time per
    phase), the samples of its batches counted, the capture controller called at
    its boundary; so are the steps of a capture and steps with a flag set."""

    def __init__(
        self,
        on_first_activity: Callable[[], None] | None = None,
        report_error: Callable[[str, BaseException], None] | None = None,
    ) -> None:
        self.report_error = report_error
        #: The clock of every edge.  The torch hook points bind it when they are
        #: installed: replace it before that, if at all.
        self.clock = time.perf_counter
        self.out: collections.deque[RawStep] = collections.deque(maxlen=RAW_CAPACITY)
        self.enabled = True
        #: The step in progress is plain (see the class): an edge is two appends
        #: to the log.  The hook points test this one flag and append a plain
        #: step's edges themselves; otherwise they call the methods below.
        self.plain = False
        self.started = False  # the first step has started
        #: Steps to end before the next full step (plain steps count it down).
        self.countdown = 0
        self.index = 0  # index of the step in progress
        self.log: list[Any] = [0, 0.0]  # [index, start, t, tag, t, tag, ...]
        self.batch_size: int | None = None
        #: the DataLoader iterator last seen (its id) and its settings
        self.loader_iter = 0
        self.loader: tuple[int, bool, bool, int | None] | None = None
        self.flags = 0  # flags of the step in progress (a full step)
        self.on_first_activity = on_first_activity
        self.on_boundary: Callable[[int], None] | None = None  # capture controller
        #: the thread that started recording (the training loop's): collectives
        #: called from other threads are not its phases
        self.thread: int | None = None
        self.native_thread: int | None = None  # that thread's id to the kernel
        #: perf_counter() when DDP last launched a gradient all-reduce in this
        #: backward, and a CUDA event recorded there (set by _comm, any thread;
        #: the backward hook turns them into the "comm" phase at its exit)
        self.comm_since = 0.0
        self.comm_event: Any = None
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
        self.capturing_graph = 0  # CUDA graph captures begun, and edges skipped in one
        self.graph_replays = 0  # CUDA graph replays (no hook runs inside them)
        #: () -> (stream id, device index, device type) of the current stream, from
        #: torch's private bindings when present; see _current_stream
        self._stream_query: Callable[[], tuple[int, int, int]] | None = None
        self._stream_key: tuple[int, int, int] | None = None
        self._stream_obj: Any = None
        #: (event, stream) -> None: the C binding under ``Event.record`` when
        #: there is one (a Python frame less per edge), else ``Event.record``.
        self._record: Callable[[Any, Any], None] = _call_record

    # -- state ------------------------------------------------------------------
    def _start(self, t: float) -> None:
        self.started = True
        self.thread = threading.get_ident()
        self.native_thread = threading.get_native_id()  # the kernel's id (its /proc entry)
        self.log = [self.index, t]
        if self.on_first_activity is not None:
            callback, self.on_first_activity = self.on_first_activity, None
            callback()
        self._begin_full(None)

    def _begin_full(self, shared: Any) -> None:
        """The step in progress is a full one; ``shared`` is the event that ended
        the previous step, if any, and so starts this one."""
        self.plain = False
        self.edges = None
        if self._gpu_wanted():
            if shared is not None:
                self.edges = [shared]
            else:
                self.edges = []
                self._gpu_edge()

    def restart(self) -> None:
        """The step in progress starts again now (the hook points were out for
        a while: the pause is not part of it).  Its edges so far are dropped."""
        if not self.started:
            return
        self.log = [self.index, self.clock()]
        if self.edges is not None:  # its CUDA events go, and it starts with a new one
            self.events_alive -= len(self.edges)
            self._begin_full(None)

    def want_full(self) -> None:
        """Make the step in progress (and the next ones while a capture runs) a
        full step: a capture was armed (from any thread; at worst the next full
        step sees it)."""
        if self.started and self.enabled:
            self.plain = False

    def mark(self, flag: int) -> None:
        """Set a flag on the step in progress: its end goes the full way, which
        carries flags (no CUDA events are added to it for that).  Never from
        code that dynamo traces: compiled code would set it on every call."""
        self.flags |= flag
        self.want_full()

    def disable(self) -> None:
        """Stop recording for good (uninstall, a forked child, an error)."""
        self.enabled = False
        self.plain = False

    def _fail(self, where: str, exc: BaseException) -> None:
        # One error turns recording off for good: a half-working recorder would
        # produce wrong numbers, and the training loop must never see our errors.
        self.disable()
        if self.report_error is not None:
            self.report_error(where, exc)

    # -- phase edges --------------------------------------------------------------
    # These run inside the user's loop, where every Python call and attribute
    # lookup runs cold: written flat, with the error guard inline.
    def enter(self, name: str) -> None:
        if not self.enabled:
            return
        try:
            t = self.clock()
            if not self.started:
                self._start(t)
            self.log_edge(t, name)
        except Exception as exc:
            self._fail("phase enter", exc)

    def log_edge(self, t: float, entry: str) -> None:
        """Log a phase's edge at ``t`` (its entry: the phase's name, or EXIT and
        the name), with a GPU-timed step's event; a full log is flushed.  The
        caller guards it against errors (``_fail``)."""
        log = self.log
        log.append(t)
        log.append(entry)
        if self.edges is not None:  # a GPU-timed step
            self._gpu_edge()
        if len(log) >= LOG_MAX:
            self._flush_segment(t)

    def enter_wake(self, name: str) -> None:
        """``enter(name)`` for a phase in which the training thread waits with the
        GIL released (backward): also wakes the I/O thread if it has a round due."""
        self.enter(name)
        if self.clock() >= self.io_due:
            self.wake_io()

    def wake_io(self) -> None:
        """Start the I/O thread's round that is due (see ``io_due``)."""
        self.io_due = math.inf
        wake = self.io_wake
        if wake is not None:
            try:
                wake()
            except Exception as exc:
                self._fail("waking the I/O thread", exc)

    def exit(self, name: str) -> None:
        if not self.enabled or not self.started:
            return
        try:
            self.log_edge(self.clock(), EXIT + name)
        except Exception as exc:
            self._fail("phase exit", exc)

    def exit_batch(self, batch: Any) -> None:
        """Exit the data phase with the DataLoader batch it produced, and count
        its samples when no batch size was given (the hook point appends a
        plain step's exit itself, without counting)."""
        self.exit(DATA)
        if self.batch_size is None and self.enabled and self.started:
            try:
                n = _first_dim(batch)
            except Exception:
                return
            if n:
                self.log.append(n)
                self.log.append(SAMPLES)

    def exit_no_batch(self) -> None:
        """Exit the data phase that ended without a batch (StopIteration, mostly)."""
        self.exit(DATA)
        if self.enabled and self.started:
            self.log.append(0)
            self.log.append(NO_BATCH)

    def _flush_segment(self, t: float) -> None:
        # Rare: thousands of edges in one step.  The I/O thread folds the segment
        # into the step; the rest of the step goes without GPU times.
        log = self.log
        self.out.append((SEGMENT, log, self.edges, t))
        self.log = [log[0], log[1]]
        self.edges = None

    # -- step boundaries --------------------------------------------------------------
    def close_step(self, tag: str) -> None:
        """End the step in progress now, logging ``tag`` as its last edge: the
        exit that ends it (the lead optimizer's, ``X_OPTIMIZER``), whose CUDA
        event is the end's, or END."""
        if not self.enabled or not self.started:
            return
        try:
            t = self.clock()
            log = self.log
            log.append(t)
            log.append(tag)
            if self.plain and self.countdown > 1:
                self.countdown -= 1
                self.out.append(log)
                self.index = index = self.index + 1
                self.log = [index, t]
                return
            if self.edges is not None:
                self._gpu_edge()
            self._end_step(t)
        except Exception as exc:
            self._fail("step boundary", exc)

    def exit_boundary(self, name: str) -> None:
        """``exit(name)`` and the step's end at the same instant."""
        self.close_step(EXIT + name)

    def boundary(self) -> None:
        """End the step in progress and start the next one."""
        if not self.enabled:
            return
        if self.started:
            self.close_step(END)
            return
        try:
            self._start(self.clock())
        except Exception as exc:
            self._fail("step boundary", exc)

    def _end_step(self, t: float) -> None:
        """The end, at ``t``, of a full step or of the last plain step before one
        (its end pair is logged and, if GPU-timed, its last event recorded)."""
        log = self.log
        edges = self.edges  # None if the step is not GPU-timed or an edge failed
        countdown = self.countdown - 1
        if countdown <= 0:  # the next step is a full one
            wall = t - log[1]
            countdown = 1
            if 0 < wall < PHASE_GPU_PERIOD_S:
                countdown = min(PHASE_GPU_MAX_EVERY, int(PHASE_GPU_PERIOD_S / wall))
            next_full = True
        else:
            next_full = False
        self.countdown = countdown
        next_gpu = next_full and self._gpu_wanted()
        # The event that ends this step also starts the next one when both are
        # GPU-timed: one record per boundary instead of two.
        shared = edges is not None and next_gpu
        if self.plain and not shared:
            self.out.append(log)
        else:
            self.out.append((FULL, log, edges, shared, self.batch_size, self.flags))
        self.index = index = self.index + 1
        self.log = [index, t]
        self.flags = 0
        hook = self.on_boundary  # read once: another thread may clear it
        if hook is not None:
            hook(index)  # may set flags (a profiled step)
            next_full = next_full or self.on_boundary is not None
        if next_full:
            self._begin_full(edges[-1] if shared and edges else None)
        else:
            self.plain = True
            self.edges = None

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


class HookPoints:
    """What installs hook points in torch: the recorder they feed, where their
    errors go (``report_error(where, exc)``), and torch, once imported."""

    def __init__(
        self, recorder: Recorder, report_error: Callable[[str, BaseException], None]
    ) -> None:
        self.rec = recorder
        self.report_error = report_error
        self.torch: Any = None


def replay(
    start: float,
    end: float,
    log: list[Any],
    stack: list[str],
    acc: dict[str, float] | None = None,
    counts: list[int] | None = None,
) -> dict[str, float]:
    """Wall seconds per phase from a step's edge log (on the I/O thread).

    ``stack`` holds the phases open when the log starts and is left holding those
    open when it ends (a phase may span steps).  Each interval goes to the
    innermost open phase; zero-length intervals add no phase.  ``counts``, if
    given, gets ``[batches, samples, batches with samples]`` added to it."""
    acc = {} if acc is None else acc
    get = acc.get
    last = start
    for i in range(2, len(log) - 1, 2):
        tag = log[i + 1]
        if tag in _MARKS:
            if counts is not None:
                if tag == SAMPLES:
                    counts[1] += log[i]
                    counts[2] += 1
                elif tag == NO_BATCH:
                    counts[0] -= 1
            continue
        t = log[i]
        if t != last:
            cur = stack[-1] if stack else OTHER
            acc[cur] = get(cur, 0.0) + (t - last)
            last = t
        if tag[0] == EXIT:
            if tag == X_DATA and counts is not None:
                counts[0] += 1
            _exit(stack, tag)
        else:
            stack.append(tag)
            if len(stack) > MAX_OPEN_PHASES:
                del stack[0]
    if end != last:
        cur = stack[-1] if stack else OTHER
        acc[cur] = get(cur, 0.0) + (end - last)
    return acc


def replay_gpu(log: list[Any], events: list[Any], stack: list[str]) -> dict[str, float]:
    """GPU seconds per phase between a step's CUDA events: ``events`` are the
    step's start, one per edge of ``log`` (markers have none), and its end,
    unless the last edge ended the step (``exit_boundary``: one event for both);
    ``stack`` as the step started (a copy is used)."""
    tags = [tag for tag in log[3::2] if tag not in _MARKS]
    if not len(tags) + 1 <= len(events) <= len(tags) + 2:
        raise ValueError("CUDA events do not match the step's edges")
    stack = list(stack)
    times: dict[str, float] = {}
    for k in range(len(events) - 1):
        seconds = events[k].elapsed_time(events[k + 1]) / 1000.0
        if seconds:  # as in replay(): an empty interval adds no phase
            cur = stack[-1] if stack else OTHER
            times[cur] = times.get(cur, 0.0) + seconds
        if k < len(tags):
            _apply(stack, tags[k])
    return times


#: Open phases kept at most by the replay (entries never exited fall off the bottom).
MAX_OPEN_PHASES = 64


def _apply(stack: list[str], tag: str) -> None:
    if tag[0] == EXIT:
        _exit(stack, tag)
        return
    stack.append(tag)
    if len(stack) > MAX_OPEN_PHASES:
        del stack[0]


def _exit(stack: list[str], tag: str) -> None:
    name = _EXIT_NAMES.get(tag)
    if name is None:
        name = tag[1:]
        if len(_EXIT_NAMES) < 4096:
            _EXIT_NAMES[tag] = name
    if stack and stack[-1] == name:
        stack.pop()
        return
    # Mismatched nesting (an exception skipped an exit): drop the innermost entry
    # with this name, if any, so the stack cannot grow forever.
    for i in range(len(stack) - 1, -1, -1):
        if stack[i] == name:
            del stack[i]
            return


_MARKS = frozenset((END, SAMPLES, NO_BATCH))
#: Exit tag -> phase name, for the replay (no slicing per edge).
_EXIT_NAMES = {EXIT + name: name for name in (DATA, FORWARD, BACKWARD, COMM, OPTIMIZER)}


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
