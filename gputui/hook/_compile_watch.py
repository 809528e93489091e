"""torch.compile in the job, read off the training thread (the I/O thread).

Dynamo keeps what it did in module globals of ``torch._dynamo.utils``; they are
private to torch, so every read is guarded and a missing one is named in the
report's ``unavailable`` (protocol.compile).  Nothing here imports torch or
dynamo: a job that never imported ``torch._dynamo`` (or imported it and never
compiled anything, as ``torch.optim`` does) gets no report at all.

Two uses:

- :meth:`CompileWatch.poll`, from every ``StepCollector.collect()``: a cheap
  signal (frames compiled, compile-time entries of dynamo's frame compiles and
  of lazy backward compiles) that says whether compilation happened since the
  previous poll; the collector marks the steps that overlap that window as
  compile steps (``StepFlag.COMPILE``), which step statistics leave out;
- :meth:`CompileWatch.report`: the ``compile`` message, built once a status
  period for subscribed viewers.

Reads copy dynamo's dicts first (``dict(d)``/``list(d)`` run in C under the
GIL), so a compile on the training thread never changes one while we iterate.
"""

from __future__ import annotations

import collections
import os
import re
import sys
import time
from collections.abc import Iterable, Mapping
from typing import Any

from gputui.protocol import compile as pc
from gputui.protocol.compile import CompileReason, CompileReport

#: compile-time entries that mark compilation (not running compiled code):
#: dynamo's whole frame compile (``_compile.compile_inner``) and Inductor's lazy
#: compile of the backward graph (``compile_fx.<locals>.bw_compiler``)
_COMPILE_KEYS = ("compile_inner", "bw_compiler")
_RESUME = re.compile(r"^torch_dynamo_resume_in_(?P<fn>.+)_at_(?P<line>\d+)$")
_ATTEMPT = re.compile(r"^\d+/\d+: ")
#: guard failures caused by gputui's own module hooks (removed once its root
#: detection is over): a compiled frame's guards check their number
_HOOK_GUARD = re.compile(r"_global_(forward|backward)(_pre)?_hooks")
_GPUTUI_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _dynamo() -> Any:
    return sys.modules.get("torch._dynamo.utils")


def _compile_entries(utils: Any) -> tuple[int, float]:
    """(compile entries, compile seconds) in ``compilation_time_metrics``."""
    metrics = getattr(utils, "compilation_time_metrics", None)
    if not isinstance(metrics, Mapping):
        return 0, 0.0
    count, seconds = 0, 0.0
    for key, values in list(metrics.items()):
        if isinstance(key, str) and key.endswith(_COMPILE_KEYS):
            times = list(values)
            count += len(times)
            seconds += sum(t for t in times if isinstance(t, (int, float)))
    return count, seconds


def _signal(utils: Any) -> tuple[int, int] | None:
    """(frames compiled, compile-time entries): what changes when dynamo compiles."""
    if utils is None:
        return None
    try:
        frames = _counter(getattr(utils, "counters", None), "frames").get("total", 0)
        return frames, _compile_entries(utils)[0]
    except Exception:
        return None


def _counter(counters: Any, name: str) -> dict[str, int]:
    value = dict.get(counters, name) if isinstance(counters, dict) else None
    if not isinstance(value, Mapping):
        return {}
    return {str(k): int(v) for k, v in dict(value).items() if isinstance(v, int)}


def _first_line(text: str) -> str:
    """A reason's first line, with dynamo's first hint when it gives one."""
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    if not lines:
        return ""
    out = lines[0]
    hint = next((line for line in lines[1:] if line.startswith("Hint:")), None)
    if hint is not None:
        out += f" ({hint[5:].strip()})"
    return out[: pc.MAX_REASON]


def _ours(filename: Any) -> bool:
    return isinstance(filename, str) and os.path.abspath(filename).startswith(_GPUTUI_DIR)


