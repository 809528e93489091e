"""The Python stack sampler: where the training thread's time goes, by function
and line, without ptrace or privileges (docs/hook.md, "Python stack sampler").

A daemon thread wakes about every ``INTERVAL_S``, reads the training thread's
frame (``sys._current_frames()``: the thread that started the first step,
``Recorder.thread``) and walks it outwards.  Each sample is weighted by the
time since the previous one, not counted: a training thread that holds the GIL
(a long C call such as ``sorted()`` of a big list) keeps the sampler from
running, so counts would undercount exactly the code that hogs the
interpreter, while the elapsed time credits it in full, to where the thread
first lets the GIL go (the call's line or the next one; within Python's 5 ms
switch interval, wherever it releases the GIL on its own).  A gap longer than
``SUSPECT_GAP_S`` in which the process used almost no CPU (it was stopped) is
credited ``GAP_FLOOR_S`` only.

Per function (code object) and per line: self time (the innermost frame),
total time (anywhere on the stack, once per sample however deep it recurses)
and site time (the innermost frame of the job's own code, with the library or
torch code it called); self and site time per step phase (replayed from the
recorder's edge log, as the collector does).  gputui's own frames are
transparent.  Each sample is also torch's own or outside torch (its owner,
:func:`_outside`): a standard-library frame counts as its caller's, code
generated at run time (``exec``: inductor's kernel launchers) takes its
caller's kind, and a library that torch's compiler runs (triton, sympy) is
torch's, while a library's code that torch calls back (a model's forward, a
dataset) is the library's.  Tables are bounded (past ``MAX_FUNCTIONS``/``MAX_LINES`` time
goes to one ``other`` row) and cover the last one to two ``WINDOW_S`` windows.

A tick holds the GIL (the training thread waits for it when it wants it
back), so it does as little as it can: it walks the stack keeping each frame's
code and instruction offset, and appends them, its weight and where the
recorder's edge log stands to a bounded list of pending samples.  The phase
(the edge log replayed), naming, classing and the tables wait for the fold:
when a profile is built, or when ``MAX_PENDING`` samples have piled up; it
sums the samples of each distinct stack and phase first, and adds each such
stack to the tables once.

Nothing runs on the training thread: the tables are the sampler thread's
(under ``lock``; the I/O thread takes it to copy them for a profile).
``GPUTUI_SAMPLER=0`` turns it off.  An error stops the sampler and is
reported once; it never reaches the training loop.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from types import CodeType, FrameType
from typing import Any

from gputui.hook._profile_rows import (
    _OTHER_INFO,
    _add,
    _Info,
    _phase_map,
    _r,
    build_profile,
)
from gputui.hook._recorder import _MARKS, Recorder, _apply
from gputui.protocol.messages import OTHER
from gputui.protocol.profile import (
    KIND_LIB,
    KIND_TORCH,
    KIND_USER,
    SAMPLER_FAILED,
    SAMPLER_OFF,
    SAMPLER_ON,
    PythonProfile,
    SamplerInfo,
)

ENV = "GPUTUI_SAMPLER"
#: values of GPUTUI_SAMPLER that turn the sampler off
OFF_VALUES = frozenset({"0", "off", "false", "no"})

INTERVAL_S = 0.01  # ~100 Hz
#: a gap between samples longer than this, in which the process used less than
#: SUSPECT_CPU_SHARE of it in CPU time, was a stop (SIGSTOP, a suspended VM):
#: it is credited GAP_FLOOR_S.  A GIL-holding call uses CPU all along (even on
#: a crowded machine, a good share of it) and keeps its full time.
SUSPECT_GAP_S = 1.0
SUSPECT_CPU_SHARE = 0.1
GAP_FLOOR_S = 4 * INTERVAL_S
#: no training thread yet (or it is gone): look again this often
IDLE_S = 0.1
#: one window's span; a profile covers the last one to two windows
WINDOW_S = 30.0
MAX_FUNCTIONS = 1000  # function rows per window (then the ``other`` row)
#: line rows per window (by instruction: then each function's offset -1, "no line")
MAX_LINES = 2000
MAX_ROW_PHASES = 16  # phases per function row (then MORE_PHASES)
MAX_PHASES = 64  # phases per window
MORE_PHASES = "(other phases)"
MAX_DEPTH = 256  # frames walked per sample, from the innermost
_DEPTH = range(MAX_DEPTH)
#: samples a window holds before they are folded into its tables (a profile
#: folds them too)
MAX_PENDING = 128
MAX_CODES = 8192  # code objects classified and remembered
#: distinct stacks (by function) per window, for the call paths: past it, a new
#: stack's time still counts everywhere else, but no path can name it
MAX_STACKS = 1024

#: [seconds, ticks, CPU seconds]: when a bench sets it (before ``start``), the
#: sampler thread adds the time each tick holds the GIL, from its wake-up to its
#: next sleep, and its own CPU time in that span (less than the first where the
#: machine preempted it meanwhile); None: nothing is measured
TICK_TIME: list[Any] | None = None
#: when a bench sets it (before ``start``), each tick appends its wake-up time
#: (``time.perf_counter()``, the GIL just taken) to this list; None: nothing
TICK_LOG: list[float] | None = None

_NO_LINE = -1  # the offset of a function's time past MAX_LINES: line 0 on the wire

# What a code's frames are for the owner of a sample (_Info's last field): torch's
# own code, torch's compiler and its runtime (a library it calls is torch's too),
# the job's own code, a library, the standard library (its caller's), and code
# generated at run time (resolved to its caller's when first seen)
_C_TORCH, _C_COMPILER, _C_USER, _C_LIB, _C_STD, _C_GENERATED = range(6)
#: torch's compiler stack, relative to torch's package directory: the libraries
#: it calls (triton, sympy) run for torch, not for the job
_COMPILER = (
    "_dynamo/",
    "_inductor/",
    "_functorch/",
    "fx/",
    "_subclasses/",
    "_higher_order_ops/",
    "utils/_sympy/",
    "_export/",
    "export/",
    "_prims/",
    "_prims_common/",
    "_refs/",
    "_decomp/",
    "_guards.py",
)
#: the file name ``exec``/``compile`` give code made from a string
_GENERATED = "<string>"

# Row layouts (plain lists: the sampler's loop indexes them)
# function: [self_s, total_s, last sample seq, {phase: self_s}, {offset: line row}, info,
#            site_s, {phase: site_s}, outside_s]
# line:     [self_s, total_s, last sample seq, site_s], by instruction offset (f_lasti)
# Site time: the sample's innermost frame of the job's own code (kind user) gets
# it, whatever library or torch code it had called: what the job can change.


def gap_weight(elapsed_s: float, cpu_s: float, floor_s: float = GAP_FLOOR_S) -> float:
    """A sample's weight: the ``elapsed_s`` since the previous one, unless that
    was a stop (longer than SUSPECT_GAP_S with under SUSPECT_CPU_SHARE of it
    used as CPU time by the process: ``cpu_s``), which is worth ``floor_s``."""
    if elapsed_s > max(SUSPECT_GAP_S, floor_s) and cpu_s < SUSPECT_CPU_SHARE * elapsed_s:
        return floor_s
    return elapsed_s


#: the interpreter's GIL switch interval while the sampler runs, where it is
#: CPython's default (5 ms): a thread that waits for the GIL gets it after this
#: long at most from a thread running Python.  At 5 ms, Python that gives the
#: GIL up sooner at a call that releases it (a torch op, I/O) is never seen:
#: the sampler takes the GIL there, and its sample lands on that call (3 ms of
#: Python before each 1 ms call: 0% of the samples, for 75% of the time; at
#: 1 ms, 65%).  The hand-overs are as many as before: each tick asks once.
SWITCH_S = 0.001
#: CPython's default switch interval: another one was set on purpose and is kept
DEFAULT_SWITCH_S = 0.005
#: set to 0 (off, false, no) to keep the interpreter's switch interval as it is
SWITCH_ENV = "GPUTUI_SAMPLER_SWITCH"


def env_enabled() -> bool:
    return os.environ.get(ENV, "").strip().lower() not in OFF_VALUES


class _Window:
    __slots__ = (
        "deep",
        "funcs",
        "kinds",
        "lines",
        "off_cpu_s",
        "other",
        "outside_off_cpu_s",
        "outside_phases",
        "outside_s",
        "pending",
        "phases",
        "sampled_s",
        "samples",
        "site_s",
        "stacks",
    )

    def __init__(self) -> None:
        self.funcs: dict[int, list[Any]] = {}  # id(code) -> function row
        self.other: list[Any] | None = None  # functions past MAX_FUNCTIONS
        self.lines = 0  # line rows in funcs
        self.samples = 0
        self.sampled_s = 0.0
        self.site_s = 0.0  # samples with a frame of the job's own code
        self.outside_s = 0.0  # samples in code outside torch (_outside)
        # of the samples' time, the training thread off the CPU (sleeping,
        # blocked in I/O or on a lock): all of it, and outside torch
        self.off_cpu_s = 0.0
        self.outside_off_cpu_s = 0.0
        self.outside_phases: dict[str, float] = {}
        self.phases: dict[str, float] = {}
        self.kinds: dict[str, float] = {}
        self.deep = 0  # samples whose stack was cut at MAX_DEPTH
        #: (id(code), ...) innermost first -> [seconds, (f_lasti, ...) when first seen]
        self.stacks: dict[tuple[int, ...], list[Any]] = {}
        #: the samples not folded yet: ([code, ...], [f_lasti, ...]) innermost
        #: first, seconds, of them off the CPU, the recorder's edge log then and
        #: its length then
        self.pending: list[tuple[list[CodeType], list[int], float, float, list[Any], int]] = []


def library_roots(path: Sequence[str], script: str) -> tuple[str, ...]:
    """The import path's entries that hold installed distributions (a
    ``*.dist-info`` folder: ``pip install --target``, a tree of packages put on
    PYTHONPATH), whose files are libraries' code, not the job's; site-packages
    are libraries by name already.  The job's own tree (the folder of its
    script, or one above it) never counts, nor does the current folder ('')."""
    here = os.path.dirname(os.path.abspath(script)) if script else ""
    roots = []
    for entry in path:
        if not isinstance(entry, str) or not entry:
            continue  # sys.path may hold anything; '' is the current folder
        if "site-packages" in entry or "dist-packages" in entry:
            continue
        full = os.path.abspath(entry)
        if here and (here == full or here.startswith(full + os.sep)):
            continue
        try:
            with os.scandir(full) as it:
                if any(e.name.endswith(".dist-info") and e.is_dir() for e in it):
                    roots.append(full + os.sep)
        except OSError:
            continue
    return tuple(roots)


class Sampler:
    """Samples the recorder's training thread; ``snapshot()`` builds the
    profile (on the I/O thread).  ``start``/``stop`` follow the hook's
    lifecycle; a forked child calls ``after_fork_in_child``."""

    def __init__(
        self,
        recorder: Recorder,
        report_error: Callable[[str, BaseException], None] | None = None,
        interval_s: float = INTERVAL_S,
        enabled: bool | None = None,
        window_s: float = WINDOW_S,
    ) -> None:
        #: called on the sampler thread about every ``periodic_s`` (a DataLoader
        #: worker writes its profile for the training process with it)
        self.periodic: Callable[[], None] | None = None
        self.periodic_s = 2.0
        #: a frame of this code (gputui's own) ends the stack: in a DataLoader
        #: worker, the frames under its loop are the training process's at the fork
        self.bottom: CodeType | None = None
        self.rec = recorder
        self.report_error = report_error
        self.interval_s = interval_s
        self.gap_floor_s = max(GAP_FLOOR_S, 4 * interval_s)
        self.window_s = window_s
        self.enabled = env_enabled() if enabled is None else enabled
        self.reason: str | None = None if self.enabled else f"turned off by {ENV}=0"
        self.failed = False
        self.samples = 0
        #: whether a sample read the training thread's time off the CPU
        self.off_measured = False
        #: the switch interval start() replaced (None: it left it as it was)
        self._switch_was: float | None = None
        self.lock = threading.Lock()
        self._stopping = False
        self._generation = 0
        self._thread: threading.Thread | None = None
        self._codes: dict[int, _Info] = {}
        self._cur = _Window()
        self._prev: _Window | None = None
        self._cur_start = 0.0  # perf_counter() of the current window's first sample
        self._prev_start = 0.0
        self._seq = 0
        # the phase tracker: the edge log last read, how far, and the open phases
        self._log: list[Any] | None = None
        self._pos = 2
        self._stack: list[str] = []
        own = os.path.dirname(os.path.dirname(__file__))
        self._own = tuple({own + os.sep, os.path.abspath(own) + os.sep})
        self._stdlib = os.path.dirname(os.__file__) + os.sep
        self._torch: str | None = None
        #: the import path's trees of installed packages outside site-packages
        #: (read once on the sampler thread, when it starts)
        self._libs: tuple[str, ...] | None = None

    # -- lifecycle ------------------------------------------------------------------
    def start(self) -> None:
        if not self.enabled or self.failed or self._thread is not None:
            return
        self._stopping = False
        self._generation += 1  # a thread of an earlier start that outlived stop() ends
        thread = threading.Thread(
            target=self._run, args=(self._generation,), name="gputui-hook-sampler", daemon=True
        )
        self._thread = thread
        self._shorten_switch()
        thread.start()

    def _shorten_switch(self) -> None:
        """The GIL switch interval at SWITCH_S while sampling, where it is the
        default and the environment does not say otherwise."""
        if os.environ.get(SWITCH_ENV, "").strip().lower() in OFF_VALUES:
            return
        if abs(sys.getswitchinterval() - DEFAULT_SWITCH_S) < 1e-6:
            sys.setswitchinterval(SWITCH_S)
            self._switch_was = DEFAULT_SWITCH_S

    def stop(self, timeout: float = 0.5) -> None:
        self._stopping = True
        thread, self._thread = self._thread, None
        was, self._switch_was = self._switch_was, None
        if was is not None and abs(sys.getswitchinterval() - SWITCH_S) < 1e-6:
            sys.setswitchinterval(was)  # unless the job set its own meanwhile
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        if self.reason is None and not self.failed:
            self.reason = "stopped with the hook"

    def after_fork_in_child(self) -> None:
        """A forked child has no sampler thread (threads do not survive fork),
        and the lock may have been held by it at the fork."""
        self.lock = threading.Lock()
        self._stopping = True
        self._thread = None
        self.reason = "not sampled in a forked child"
        was, self._switch_was = self._switch_was, None
        if was is not None and abs(sys.getswitchinterval() - SWITCH_S) < 1e-6:
            sys.setswitchinterval(was)  # the child's own sampler sets it again if it has one

    @property
    def running(self) -> bool:
        return self._thread is not None and not self._stopping

    def info(self) -> SamplerInfo:
        """The status's ``sampler``."""
        if self.failed:
            state = SAMPLER_FAILED
        elif self.enabled and not self._stopping:
            state = SAMPLER_ON
        else:
            state = SAMPLER_OFF
        reason = None if state == SAMPLER_ON else self.reason
        return SamplerInfo(state, self.interval_s, self.samples, reason)

    # -- the sampler thread ---------------------------------------------------------
    def _run(self, generation: int) -> None:
        try:
            self._loop(generation)
        except Exception as exc:  # never into the job: report once and stop
            self.failed = True
            self.reason = f"{type(exc).__name__}: {exc}"
            if self.report_error is not None:
                self.report_error("python sampler", exc)

    def _loop(self, generation: int) -> None:
        if self._libs is None:  # once, before any sample holds the lock
            self._libs = library_roots(sys.path, sys.argv[0] if sys.argv else "")
        rec = self.rec
        sleep = time.sleep
        clock = time.perf_counter
        cpu = time.process_time
        frames_of = sys._current_frames
        period = self.interval_s
        floor = self.gap_floor_s
        suspect = max(SUSPECT_GAP_S, floor)
        last = last_cpu = 0.0
        have_last = False
        periodic = self.periodic
        due = clock() + self.periodic_s
        timing = TICK_TIME
        ticks = TICK_LOG
        thread_cpu = time.thread_time
        tick_cpu = 0.0
        # the training thread's scheduler statistics: its time on a CPU and
        # waiting for one; the rest of each sample's time it slept, or was
        # blocked in I/O or on a lock
        clocked: Any = None  # the thread whose statistics ``stat_fd`` reads
        stat_fd: int | None = None
        last_stat: tuple[int, int] | None = None
        while not self._stopping and generation == self._generation:
            tid = rec.thread
            if tid is None:
                have_last = False
                sleep(IDLE_S)
                continue
            if tid != clocked:
                clocked, have_last = tid, False
                stat_fd = _reopen_schedstat(stat_fd, rec.native_thread)
            sleep(period)
            # before the tick takes the GIL for good: the read lets it go, and
            # the stack and the edge log's length must be of one moment
            now_stat = None
            if stat_fd is not None:
                now_stat = _schedstat(stat_fd)
                if now_stat is None:  # the thread is gone
                    stat_fd = _reopen_schedstat(stat_fd, None)
            now = clock()  # the GIL is back: this tick holds it until the next sleep
            if ticks is not None:
                ticks.append(now)
            if timing is not None:
                tick_cpu = thread_cpu()
            if self._stopping or generation != self._generation:
                return
            frame = frames_of().get(tid)
            now_cpu = cpu()
            if frame is None:  # the training thread is gone
                have_last = False
                sleep(IDLE_S)
                continue
            if not have_last:
                have_last = True
                last, last_cpu, last_stat = now, now_cpu, now_stat
                continue
            elapsed = weight = now - last
            if weight > suspect:  # a stop, or a call that held the GIL this long
                weight = gap_weight(weight, now_cpu - last_cpu, floor)
            off = 0.0
            if now_stat is not None and last_stat is not None and elapsed > 0.0:
                ran = (now_stat[0] - last_stat[0] + now_stat[1] - last_stat[1]) / 1e9
                off = weight * min(1.0, max(0.0, 1.0 - ran / elapsed))
                self.off_measured = True
            last, last_cpu, last_stat = now, now_cpu, now_stat
            with self.lock:
                self._record(frame, weight, now, off)
            frame = None
            if periodic is not None and now >= due:
                due = now + self.periodic_s
                periodic()
            if timing is not None:
                timing[0] += clock() - now
                timing[1] += 1
                timing[2] += thread_cpu() - tick_cpu

    def _phase(self, log: list[Any], length: int) -> str:
        """The training thread's innermost open phase when a sample saw the
        recorder's edge log ``log`` at ``length``: the edges appended since the
        previous sample are applied to the open phases (a log handed over since
        is finished first; the recorder never changes it after).  Steps that
        began and ended between two samples are not seen: a phase opened in
        one of them and left open is missed until it closes."""
        stack = self._stack
        if log is not self._log:
            old = self._log
            if old is not None:
                _replay(old, self._pos, stack, len(old))
            self._log = log
            self._pos = 2
        self._pos = _replay(log, self._pos, stack, length)
        return stack[-1] if stack else OTHER

    def _record(self, frame: FrameType, weight: float, now: float, off: float = 0.0) -> None:
        """One sample (the sampler thread, under ``lock``, holding the GIL the
        training thread may want): only the stack's codes and instruction
        offsets and the edge log's length, in ``pending``; the phase, naming,
        classing and the tables wait for ``_fold``.  ``off``: the part of
        ``weight`` the training thread spent off the CPU."""
        win = self._cur
        if not win.samples:
            self._cur_start = now - weight  # the first sample's weight is time before it
        elif now - self._cur_start >= self.window_s:
            self._fold(win)  # its samples' phases come before the next window's
            self._prev, self._prev_start = win, self._cur_start
            self._cur = win = _Window()
            self._cur_start = now - weight
        log = self.rec.log
        length = len(log)
        self.samples += 1
        win.samples += 1
        win.sampled_s += weight
        codes: list[CodeType] = []
        offsets: list[int] = []
        push_code = codes.append
        push_offset = offsets.append
        f: FrameType | None = frame
        for _ in _DEPTH:
            if f is None:
                break
            push_code(f.f_code)
            # By instruction, not line: f_lineno decodes the line table on
            # each read (~0.5 us a frame); the fold turns offsets into lines.
            push_offset(f.f_lasti)
            f = f.f_back
        bottom = self.bottom
        if bottom is not None:  # a DataLoader worker: its stack ends there
            for i, code in enumerate(codes):
                if code is bottom:
                    del codes[i:], offsets[i:]
                    f = None
                    break
        if f is not None:
            win.deep += 1
        pending = win.pending
        pending.append((codes, offsets, weight, off, log, length))
        if len(pending) >= MAX_PENDING:
            self._fold(win)

    def fold(self) -> None:
        """Fold both windows' pending samples into their tables (under ``lock``)."""
        for win in (self._prev, self._cur):
            if win is not None:
                self._fold(win)

    def _fold(self, win: _Window) -> None:
        """Add ``win``'s pending samples to its tables: self and total time per
        function and line, site time, kinds, phases and the call paths' stacks;
        the samples of each distinct stack and phase summed first, and added
        once, as one sample would be."""
        pending = win.pending
        if not pending:
            return
        win.pending = []
        phase_of = self._phase
        # The codes in an entry keep their ids their own while it is held.
        raw: dict[tuple[str, tuple[int, ...], tuple[int, ...]], list[Any]] = {}
        for sample_codes, sample_offsets, sample_weight, sample_off, log, length in pending:
            raw_key = (phase_of(log, length), tuple(map(id, sample_codes)), tuple(sample_offsets))
            entry = raw.get(raw_key)
            if entry is None:
                raw[raw_key] = [sample_weight, sample_codes, sample_off]
            else:
                entry[0] += sample_weight
                entry[2] += sample_off
        get = win.funcs.get
        kinds = win.kinds
        stacks = win.stacks
        for (phase, ids, offsets), (weight, codes, off) in raw.items():
            _bump(win.phases, phase, weight, MAX_PHASES)
            self._seq = seq = self._seq + 1
            win.off_cpu_s += off
            outside = self._outside(codes, ids)
            if outside:
                win.outside_s += weight
                win.outside_off_cpu_s += off
                _bump(win.outside_phases, phase, weight, MAX_PHASES)
            inner = True  # the innermost frame is still to come: self time
            site = True  # the innermost frame of the job's own code too: site time
            kept: list[int] = []  # the stack's codes (gputui's own left out)
            kept_offsets: list[int] = []
            for i, (cid, lasti) in enumerate(zip(ids, offsets, strict=True)):
                row = get(cid)
                if row is None:
                    info = self._info(codes, ids, i)
                    if info[4]:  # gputui's own frame: transparent
                        continue
                    row = self._new_function(win, info)
                if row[2] != seq:  # once per sample, however deep it recurses
                    row[2] = seq
                    row[1] += weight
                kept.append(cid)
                kept_offsets.append(lasti)
                lrow = row[4].get(lasti)
                if lrow is None:
                    lrow = self._new_line(win, row[4], lasti)
                if lrow[2] != seq:
                    lrow[2] = seq
                    lrow[1] += weight
                if inner:
                    inner = False
                    row[0] += weight
                    row[9] += off
                    if outside:
                        row[8] += weight
                    lrow[0] += weight
                    _bump(row[3], phase, weight, MAX_ROW_PHASES)
                    kind = row[5][3]
                    kinds[kind] = kinds.get(kind, 0.0) + weight
                if site and row[5][3] == KIND_USER:
                    site = False
                    row[6] += weight
                    row[10] += off
                    lrow[3] += weight
                    _bump(row[7], phase, weight, MAX_ROW_PHASES)
                    win.site_s += weight
            stack_key = tuple(kept)
            srow = stacks.get(stack_key)
            if srow is not None:
                srow[0] += weight
            elif len(stacks) < MAX_STACKS:
                stacks[stack_key] = [weight, tuple(kept_offsets)]

    def _info(self, codes: list[CodeType], ids: tuple[int, ...], i: int) -> _Info:
        """The classification of a stack's ``i``-th code (innermost first):
        code generated at run time takes its caller's kind, so its callers are
        classified first."""
        info = self._codes.get(ids[i])
        if info is not None:
            return info
        code = codes[i]
        caller: _Info | None = None
        if code.co_filename == _GENERATED:
            for j in range(i + 1, len(codes)):
                caller = self._info(codes, ids, j)
                if not caller[4]:
                    break
                caller = None
        return self._classify(code, caller)

    def _outside(self, codes: list[CodeType], ids: tuple[int, ...]) -> bool:
        """Whether a sample (its stack, innermost first) is time in code
        outside torch: its innermost frame, standard-library frames counted as
        their caller's, is the job's own or a library's.  A library's code is
        torch's when torch's compiler or its runtime called it (triton, sympy),
        and the library's own when other torch code did (a library's model
        forward called by ``Module.__call__``, a library's dataset by the
        DataLoader).  Walks only as far as it takes to tell."""
        in_library = False
        known = self._codes.get
        for i, cid in enumerate(ids):
            info = known(cid)
            if info is None:
                info = self._info(codes, ids, i)
            if info[4]:
                continue
            owner = info[7]
            if owner == _C_STD:
                continue
            if owner == _C_LIB:
                in_library = True
                continue
            if owner == _C_USER:
                return True
            return in_library and owner == _C_TORCH
        return True

    def _new_function(self, win: _Window, info: _Info) -> list[Any]:
        """The function row of ``info``'s code in ``win`` (new, or the
        ``other`` row past the bound)."""
        if len(win.funcs) < MAX_FUNCTIONS:
            row = [0.0, 0.0, 0, {}, {}, info, 0.0, {}, 0.0, 0.0, 0.0]
            win.funcs[id(info[0])] = row
            return row
        other = win.other
        if other is None:
            win.other = other = [0.0, 0.0, 0, {}, {}, _OTHER_INFO, 0.0, {}, 0.0, 0.0, 0.0]
        return other

    def _new_line(self, win: _Window, lines: dict[int, list[Any]], lasti: int) -> list[Any]:
        if win.lines >= MAX_LINES:
            lasti = _NO_LINE  # past the bound: the function's time without a line
            lrow = lines.get(lasti)
            if lrow is not None:
                return lrow
        lrow = [0.0, 0.0, 0, 0.0]
        lines[lasti] = lrow
        win.lines += 1
        return lrow

    def _classify(self, code: CodeType, caller: _Info | None = None) -> _Info:
        """A code's kind, and what its frames are for a sample's owner;
        ``caller``: the classification of the frame that called it (code
        generated at run time is its caller's)."""
        file = code.co_filename or ""
        name = getattr(code, "co_qualname", None) or code.co_name
        skip = file.startswith(self._own)
        kind, owner = self._kind(file)
        if owner == _C_GENERATED:
            kind, owner = (KIND_USER, _C_USER) if caller is None else (caller[3], caller[7])
        info: _Info = (code, file, name, kind, skip, code.co_firstlineno, {}, owner)
        codes = self._codes
        if len(codes) < MAX_CODES:
            codes[id(code)] = info  # keeps the code alive: its id stays its own
        return info

    def _kind(self, file: str) -> tuple[str, int]:
        """A file's kind of code, and what its frames are for a sample's owner."""
        torch_dir = self._torch
        if torch_dir is None:
            torch_file = getattr(sys.modules.get("torch"), "__file__", None)
            if isinstance(torch_file, str):
                self._torch = torch_dir = os.path.dirname(torch_file) + os.sep
        if torch_dir is not None and file.startswith(torch_dir):
            inner = file[len(torch_dir) :].replace(os.sep, "/")
            return KIND_TORCH, _C_COMPILER if inner.startswith(_COMPILER) else _C_TORCH
        if file.startswith("<eval_with_key>") or "/torchinductor_" in file:
            return KIND_TORCH, _C_COMPILER  # torch.fx and inductor's generated code
        if "/site-packages/" in file or "/dist-packages/" in file:
            return KIND_LIB, _C_LIB
        libs = self._libs  # None before the thread has read them
        if libs and file.startswith(libs):
            return KIND_LIB, _C_LIB
        if file.startswith((self._stdlib, "<frozen ")):
            return KIND_LIB, _C_STD
        if file == _GENERATED:
            return KIND_USER, _C_GENERATED
        return KIND_USER, _C_USER

    # -- the profile (I/O thread) --------------------------------------------------------
    def snapshot(self, notes: tuple[str, ...] = ()) -> PythonProfile | None:
        """The profile of the last one to two windows; None when the sampler is
        off or has no sample yet."""
        if not self.enabled:
            return None
        now = time.perf_counter()
        with self.lock:  # the fold and copies: the merge runs without the lock
            windows = [w for w in (self._prev, self._cur) if w is not None and w.samples]
            if not windows:
                return None
            for win in windows:
                self._fold(win)
            start = self._prev_start if len(windows) == 2 else self._cur_start
            samples = sum(w.samples for w in windows)
            sampled = sum(w.sampled_s for w in windows)
            site_total = sum(w.site_s for w in windows)
            deep = sum(w.deep for w in windows)
            truncated = any(w.other is not None or w.lines >= MAX_LINES for w in windows)
            phases: dict[str, float] = {}
            kinds: dict[str, float] = {}
            outside = sum(w.outside_s for w in windows)
            off_cpu = sum(w.off_cpu_s for w in windows)
            outside_off_cpu = sum(w.outside_off_cpu_s for w in windows)
            outside_phases: dict[str, float] = {}
            copies: list[tuple[Any, list[Any], list[Any]]] = []
            stack_copies = [list(w.stacks.items()) for w in windows]
            for win in windows:
                _add(phases, win.phases)
                _add(kinds, win.kinds)
                _add(outside_phases, win.outside_phases)
                rows: list[tuple[Any, list[Any]]] = list(win.funcs.items())
                if win.other is not None:
                    rows.append((None, win.other))
                for key, row in rows:
                    lines = [(n, r[0], r[1], r[3]) for n, r in row[4].items()]
                    fields = [
                        row[0], row[1], dict(row[3]), row[5], row[6], dict(row[7]), row[8],
                        row[9], row[10],
                    ]  # fmt: skip
                    copies.append((key, fields, lines))
        if deep:
            notes = (*notes, f"{deep} samples had stacks deeper than {MAX_DEPTH} frames (cut)")
        return build_profile(
            copies,
            stack_copies,
            {
                "t": round(time.time(), 3),
                "window_s": round(max(0.0, now - start), 3),
                "sampled_s": _r(sampled),
                "site_s": _r(site_total),
                "samples": samples,
                "interval_s": self.interval_s,
                "phases_s": _phase_map(phases),
                "kinds_s": {k: _r(v) for k, v in kinds.items()},
                "truncated": truncated,
                "notes": notes,
                "outside_s": _r(outside),
                "off_cpu_s": _r(off_cpu) if self.off_measured else None,
                "outside_off_cpu_s": _r(outside_off_cpu) if self.off_measured else None,
                "outside_phases_s": _phase_map(outside_phases),
            },
        )


