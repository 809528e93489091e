"""The hook's Python stack sampler: attribution, time weighting, phases, the
bounded table, classification, the off switch, and that nothing it does can
raise into the sampled thread.  Deadlines, not timings: every condition is
polled until it holds or a generous deadline passes."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

import gputui.hook._sampler as sampler_mod
from gputui.hook._recorder import Recorder
from gputui.hook._sampler import (
    GAP_FLOOR_S,
    MAX_FUNCTIONS,
    MAX_LINES,
    MAX_ROW_PHASES,
    MORE_PHASES,
    Sampler,
    gap_weight,
)
from gputui.protocol.profile import (
    KIND_LIB,
    KIND_OTHER,
    KIND_TORCH,
    KIND_USER,
    SAMPLER_FAILED,
    SAMPLER_OFF,
    SAMPLER_ON,
    PythonProfile,
)
from tests.helpers.hookutil import wait_for

GPUTUI_DIR = os.path.dirname(os.path.dirname(sampler_mod.__file__))


def busy_python(until: float) -> int:
    total = 0
    while time.perf_counter() < until:
        for i in range(2000):
            total += i * i
    return total


def gil_hog(values: list[float]) -> list[float]:
    return sorted(values)  # one C call: holds the GIL throughout


def sleeper(seconds: float) -> None:
    time.sleep(seconds)  # the GIL released


class Worker:
    """A thread running ``body(stop_event)`` that a Sampler watches as the
    training thread."""

    def __init__(self, body: Callable[[threading.Event], None]) -> None:
        self.stop = threading.Event()
        self.started = threading.Event()
        self.error: BaseException | None = None

        def run() -> None:
            self.started.set()
            try:
                body(self.stop)
            except BaseException as exc:  # the test fails on it
                self.error = exc

        self.thread = threading.Thread(target=run, daemon=True)

    def __enter__(self) -> Worker:
        self.thread.start()
        self.started.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)
        assert self.error is None, self.error


@contextmanager
def sampling(body: Callable[[threading.Event], None], **kw: Any) -> Iterator[Sampler]:
    rec = Recorder()
    sampler = Sampler(rec, enabled=True, **kw)
    with Worker(body) as worker:
        rec.thread = worker.thread.ident
        sampler.start()
        try:
            yield sampler
        finally:
            sampler.stop()


def profile_after(sampler: Sampler, seconds: float, timeout: float = 60.0) -> PythonProfile:
    """The profile once it holds ``seconds`` of sampled time."""

    def ready() -> PythonProfile | None:
        snap = sampler.snapshot()
        return snap if snap is not None and snap.sampled_s >= seconds else None

    return wait_for(ready, timeout, f"{seconds} s of samples")  # type: ignore[no-any-return]


def row(profile: PythonProfile, function: str) -> Any:
    found = [r for r in profile.functions if r.function == function]
    assert found, [r.function for r in profile.functions]
    return found[0]


# -- attribution ----------------------------------------------------------------------------
def test_a_busy_function_gets_most_of_the_time() -> None:
    def body(stop: threading.Event) -> None:
        while not stop.is_set():
            busy_python(time.perf_counter() + 0.05)

    with sampling(body) as sampler:
        profile = profile_after(sampler, 1.0)
    top = profile.top_self(1)[0]
    assert top.function == "busy_python" and top.kind == KIND_USER
    assert top.file == __file__ and top.first_line == busy_python.__code__.co_firstlineno
    assert profile.share(top.self_s) > 0.8
    assert top.total_s >= top.self_s
    # the thread's entry point is on every stack: total time, no self time
    outer = row(profile, "Worker.__init__.<locals>.run")
    assert outer.total_s == pytest.approx(profile.sampled_s, rel=1e-6)
    assert profile.share(outer.self_s) < 0.05
    line = profile.lines[0]
    assert line.function == "busy_python" and line.file == __file__
    first, last = busy_python.__code__.co_firstlineno, busy_python.__code__.co_firstlineno + 5
    assert first < line.line <= last
    assert sum(profile.kinds_s.values()) == pytest.approx(profile.sampled_s, rel=1e-3)
    assert profile.interval_s == sampler.interval_s and profile.samples > 20


def test_time_weighting_credits_a_gil_holding_call_its_wall_time() -> None:
    """sorted() of a big list holds the GIL: the sampler cannot run during it
    and takes one sample when it ends.  Counting samples would give it about
    one sample per call against several per sleep; weighting each sample by
    the time since the previous one gives it its share of the wall time."""
    # a hog of at least 10 sampling intervals: the sampler, woken during it,
    # has that long to be scheduled before the hog ends, even on a loaded
    # machine, and counting would give the hog at most 2 samples in 12
    n = 300_000
    while True:
        values = [float((i * 7919) % 1000003) for i in range(n)]
        t0 = time.perf_counter()
        gil_hog(values)
        sort_s = time.perf_counter() - t0
        if sort_s >= 0.1 or n >= 4_800_000:
            break
        n *= 2
    spent = {"hog": 0.0, "sleep": 0.0}
    watched: list[Sampler] = []

    def gil_hog_seen(values: list[float]) -> None:
        """sorted() as gil_hog, then on in this frame until the sampler has
        taken two samples since it read how many it had.  On a crowded machine
        the sampler, given the GIL as sorted() returns, can lose its core before
        it reads the stack, and would then find the thread already in the next
        call; and it can take one sample at the call to sorted(), just before
        the sort, where the interpreter gives the GIL away.  The second sample
        is read after the sort, in this frame, so the sort's time is credited
        here either way (the wait for it is this frame's time too, and counted
        in ``spent``).  The wait calls no Python function (``stop.is_set()``
        is one): a thread left by another test can take the GIL as the sort
        ends, and the sampler, given it back at that call's first line, would
        credit the sort to ``Event.is_set``."""
        sampler = watched[0]
        seen = sampler.samples
        sorted(values)
        while sampler.samples < seen + 2 and not done:
            pass

    def body(stop: threading.Event) -> None:
        clock = time.perf_counter
        while not watched and not stop.is_set():
            time.sleep(0.01)
        while not stop.is_set():
            a = clock()
            gil_hog_seen(values)
            b = clock()
            sleeper(sort_s)  # the control: as long, with the GIL free
            spent["hog"] += b - a
            spent["sleep"] += clock() - b

    done: list[bool] = []  # set (non-empty) before the sampler stops

    with sampling(body) as sampler:
        watched.append(sampler)
        profile = profile_after(sampler, max(3.0, 20 * sort_s))
        done.append(True)
    wall = spent["hog"] + spent["sleep"]
    hog_share = spent["hog"] / wall
    # the hog's time lands on its frame
    got = profile.share(row(profile, gil_hog_seen.__qualname__).self_s)
    slept = profile.share(row(profile, "sleeper").self_s)
    seen = [(r.function, round(profile.share(r.self_s), 3)) for r in profile.top_self(6)]
    why = (
        got,
        hog_share,
        slept,
        sort_s,
        sampler.samples,
        seen,
        sys.getswitchinterval(),
        threading.active_count(),
    )
    assert abs(got - hog_share) < 0.2, why
    assert abs(slept - (1 - hog_share)) < 0.2, why
    # counted, the hog would have about two samples per call against one per
    # interval of each sleep: a share of 2 / (2 + sort_s / interval)
    counted = 2 / (2 + sort_s / sampler.interval_s)
    assert got > counted + 0.15, (got, counted)


def recurse(n: int, until: float) -> None:
    if n:
        recurse(n - 1, until)
    else:
        busy_python(until)


def repeating(fn: Callable[..., Any], *args: Any) -> Callable[[threading.Event], None]:
    """A thread body: ``fn(*args, until)`` for 50 ms, again and again."""

    def body(stop: threading.Event) -> None:
        while not stop.is_set():
            fn(*args, time.perf_counter() + 0.05)

    return body


def test_self_time_goes_to_the_innermost_frame_and_total_to_each_once() -> None:
    with sampling(repeating(recurse, 5)) as sampler:
        profile = profile_after(sampler, 1.0)
    rec_row = row(profile, "recurse")
    # six frames of recurse on every stack count once per sample
    assert rec_row.total_s <= profile.sampled_s * 1.0001
    assert profile.share(rec_row.total_s) > 0.9
    assert profile.share(rec_row.self_s) < 0.1
    assert profile.share(row(profile, "busy_python").self_s) > 0.8


LIBRARY = """
import time