class CompileWatch:
    def __init__(self, clock: Any, since: float | None = None) -> None:
        self.clock = clock
        #: what was compiled before the watch began is not its own
        self.signal: tuple[int, int] | None = _signal(_dynamo())
        self.last_poll = clock()
        self.compile_steps = 0
        #: the start (Unix seconds) of the newest compile record already seen;
        #: compiles that ended before the watch began (a hook installed again in
        #: one process) are not its own
        self.watermark = 0.0
        self.since = time.time() if since is None else since
        #: the poll time since which a growth of the counters waits for a record
        self.pending: float | None = None
        self.waited = 0  #: polls since, without a record
        #: what the torch hooks lack to keep out of compilation
        #: (TorchHooks.dynamo_missing): unavailable too
        self.hook_missing: list[str] = []

    # -- the cheap signal (every collect) -----------------------------------------------
    def poll(self) -> list[tuple[float, float]]:
        """The windows (clock times) in which compilation happened since the
        previous poll: each compile's own interval from dynamo's records (start
        and duration; a record comes when its compile is done), else, when the
        counters grew and no record came in two polls (a torch without them),
        the whole time since the growth was seen."""
        now = self.clock()
        since, self.last_poll = self.last_poll, now
        utils = _dynamo()
        if utils is None:
            return []
        found = self._intervals(utils, now)
        signal = _signal(utils)
        if signal is not None and signal != self.signal:
            old = self.signal or (0, 0)
            self.signal = signal  # (counters cleared by the job go down: no compile)
            if (signal[0] > old[0] or signal[1] > old[1]) and self.pending is None:
                self.pending, self.waited = since, 0
        if found:
            self.pending = None
            return found
        if self.pending is None:
            return []
        self.waited += 1
        if self.waited < 2:
            return []
        window, self.pending = (self.pending, now), None
        return [window]

    def _intervals(self, utils: Any, now: float) -> list[tuple[float, float]]:
        """The compiles dynamo recorded since the last look, as clock intervals."""
        get = getattr(utils, "get_compilation_metrics", None)
        try:
            records = list(get()) if callable(get) else []
        except Exception:
            return []
        to_clock = now - time.time()  # Unix seconds -> this clock
        out = []
        for rec in records:
            start: Any = getattr(rec, "start_time_us", None)
            seconds: Any = getattr(rec, "duration_us", None)
            if isinstance(start, (int, float)) and isinstance(seconds, (int, float)):
                start, seconds = start / 1e6, seconds / 1e6
            else:  # torch before the microsecond fields
                start = getattr(rec, "start_time", None)
                seconds = getattr(rec, "entire_frame_compile_time_s", None)
            if not isinstance(start, (int, float)) or not isinstance(seconds, (int, float)):
                continue
            if start <= self.watermark or start + seconds < self.since:
                continue
            self.watermark = start
            out.append((start + to_clock, start + seconds + to_clock))
        return out

    # -- the report (once a status period) ---------------------------------------------
    def report(self) -> dict[str, Any] | None:
        """The ``compile`` message; None when nothing was compiled."""
        utils = _dynamo()
        if utils is None:
            return None
        unavailable: list[str] = []
        counters = getattr(utils, "counters", None)
        if not isinstance(counters, dict):
            unavailable.append(pc.SOURCE_COUNTERS)
            counters = {}
        frames = _counter(counters, "frames")
        stats = _counter(counters, "stats")
        breaks = _counter(counters, "graph_break")
        seconds: float | None = None
        if isinstance(getattr(utils, "compilation_time_metrics", None), Mapping):
            entries, seconds = _compile_entries(utils)
        else:
            unavailable.append(pc.SOURCE_TIME)
            entries = 0
        if not frames.get("total") and not entries:
            return None
        records = self._records(utils, unavailable)
        failures = getattr(utils, "guard_failures", None)
        recompiles: int | None = None
        reasons: list[CompileReason] = []
        hook_recompiles = 0
        if isinstance(failures, Mapping):
            recompiles, reasons, hook_recompiles = _recompiles(dict(failures))
        else:
            unavailable.append(pc.SOURCE_GUARD_FAILURES)
        unavailable += [name for name in self.hook_missing if name not in unavailable]
        available = pc.SOURCE_COUNTERS not in unavailable
        return CompileReport(
            frames=frames.get("total") if available else None,
            graphs=stats.get("unique_graphs") if available else None,
            graph_breaks=sum(breaks.values()) if available else None,
            recompiles=recompiles,
            compile_s=None if seconds is None else round(seconds, 3),
            compile_steps=self.compile_steps,
            breaks=_breaks(breaks, _counter(counters, "resumes"), records),
            recompile_reasons=tuple(reasons[: pc.MAX_REASONS]),
            hook_recompiles=hook_recompiles,
            unavailable=tuple(unavailable),
        ).to_wire()

    @staticmethod
    def _records(utils: Any, unavailable: list[str]) -> list[Any]:
        get = getattr(utils, "get_compilation_metrics", None)
        try:
            return list(get()) if callable(get) else _missing(unavailable)
        except Exception:
            return _missing(unavailable)


