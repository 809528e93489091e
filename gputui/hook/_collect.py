"""The I/O thread's side of step recording: the training thread's raw steps
become finished step records in the ring.

Each raw step is replayed into wall time per phase (``_recorder.replay``); a
GPU-timed step waits here until its last CUDA event has completed (polled with
``query()``, never a synchronisation) and then gets GPU time per phase.  Records
enter the ring as compact tuples and become the wire's objects
(``StepRecord.wire``) only when a viewer reads them.
"""

from __future__ import annotations

import collections
import time
from typing import Any

from gputui.hook._compile_watch import CompileWatch
from gputui.hook._recorder import (
    _MARKS,
    FLAG_COMPILE,
    SEGMENT,
    Recorder,
    _apply,
    replay,
    replay_gpu,
    unpack,
)
from gputui.hook._ring import HISTORY, Ring
from gputui.protocol.messages import OTHER
from gputui.protocol.schema import StepRecord

GPU_PENDING_MAX = 4096  # steps waiting for CUDA events before we stop waiting


class StepCollector:
    def __init__(self, recorder: Recorder, capacity: int = HISTORY) -> None:
        self.recorder = recorder
        self.ring = Ring(capacity, self._record)
        self.gpu_pending: collections.deque[tuple[Any, ...]] = collections.deque()
        self.expected_index: int | None = None
        # Replaying the training thread's edge logs: the phases open between
        # steps, and the phase times of a long step's first segments.
        self.open_phases: list[str] = []
        self.partial: dict[str, float] | None = None
        self.partial_since = 0.0
        self.partial_counts = [0, 0, 0]
        self.batch_samples = 0.0  # samples per DataLoader batch, as last looked into
        self.dropped = 0  # step records lost before reaching the ring (training-side overflow)
        self.steps_total = 0
        # perf_counter() -> Unix time, for the records' end times
        self.perf0 = time.perf_counter()
        self.wall0 = time.time()
        #: torch.compile's work, polled at each collect: the steps that overlap a
        #: window in which something was compiled are compile steps
        self.compile_watch = CompileWatch(lambda: recorder.clock())
        self.compile_windows: list[tuple[float, float]] = []

    @property
    def last_index(self) -> int:
        """The newest finished step's index; -1 before any (so that the first
        batch's missed count is exact too)."""
        return -1 if self.expected_index is None else self.expected_index - 1

    def collect(self) -> None:
        """Move finished steps from the training thread into the ring."""
        self.compile_windows.extend(self.compile_watch.poll())
        out = self.recorder.out
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
        pool = self.recorder.event_pool
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
            batch_size = self.recorder.batch_size
        if self.compile_windows and self._compiled(start, end):
            flags |= FLAG_COMPILE
        if flags & FLAG_COMPILE:
            self.compile_watch.compile_steps += 1
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

    def _compiled(self, start: float, end: float) -> bool:
        """Whether compilation happened during the step from ``start`` to
        ``end``; windows that ended before it are dropped (steps come in order)."""
        windows = self.compile_windows
        windows[:] = [w for w in windows if w[1] >= start]
        return any(t0 < end and t1 > start for t0, t1 in windows)

    def _record(self, item: tuple[Any, ...]) -> dict[str, Any]:
        """A step as the wire carries it (the ``steps`` message's records)."""
        index, start, end, acc, gpu, batch_size, batches, samples, flags = item
        inferred = False
        if batch_size:
            samples = batch_size * max(1, batches)
        elif samples:
            inferred = True
        return StepRecord.wire(
            index,
            round(self.wall0 + (end - self.perf0), 4),
            round(end - start, 7),
            {k: round(v, 7) for k, v in acc.items()},
            None if gpu is None else {k: round(v, 7) for k, v in gpu.items()},
            None if gpu is None else round(sum(gpu.values()), 7),
            samples or None,
            inferred,
            batches,
            flags,
        )

    def now(self) -> tuple[str | None, float | None, float | None]:
        """Where the training thread is now: its innermost open phase, seconds
        since its last phase edge, and since the step in progress began (None
        before the first step).  Read on the I/O thread after ``collect()``: the
        step's log so far, replayed on the phases open when it began."""
        rec = self.recorder
        if not rec.started:
            return None, None, None
        log = list(rec.log)  # one atomic copy: the training thread keeps appending
        if len(log) < 2:
            return None, None, None
        stack = list(self.open_phases) if self.partial is None else []
        last = float(log[1])
        for i in range(2, len(log) - 1, 2):
            tag = log[i + 1]
            if tag in _MARKS:
                continue
            last = float(log[i])
            _apply(stack, tag)
        now = rec.clock()
        return (
            stack[-1] if stack else OTHER,
            round(max(0.0, now - last), 4),
            round(max(0.0, now - float(log[1])), 4),
        )

    def recent_step_s(self, count: int = 20) -> float | None:
        recent = self.ring.last(count)
        if not recent:
            return None
        return round(sum(r["wall"] for r in recent) / len(recent), 7)


def _query(event: Any) -> bool:
    try:
        return bool(event.query())
    except Exception:
        return True