def _replay(log: list[Any], pos: int, stack: list[str], length: int) -> int:
    """Apply the whole (time, tag) pairs of the first ``length`` entries of
    ``log`` from ``pos`` to ``stack``; returns the position after them (the
    training thread may have been between the two appends of a pair)."""
    end = length - 1
    while pos < end:
        tag = log[pos + 1]
        if tag not in _MARKS:
            _apply(stack, tag)
        pos += 2
    return pos


def _bump(into: dict[str, float], phase: str, weight: float, limit: int) -> None:
    if phase in into:
        into[phase] += weight
    elif len(into) < limit:
        into[phase] = weight
    else:
        into[MORE_PHASES] = into.get(MORE_PHASES, 0.0) + weight


def _reopen_schedstat(fd: int | None, native_id: int | None) -> int | None:
    """``/proc/self/task/ID/schedstat`` of thread ``native_id`` opened (the one
    ``fd`` had closed), or None where it cannot be read (no id, no procfs, a
    kernel without scheduler statistics)."""
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass
    if native_id is None:
        return None
    try:
        fd = os.open(f"/proc/self/task/{int(native_id)}/schedstat", os.O_RDONLY)
    except (OSError, ValueError):
        return None
    if _schedstat(fd) is None:
        os.close(fd)
        return None
    return fd


def _schedstat(fd: int) -> tuple[int, int] | None:
    """A thread's nanoseconds on a CPU and waiting on a run queue (the first two
    fields of its schedstat; a read at offset 0 is fresh), None once unreadable."""
    try:
        fields = os.pread(fd, 128, 0).split()
        return int(fields[0]), int(fields[1])
    except (OSError, ValueError, IndexError):
        return None
