"""Training-thread side of the hook: phase edges, step boundaries, CUDA events.

Everything here runs on the user's training thread, inside their optimizer step,
their forward call, their DataLoader ``__next__``.  So it only reads a clock, keeps
a small phase stack, records a CUDA event from a pool when CUDA is in use, and
appends one tuple per step to a bounded deque.  No locks, no I/O, no allocation
beyond the per-step dict.  The I/O thread turns the tuples into messages.

Time is attributed exclusively to the innermost open phase, so the phases of a
step always add up to its wall time ("other" is whatever ran outside any phase).
"""

from __future__ import annotations

import collections
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

#: Finished step records waiting for the I/O thread.  It drains them 10-20 times a
#: second, so this only fills if that thread is starved for >16 s at 1000 steps/s;
#: overflow is counted from the gap in step indices, never silent.
RAW_CAPACITY = 16384

#: GPU times need a CUDA event at every phase edge and step boundary (~10 per step:
#: 3 µs each to record on the H100 machine, plus the I/O thread's reads and the GIL
#: hand-overs they cause).  On short steps that is a visible share of the step, so
#: events are recorded on one step in N, with N chosen so that a timed step comes
#: about every PHASE_GPU_PERIOD_S; the other steps have wall times only.
PHASE_GPU_PERIOD_S = 0.05
PHASE_GPU_MAX_EVERY = 64

#: CUDA events alive at once (pending + free).  If the GPU falls this far behind,
#: steps are recorded without GPU times rather than creating events without bound.
EVENT_POOL_MAX = 8192

# A raw step record, as appended by the training thread:
# (index, start_perf, end_perf, wall_by_phase, edges, last_edge_shared, batch_size,
#  batches, samples, flags, gpu_phases_timed); edges is
#  [(phase_of_interval_ending_here, cuda_event)] or None
RawStep = tuple


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
        self.last_edge = 0.0
        self.stack: list[str] = []
        self.acc: dict[str, float] = {}
        self.batch_size: int | None = None
        self.batches = 0  # DataLoader batches taken this step
        self.samples = 0  # samples seen in those batches (first dim), when inferable
        self.flags = 0
        self.on_first_activity = on_first_activity
        self.on_boundary: Callable[[int], None] | None = None  # capture controller
        # CUDA timing: set by the torch side once CUDA is initialised.
        self.torch: Any = None
        self.gpu_timing = False  # allowed by config
        self.device: int | None = None  # CUDA device of the training thread, once known
        self.edges: list[tuple[str | None, Any]] | None = None
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

    # -- phase edges ----------------------------------------------------------
    def _start(self, t: float) -> None:
        self.step_start = t
        self.last_edge = t
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

    def enter(self, name: str) -> None:
        if not self.enabled:
            return
        try:
            self._enter(name)
        except Exception as exc:
            self._fail("phase enter", exc)

    def exit(self, name: str) -> None:
        if not self.enabled or self.step_start is None:
            return
        try:
            self._exit(name)
        except Exception as exc:
            self._fail("phase exit", exc)

    def boundary(self) -> None:
        """End the step in progress and start the next one."""
        if not self.enabled:
            return
        try:
            self._boundary()
        except Exception as exc:
            self._fail("step boundary", exc)

    def _enter(self, name: str) -> None:
        t = self.clock()
        if self.step_start is None:
            self._start(t)
            cur = None
        else:
            cur = self.stack[-1] if self.stack else OTHER
            self.acc[cur] = self.acc.get(cur, 0.0) + (t - self.last_edge)
            self.last_edge = t
        self.stack.append(name)
        if self.edges is not None and cur is not None and self.phase_gpu:
            self._gpu_edge(cur)

    def _exit(self, name: str) -> None:
        t = self.clock()
        stack = self.stack
        cur = stack[-1] if stack else OTHER
        self.acc[cur] = self.acc.get(cur, 0.0) + (t - self.last_edge)
        self.last_edge = t
        if stack:
            if stack[-1] == name:
                stack.pop()
            else:
                # Mismatched nesting (an exception skipped an exit): drop the
                # innermost entry with this name so the stack cannot grow forever.
                for i in range(len(stack) - 1, -1, -1):
                    if stack[i] == name:
                        del stack[i]
                        break
        if self.edges is not None and self.phase_gpu:
            self._gpu_edge(cur)

    def _boundary(self) -> None:
        t = self.clock()
        if self.step_start is None:
            self._start(t)
            return
        cur = self.stack[-1] if self.stack else OTHER
        acc = self.acc
        acc[cur] = acc.get(cur, 0.0) + (t - self.last_edge)
        if self.edges is not None:
            self._gpu_edge(cur)
        edges = self.edges
        wall = t - self.step_start
        every = 1
        if 0 < wall < PHASE_GPU_PERIOD_S:
            every = min(PHASE_GPU_MAX_EVERY, int(PHASE_GPU_PERIOD_S / wall))
        next_timed = (self.index + 1) % every == 0
        next_gpu = next_timed and self._gpu_wanted()
        # The event that ends this step also starts the next one when both are
        # timed: one record per boundary instead of two.
        shared = edges is not None and next_gpu
        self.out.append(
            (
                self.index,
                self.step_start,
                t,
                acc,
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
        self.last_edge = t
        self.acc = {}
        self.batches = 0
        self.samples = 0
        self.flags = 0
        if self.on_boundary is not None:
            self.on_boundary(self.index)
        if not next_gpu:
            self.edges = None
        elif shared:
            assert edges is not None
            self.edges = [(None, edges[-1][1])]
        else:
            self.edges = []
            self._gpu_edge(None)

    def note_batch(self, batch: Any) -> None:
        """Count a DataLoader batch and, when cheap to see, its number of samples."""
        self.batches += 1
        n = _first_dim(batch)
        if n:
            self.samples += n

    # -- CUDA events ------------------------------------------------------------
    def _gpu_wanted(self) -> bool:
        torch = self.torch
        if torch is None or not torch.cuda.is_initialized():
            return False
        if self.device is None:
            self.device = torch.cuda.current_device()
            self._stream_query = _stream_query(torch)
        return self.gpu_timing

    def _begin_gpu(self) -> None:
        self.edges = None
        if self._gpu_wanted():
            self.edges = []
            self._gpu_edge(None)

    def _gpu_edge(self, phase: str | None) -> None:
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
            event.record(stream)
        edges.append((phase, event))

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