def work(until, callback=None):
    if callback is not None:
        return callback(until)
    while time.perf_counter() < until:
        pass
"""


def test_site_time_goes_to_the_innermost_frame_of_the_jobs_own_code() -> None:
    """A function of the job's own code that spends its time in a library's
    functions is where the job can change something: it gets that time as
    site time; the library's functions keep it as self time."""
    namespace: dict[str, Any] = {}
    path = "/venv/lib/python3.11/site-packages/fakelib/core.py"
    exec(compile(LIBRARY, path, "exec"), namespace)
    work = namespace["work"]
    callback: dict[str, Any] = {"fn": None}

    def augment(until: float) -> None:
        work(until, callback["fn"])

    def body(stop: threading.Event) -> None:
        while not stop.is_set():
            augment(time.perf_counter() + 0.05)

    with sampling(body) as sampler:
        profile = profile_after(sampler, 1.0)
    top = profile.top(1)[0]
    assert top.function.endswith("<locals>.augment") and top.kind == KIND_USER
    assert profile.share(top.site_s) > 0.8 and profile.share(top.self_s) < 0.1
    assert top.site_phases_s == {"other": top.site_s}
    lib = row(profile, "work")
    assert lib.kind == KIND_LIB and lib.site_s == 0.0 and profile.share(lib.self_s) > 0.8
    assert profile.top_self(1)[0] == lib
    assert profile.site_s == pytest.approx(profile.sampled_s, rel=1e-3)
    assert profile.lines[0].function.endswith("augment") and profile.lines[0].site_s > 0

    # a library calling back into the job's code: the callback is the site
    callback["fn"] = busy_python
    with sampling(body) as sampler:
        profile = profile_after(sampler, 1.0)
    assert profile.top(1)[0].function == "busy_python"
    assert row(profile, "work").site_s == 0.0
    assert profile.share(row(profile, "work").total_s) > 0.9