def _missing(unavailable: list[str]) -> list[Any]:
    unavailable.append(pc.SOURCE_METRICS)
    return []


def _breaks(
    counts: Mapping[str, int], resumes: Mapping[str, int], records: Iterable[Any]
) -> tuple[CompileReason, ...]:
    """Graph-break reasons, most frequent first, each with the user's line where
    dynamo's records tell it: a break restarts the compile of its frame (the
    frame's record lists the reason), and the frame resumes after the break in a
    function named after the break's line."""
    frames_of: dict[str, set[tuple[str, str]]] = collections.defaultdict(set)
    lines_of: dict[tuple[str | None, str], set[int]] = collections.defaultdict(set)
    for rec in records:
        name, filename = getattr(rec, "co_name", None), getattr(rec, "co_filename", None)
        if not isinstance(name, str) or not isinstance(filename, str) or _ours(filename):
            continue
        resume = _RESUME.match(name)
        if resume is not None:
            lines_of[(filename, resume["fn"])].add(int(resume["line"]))
            continue
        for reason in getattr(rec, "restart_reasons", None) or ():
            frames_of[_first_line(str(reason))].add((filename, name))
    for name in resumes:
        resume = _RESUME.match(name)
        if resume is not None:
            lines_of[(None, resume["fn"])].add(int(resume["line"]))
    out = []
    for reason, count in sorted(counts.items(), key=lambda kv: -kv[1]):
        text = _first_line(reason)
        filename = function = None
        line = None
        frames = frames_of.get(text)
        if frames and len(frames) == 1:
            filename, function = next(iter(frames))
            lines = lines_of.get((filename, function)) or lines_of.get((None, function))
            if lines:
                line = min(lines)
        elif len(counts) == 1 and len(lines_of) == 1:  # one break, one resume: its line
            (filename, function), lines = next(iter(lines_of.items()))
            line = min(lines)
        out.append(CompileReason(text, count, filename, line, function))
    return tuple(out[: pc.MAX_REASONS])


def _recompiles(failures: Mapping[Any, Any]) -> tuple[int, list[CompileReason], int]:
    """(recompiles, their reasons most frequent first, those caused by gputui's
    own hooks) from ``guard_failures`` (code object -> reasons)."""
    total = ours = 0
    found: collections.Counter[tuple[str, str | None, int | None, str | None]]
    found = collections.Counter()
    for code, reasons in list(failures.items()):
        filename = getattr(code, "co_filename", None)
        first = getattr(code, "co_firstlineno", None)
        name = getattr(code, "co_name", None)
        for reason in list(reasons or ()):
            total += 1
            text = _ATTEMPT.sub("", _first_line(str(reason)))
            if _ours(filename) or _HOOK_GUARD.search(text):
                ours += 1
                continue
            resume = _RESUME.match(name or "")
            if resume is not None:
                name = resume["fn"]
            found[(text, filename, first, name)] += 1
    reasons_out = [
        CompileReason(text, n, filename, line, name)
        for (text, filename, line, name), n in found.most_common()
    ]
    return total, reasons_out, ours