def test_phases_come_from_the_recorders_edge_log() -> None:
    rec = Recorder()
    sampler = Sampler(rec, enabled=True)

    def body(stop: threading.Event) -> None:
        while not stop.is_set():
            rec.enter("forward")
            busy_python(time.perf_counter() + 0.03)
            rec.exit("forward")
            rec.enter("augment")
            sleeper(0.03)
            rec.exit("augment")
            busy_python(time.perf_counter() + 0.03)  # outside any phase: "other"
            rec.boundary()

    with Worker(body):
        wait_for(lambda: rec.thread is not None, 10, "the first phase edge")
        sampler.start()
        try:
            profile = profile_after(sampler, 2.0)
        finally:
            sampler.stop()
    busy = row(profile, "busy_python")
    assert set(busy.phases_s) == {"forward", "other"}
    assert busy.phases_s["forward"] > 0.2 * busy.self_s
    assert busy.phases_s["other"] > 0.2 * busy.self_s
    assert set(row(profile, "sleeper").phases_s) == {"augment"}
    assert {"forward", "augment", "other"} == set(profile.phases_s)
    assert sum(profile.phases_s.values()) == pytest.approx(profile.sampled_s, rel=1e-3)


# -- the table ------------------------------------------------------------------------------
def _frames(count: int, lines: int = 1) -> list[FrameType]:
    """Frames of ``count`` distinct functions, each stopped at one of ``lines``
    lines (kept alive after their functions returned)."""
    src = []
    for i in range(count):
        body = "\n".join(f"    if k == {j}: return sys._getframe()" for j in range(lines))
        src.append(f"def f{i}(k):\n{body}\n")
    namespace: dict[str, Any] = {"sys": sys}
    exec(compile("\n".join(src), "/project/generated.py", "exec"), namespace)
    return [namespace[f"f{i}"](k) for i in range(count) for k in range(lines)]


def _feed(sampler: Sampler, frames: list[FrameType], weight: float = 0.01) -> None:
    now = 1000.0
    for frame in frames:
        now += weight
        with sampler.lock:
            sampler._record(frame, weight, now)


def test_the_table_is_bounded_and_keeps_all_the_time() -> None:
    sampler = Sampler(Recorder(), enabled=True)
    frames = _frames(MAX_FUNCTIONS + 500)
    _feed(sampler, frames)
    win = sampler._cur
    assert len(win.funcs) == MAX_FUNCTIONS and win.other is not None
    profile = sampler.snapshot()
    assert profile is not None and profile.truncated
    other = [r for r in profile.functions if r.kind == KIND_OTHER]
    assert len(other) == 1 and other[0].function == "(other)"
    # the functions past the bound (500, and as many as the callers' frames
    # took first) share one row: no time is lost
    assert other[0].self_s >= 500 * 0.01 - 1e-9
    assert profile.kinds_s[KIND_OTHER] == pytest.approx(other[0].self_s, rel=1e-6)
    assert profile.functions_seen == MAX_FUNCTIONS + 1
    assert profile.sampled_s == pytest.approx(len(frames) * 0.01, rel=1e-6)
    assert sum(profile.kinds_s.values()) == pytest.approx(profile.sampled_s, rel=1e-6)


def test_lines_are_bounded_too() -> None:
    sampler = Sampler(Recorder(), enabled=True)
    frames = _frames(MAX_FUNCTIONS // 2, lines=5)  # 2,500 lines in 500 functions
    _feed(sampler, frames)
    win = sampler._cur
    assert win.other is None
    # past the bound, each function's further lines share one row
    assert win.lines <= MAX_LINES + MAX_FUNCTIONS // 2
    profile = sampler.snapshot()
    assert profile is not None and profile.truncated
    assert profile.lines_seen <= MAX_LINES + MAX_FUNCTIONS // 2
    assert sum(r.self_s for r in profile.functions) <= profile.sampled_s * 1.0001


def test_pending_samples_are_bounded_and_folded_as_samples_would_be() -> None:
    """A sample keeps only its stack and where the edge log stands; past
    MAX_PENDING samples they are folded into the tables: the profile is the
    same as from samples folded one at a time."""
    frames = _frames(sampler_mod.MAX_PENDING // 2, lines=3)
    feed = frames * 2 + frames[:7]  # each stack again, some a third time
    batched = Sampler(Recorder(), enabled=True)
    single = Sampler(Recorder(), enabled=True)

    def both(frame: FrameType) -> None:  # the same stacks, this test's frame included
        _feed(batched, [frame])
        _feed(single, [frame])
        with single.lock:  # one sample, one fold
            single.fold()

    for frame in feed:
        both(frame)
    assert 0 < len(batched._cur.pending) < sampler_mod.MAX_PENDING and not single._cur.pending
    one, other = batched.snapshot(), single.snapshot()
    assert one is not None and other is not None and not batched._cur.pending
    assert one.functions == other.functions and one.lines == other.lines
    assert one.frames == other.frames and one.kinds_s == other.kinds_s
    assert one.samples == other.samples == len(feed)


def test_a_bench_can_read_the_time_each_tick_holds_the_gil(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    timing = [0.0, 0, 0.0]
    monkeypatch.setattr(sampler_mod, "TICK_TIME", timing)
    with sampling(repeating(busy_python)):
        wait_for(lambda: timing[1] >= 5, 60, "five ticks")
    assert timing[0] > 0 and timing[2] >= 0


def test_a_bench_can_read_when_each_tick_took_the_gil(monkeypatch: pytest.MonkeyPatch) -> None:
    ticks: list[float] = []
    monkeypatch.setattr(sampler_mod, "TICK_LOG", ticks)
    before = time.perf_counter()
    with sampling(repeating(busy_python)) as sampler:
        wait_for(lambda: sampler.samples >= 5, 60, "five samples")
    taken = sampler.samples
    logged = len(ticks)
    assert ticks == sorted(ticks) and before < ticks[0]
    # one entry a tick: those that took a sample, the first (no weight yet) and
    # perhaps one that found the sampler stopping
    assert taken + 1 <= logged <= taken + 2


def test_phases_per_function_are_bounded() -> None:
    rec = Recorder()
    rec.thread = threading.get_ident()
    sampler = Sampler(rec, enabled=True)
    frame = _frames(1)[0]
    for i in range(MAX_ROW_PHASES + 10):
        rec.log.append(float(i))
        rec.log.append(f"phase{i}")
        _feed(sampler, [frame])
    profile = sampler.snapshot()
    assert profile is not None
    phases = profile.functions[0].phases_s
    assert len(phases) == MAX_ROW_PHASES + 1 and phases[MORE_PHASES] == pytest.approx(0.1)


def test_the_profile_covers_the_last_one_to_two_windows() -> None:
    sampler = Sampler(Recorder(), enabled=True, window_s=10.0)
    frame = _frames(1)[0]
    for t in range(0, 35):  # one sample a second for 35 s: windows 0-10, 10-20, 20-30, 30-
        with sampler.lock:
            sampler._record(frame, 1.0, 1000.0 + t)
    # windows of 10 s from the first sample (9 samples each): the older two
    # have been dropped, the profile has the last full one and the current
    profile = sampler.snapshot()
    assert profile is not None
    assert profile.samples == 17 and profile.sampled_s == pytest.approx(17.0)


def test_gap_weights() -> None:
    assert gap_weight(0.012, 0.0) == 0.012  # an ordinary sample
    assert gap_weight(0.8, 0.0) == 0.8  # a GIL-holding or blocked call
    assert gap_weight(30.0, 29.0) == 30.0  # a long C call that used the CPU
    assert gap_weight(3600.0, 0.01) == GAP_FLOOR_S  # the process was stopped
    assert gap_weight(5.0, 1.0) == 5.0  # a crowded machine: it still ran


# -- classification -----------------------------------------------------------------------------
def test_frames_are_classed_and_gputuis_own_are_transparent() -> None:
    import json.decoder

    sampler = Sampler(Recorder(), enabled=True)
    torch_dir = os.path.dirname(sys.modules["torch"].__file__) if "torch" in sys.modules else None
    kinds = {
        json.decoder.__file__: KIND_LIB,
        "/venv/lib/python3.11/site-packages/numpy/core/x.py": KIND_LIB,
        "/usr/lib/python3/dist-packages/yaml/x.py": KIND_LIB,
        "<frozen importlib._bootstrap>": KIND_LIB,
        "<eval_with_key>.3": KIND_TORCH,
        "/home/me/project/train.py": KIND_USER,
        "<string>": KIND_USER,  # code made by exec: its caller's (below)
    }
    if torch_dir is not None:
        kinds[os.path.join(torch_dir, "nn", "modules", "module.py")] = KIND_TORCH
    for file, kind in kinds.items():
        assert sampler._kind(file)[0] == kind, file

    # a gputui frame between two of the job's: it is skipped, its callee gets self
    wrapper_src = "def wrapper(fn):\n    return fn()\n"
    namespace: dict[str, Any] = {}
    exec(compile(wrapper_src, os.path.join(GPUTUI_DIR, "hook", "_fake.py"), "exec"), namespace)

    def inner() -> FrameType:
        return sys._getframe()

    frame = namespace["wrapper"](inner)
    _feed(sampler, [frame])
    profile = sampler.snapshot()
    assert profile is not None
    names = [r.function for r in profile.functions]
    assert "wrapper" not in names and not any(
        r.file.startswith(GPUTUI_DIR) for r in profile.functions
    )
    assert profile.top_self(1)[0].function.endswith("inner")


#: where the owner cases' torch, libraries and standard library live
TORCH = "/venv/lib/python3.11/site-packages/torch"
SITE = "/venv/lib/python3.11/site-packages"
STDLIB = os.path.dirname(os.__file__)
JOB = "/job/train.py"

#: a stack (outermost first: file, function), whether its time is outside
#: torch, and the kind its innermost function is listed as
OWNER_CASES: dict[str, tuple[list[tuple[str, str]], bool, str]] = {
    "autograd-engine": (
        [(JOB, "train"), (f"{TORCH}/autograd/graph.py", "_engine_run_backward")],
        False,
        KIND_TORCH,
    ),
    "optimizer-in-stdlib": (
        [(JOB, "train"), (f"{TORCH}/optim/adam.py", "step"), (f"{STDLIB}/contextlib.py", "exit")],
        False,
        KIND_LIB,
    ),
    "module-call-into-the-jobs-forward": (
        [(JOB, "train"), (f"{TORCH}/nn/modules/module.py", "_call_impl"), (JOB, "forward")],
        True,
        KIND_USER,
    ),
    "numpy-from-the-job": (
        [(JOB, "train"), (f"{SITE}/numpy/_core/fromnumeric.py", "sort")],
        True,
        KIND_LIB,
    ),
    "stdlib-from-the-job": (
        [(JOB, "train"), (f"{STDLIB}/json/encoder.py", "iterencode")],
        True,
        KIND_LIB,
    ),
    "inductors-launcher-made-by-exec": (
        [
            (JOB, "train"),
            (f"{TORCH}/_inductor/runtime/triton_heuristics.py", "run"),
            ("<string>", "launcher"),
        ],
        False,
        KIND_TORCH,
    ),
    "code-made-by-exec-in-the-job": (
        [(JOB, "train"), ("<string>", "made")],
        True,
        KIND_USER,
    ),
    "triton-under-inductor": (
        [
            (JOB, "train"),
            (f"{TORCH}/_inductor/runtime/triton_heuristics.py", "run"),
            (f"{SITE}/triton/compiler/compiler.py", "getitem"),
        ],
        False,
        KIND_LIB,
    ),
    "a-librarys-forward-called-by-torch": (
        [
            (JOB, "train"),
            (f"{TORCH}/nn/modules/module.py", "_call_impl"),
            (f"{SITE}/transformers/modeling_llama.py", "forward"),
        ],
        True,
        KIND_LIB,
    ),
    "dataloader-waiting-under-a-library-loop": (
        [
            (f"{SITE}/lightning/loops/fit_loop.py", "run"),
            (f"{TORCH}/utils/data/dataloader.py", "next"),
            (f"{STDLIB}/queue.py", "get"),
        ],
        False,
        KIND_LIB,
    ),
}


def _sample_stack(sampler: Sampler, levels: list[tuple[str, str]]) -> None:
    """One sample of a live stack of functions defined in ``levels``' files
    (outermost first), taken from inside the innermost."""

    def record(frame: FrameType) -> None:
        _feed(sampler, [frame])

    callee: Any = None
    for file, name in reversed(levels):
        body = "return record(sys._getframe())" if callee is None else "return callee()"
        namespace: dict[str, Any] = {"sys": sys, "record": record, "callee": callee}
        exec(compile(f"def {name}():\n    {body}\n", file, "exec"), namespace)
        callee = namespace[name]
    callee()


@pytest.mark.parametrize("case", sorted(OWNER_CASES))
def test_a_samples_time_is_torchs_own_or_outside_torch(case: str) -> None:
    """The innermost frame owns a sample, a standard-library frame counting as
    its caller's; torch's autograd engine, optimizers, module calls and data
    loading are torch's own, and so are the libraries its compiler runs and the
    code it makes with exec; the job's code and a library's are outside torch,
    whoever called them."""
    levels, outside, kind = OWNER_CASES[case]
    sampler = Sampler(Recorder(), enabled=True)
    sampler._torch = TORCH + os.sep
    _sample_stack(sampler, levels)
    profile = sampler.snapshot()
    assert profile is not None and profile.outside_phases_s is not None
    inner = row(profile, levels[-1][1])
    assert inner.kind == kind
    assert profile.outside_s == pytest.approx(0.01 if outside else 0.0)
    assert inner.outside_s == pytest.approx(inner.self_s if outside else 0.0)
    assert profile.outside_phases_s == ({"other": pytest.approx(0.01)} if outside else {})
    # the job's own code on the stack keeps its site time either way
    if levels[0][0] == JOB:
        assert profile.site_s == pytest.approx(0.01)


# -- lifecycle, the off switch, errors ---------------------------------------------------------
def test_the_environment_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    for value in ("0", "off", "FALSE", "no"):
        monkeypatch.setenv("GPUTUI_SAMPLER", value)
        sampler = Sampler(Recorder())
        sampler.start()
        assert sampler._thread is None and not sampler.running
        info = sampler.info()
        assert info.state == SAMPLER_OFF and "GPUTUI_SAMPLER=0" in (info.reason or "")
        assert sampler.snapshot() is None
    monkeypatch.setenv("GPUTUI_SAMPLER", "1")
    assert Sampler(Recorder()).enabled
    monkeypatch.delenv("GPUTUI_SAMPLER")
    assert Sampler(Recorder()).enabled


def test_it_waits_for_the_training_thread_and_stops() -> None:
    rec = Recorder()
    sampler = Sampler(rec, enabled=True)
    sampler.start()
    try:
        assert sampler.running and sampler.info().state == SAMPLER_ON
        time.sleep(0.05)
        assert sampler.samples == 0 and sampler.snapshot() is None  # no training thread yet
    finally:
        sampler.stop()
    assert not sampler.running and sampler.info().state == SAMPLER_OFF


def test_an_error_stops_the_sampler_and_never_reaches_the_sampled_thread() -> None:
    errors: list[tuple[str, BaseException]] = []

    class Broken(Recorder):
        @property  # type: ignore[override]
        def log(self) -> list[Any]:
            raise RuntimeError("boom")

        @log.setter
        def log(self, value: list[Any]) -> None:
            pass

    rec = Broken()
    sampler = Sampler(rec, lambda where, exc: errors.append((where, exc)), enabled=True)
    progress = {"n": 0}

    def body(stop: threading.Event) -> None:
        while not stop.is_set():
            busy_python(time.perf_counter() + 0.01)
            progress["n"] += 1

    with Worker(body) as worker:
        rec.thread = worker.thread.ident
        sampler.start()
        wait_for(lambda: sampler.failed, 10, "the sampler to fail")
        before = progress["n"]
        wait_for(lambda: progress["n"] > before + 5, 10, "the thread to go on")
    sampler.stop()
    assert len(errors) == 1 and errors[0][0] == "python sampler"
    info = sampler.info()
    assert info.state == SAMPLER_FAILED and "boom" in (info.reason or "")
    sampler.start()  # a failed sampler does not come back
    assert sampler._thread is None


def test_after_fork_the_child_has_no_sampler() -> None:
    sampler = Sampler(Recorder(), enabled=True)
    sampler.start()
    sampler.after_fork_in_child()
    assert not sampler.running
    # the child does not keep the parent's shorter switch interval
    assert sys.getswitchinterval() == pytest.approx(sampler_mod.DEFAULT_SWITCH_S)
    info = sampler.info()
    assert info.state == SAMPLER_OFF and "forked child" in (info.reason or "")
    sampler._stopping = True  # the parent's thread (here, this process's) ends too


# -- call paths -------------------------------------------------------------------------------
def caller_of_busy(until: float) -> int:
    return busy_python(until)


def test_a_functions_call_path_is_its_callers_on_its_hottest_stack() -> None:
    with sampling(repeating(caller_of_busy)) as sampler:
        profile = profile_after(sampler, 1.0)
    busy = row(profile, "busy_python")
    path = profile.path_of(busy)
    names = [x.function for x in path]
    # outermost first, ending with the caller at the line of its call
    assert names[-2:] == ["repeating.<locals>.body", "caller_of_busy"]
    assert path[-1].line == caller_of_busy.__code__.co_firstlineno + 1
    assert path[-1].file == __file__ and path[-1].kind == KIND_USER
    assert busy.path_cut == 0 and "Worker.__init__.<locals>.run" in names
    # the caller's own path is the same stack, one frame shorter
    assert profile.path_of(row(profile, "caller_of_busy")) == path[:-1]


def test_a_deep_path_keeps_its_nearest_callers_and_counts_the_rest() -> None:
    from gputui.hook._profile_rows import PATH_FRAMES

    with sampling(repeating(recurse, PATH_FRAMES + 10)) as sampler:
        profile = profile_after(sampler, 1.0)
    busy = row(profile, "busy_python")
    assert len(busy.path) == PATH_FRAMES and busy.path_cut > 10
    assert all(x.function.endswith("recurse") for x in profile.path_of(busy))


def test_stacks_are_bounded() -> None:
    sampler = Sampler(Recorder(), enabled=True)
    frames = _frames(sampler_mod.MAX_STACKS + 100)
    _feed(sampler, frames)
    assert len(sampler._cur.stacks) == sampler_mod.MAX_STACKS
    profile = sampler.snapshot()
    assert profile is not None
    assert sum(f.self_s for f in profile.functions) <= profile.sampled_s + 1e-6


def test_a_bottom_frame_ends_the_stack() -> None:
    """In a DataLoader worker the frames under the worker loop's wrapper (one
    of gputui's) are the training process's at the fork: not the worker's."""
    # The loop runs for the thread's whole life, as a worker's loop does: every
    # sample, however late the sampler thread runs, finds it on the stack.
    entered = threading.Event()
    namespace: dict[str, Any] = {"busy_python": busy_python, "time": time, "entered": entered}
    src = (
        "def loop(stop):\n"
        "    entered.set()\n"
        "    while not stop.is_set():\n"
        "        busy_python(time.perf_counter() + 0.05)\n"
    )
    exec(compile(src, os.path.join(GPUTUI_DIR, "hook", "_fake_loop.py"), "exec"), namespace)
    loop = namespace["loop"]

    def forked_from_here(stop: threading.Event) -> None:
        loop(stop)

    rec = Recorder()
    sampler = Sampler(rec, enabled=True)
    sampler.bottom = loop.__code__
    with Worker(forked_from_here) as worker:
        assert entered.wait(60), "the worker's loop did not start"
        rec.thread = worker.thread.ident
        sampler.start()
        try:
            profile = profile_after(sampler, 1.0)
        finally:
            sampler.stop()
    names = {f.function for f in profile.functions}
    assert "busy_python" in names and not any(n.endswith("forked_from_here") for n in names)
    busy = row(profile, "busy_python")
    assert profile.share(busy.total_s) > 0.9 and profile.path_of(busy) == ()


def test_a_tree_of_installed_packages_outside_site_packages_is_library_code(
    tmp_path: Path,
) -> None:
    """``pip install --target DIR`` on PYTHONPATH: DIR holds ``*.dist-info``
    folders, so its files are libraries', not the job's.  The job's own folder
    (or one above it) never counts, even with a ``*.dist-info`` in it, nor does a
    folder without one."""
    from gputui.hook._sampler import library_roots

    target = tmp_path / "pkgs"
    (target / "lightning-2.6.6.dist-info").mkdir(parents=True)
    (target / "lightning").mkdir()
    plain = tmp_path / "plain"
    plain.mkdir()
    job = tmp_path / "work" / "proj"
    job.mkdir(parents=True)
    (tmp_path / "work" / "odd-1.0.dist-info").mkdir()
    script = str(job / "train.py")
    path: list[Any] = [
        "",
        str(target),
        str(plain),
        str(tmp_path / "work"),
        str(tmp_path / "missing"),
        tmp_path,  # sys.path may hold other than strings: passed over
    ]
    assert library_roots(path, script) == (str(target) + os.sep,)

    sampler = Sampler(Recorder(), enabled=True)
    sampler._libs = library_roots(path, script)
    assert sampler._kind(str(target / "lightning" / "trainer.py"))[0] == KIND_LIB
    assert sampler._kind(script)[0] == KIND_USER
    assert sampler._kind(str(plain / "mod.py"))[0] == KIND_USER


def test_time_off_the_cpu_is_told_from_time_on_it() -> None:
    """The training thread's scheduler statistics split each sample's time: a
    function that sleeps (as blocking I/O does) is off the CPU, one that
    computes is on it, or waiting for one (a crowded machine), which counts as
    on: a busy function is never told to be waiting."""
    rec = Recorder()
    sampler = Sampler(rec, enabled=True)

    def body(stop: threading.Event) -> None:
        while not stop.is_set():
            rec.enter("forward")
            busy_python(time.perf_counter() + 0.1)
            rec.exit("forward")
            sleeper(0.1)
            rec.boundary()

    with Worker(body):
        wait_for(lambda: rec.thread is not None, 10, "the first phase edge")
        sampler.start()
        try:
            profile = profile_after(sampler, 3.0)
        finally:
            sampler.stop()
    # a sample's time is the span since the one before: the one after a switch
    # holds some of the other function's (a tenth here, 10 ms ticks)
    busy, slept = row(profile, "busy_python"), row(profile, "sleeper")
    assert slept.off_cpu_s > 0.75 * slept.time_s, slept
    assert busy.off_cpu_s < 0.25 * busy.time_s, busy
    assert profile.off_cpu_s is not None
    assert profile.off_cpu_s == pytest.approx(
        sum(f.off_cpu_s for f in profile.functions if f.self_s > 0), rel=0.05, abs=0.01
    )
    # on the wire, and back
    again = PythonProfile.from_wire(json.loads(json.dumps(profile.to_wire())))
    assert row(again, "sleeper").off_cpu_s == slept.off_cpu_s


def test_python_that_gives_the_gil_up_within_5ms_is_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    """3 ms of Python before each 1 ms call that releases the GIL (as a torch op
    does): at CPython's default 5 ms switch interval the sampler's tick only
    gets the GIL at that call, and no sample ever lands in the Python (0% for
    75% of the time).  While the sampler runs the interval is 1 ms; it is the
    default again once it stops, and one the job set itself is kept."""
    monkeypatch.delenv(sampler_mod.SWITCH_ENV, raising=False)
    assert sys.getswitchinterval() == pytest.approx(sampler_mod.DEFAULT_SWITCH_S)

    def body(stop: threading.Event) -> None:
        while not stop.is_set():
            busy_python(time.perf_counter() + 0.003)
            sleeper(0.001)

    with sampling(body) as sampler:
        assert sys.getswitchinterval() == pytest.approx(sampler_mod.SWITCH_S)
        profile = profile_after(sampler, 3.0)
    assert sys.getswitchinterval() == pytest.approx(sampler_mod.DEFAULT_SWITCH_S)
    # measured 0.57-0.65 on an idle 2-core machine (0.00 at 5 ms)
    assert profile.share(row(profile, "busy_python").self_s) > 0.3

    # the job's own interval, or the environment's word, leaves it alone
    sys.setswitchinterval(0.002)
    try:
        with sampling(body):
            assert sys.getswitchinterval() == pytest.approx(0.002)
        assert sys.getswitchinterval() == pytest.approx(0.002)
    finally:
        sys.setswitchinterval(sampler_mod.DEFAULT_SWITCH_S)
    monkeypatch.setenv(sampler_mod.SWITCH_ENV, "0")
    with sampling(body):
        assert sys.getswitchinterval() == pytest.approx(sampler_mod.DEFAULT_SWITCH_S)
