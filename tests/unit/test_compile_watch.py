"""The hook's torch.compile watch over dynamo's state (a stand-in module here;
the real one is exercised by tests/integration/test_hook_compile.py), and the
report's wire form and text."""

from __future__ import annotations

import sys
import types
from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

from gputui.hook._compile_watch import CompileWatch
from gputui.protocol.compile import CompileReason, CompileReport
from gputui.protocol.hello import Status
from gputui.reports import compile as compile_text

PRINT = (
    "Failed to trace builtin operator\n  Explanation: Dynamo does not know how to trace "
    "builtin operator `print`\n  Hint: Avoid calling builtin `print`.\n"
)


class Record:
    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


class Code:
    """A code object's three attributes (hashable by identity, as code is)."""

    def __init__(self, name: str, filename: str, line: int) -> None:
        self.co_name, self.co_filename, self.co_firstlineno = name, filename, line


def code(name: str, filename: str, line: int) -> Any:
    return Code(name, filename, line)


@pytest.fixture
def dynamo(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    utils = types.ModuleType("torch._dynamo.utils")
    utils.counters = defaultdict(Counter)  # type: ignore[attr-defined]
    utils.compilation_time_metrics = {}  # type: ignore[attr-defined]
    utils.guard_failures = defaultdict(list)  # type: ignore[attr-defined]
    records: list[Record] = []
    utils.get_compilation_metrics = lambda: list(records)  # type: ignore[attr-defined]
    utils.records = records  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch._dynamo.utils", utils)
    yield utils


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def compile_frame(utils: Any, name: str, start: float, seconds: float, **extra: Any) -> None:
    utils.counters["frames"]["total"] += 1
    utils.compilation_time_metrics.setdefault("_compile.compile_inner", []).append(seconds)
    utils.records.append(
        Record(
            co_name=name,
            co_filename="/w/train.py",
            co_firstlineno=10,
            start_time_us=int(start * 1e6),
            duration_us=int(seconds * 1e6),
            **extra,
        )
    )


def test_nothing_compiled_no_report_no_window(dynamo: Any) -> None:
    watch = CompileWatch(Clock())
    assert watch.poll() == []
    assert watch.report() is None


def test_no_dynamo_imported_no_report(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch._dynamo.utils", raising=False)
    watch = CompileWatch(Clock())
    assert watch.poll() == [] and watch.report() is None


def test_each_compile_is_a_window_on_the_watch_clock(dynamo: Any) -> None:
    import time

    clock = Clock()
    wall = time.time()
    watch = CompileWatch(clock, since=wall - 10.0)
    compile_frame(dynamo, "forward", wall - 3.0, 2.0)
    (window,) = watch.poll()
    # Unix times mapped onto the watch's clock (now 100 = wall now)
    assert window == pytest.approx((97.0, 99.0), abs=0.05)
    assert watch.poll() == []  # nothing new


def test_compiles_before_the_watch_are_not_its_own(dynamo: Any) -> None:
    """A hook installed again in one process: the compiles of the first one's
    time are not windows of this one, and its first compile still is."""
    import time

    clock = Clock()
    wall = time.time()
    compile_frame(dynamo, "forward", wall - 30.0, 2.0)
    watch = CompileWatch(clock, since=wall - 10.0)
    clock.now = 101.0
    assert watch.poll() == []
    compile_frame(dynamo, "forward", wall + 0.2, 0.5)
    clock.now = 102.0
    (window,) = watch.poll()
    assert window == pytest.approx((102.2, 102.7), abs=0.05)  # clock 102 = wall now
    clock.now = 103.0
    assert watch.poll() == [] and watch.pending is None


def test_records_of_compiles_still_running_are_read_when_they_come(dynamo: Any) -> None:
    """Two frames counted, one of them still compiling: its record is read at a
    later poll, though the counters no longer change."""
    import time

    clock = Clock()
    wall = time.time()
    watch = CompileWatch(clock, since=wall - 10.0)
    compile_frame(dynamo, "forward", wall - 3.0, 1.0)
    dynamo.counters["frames"]["total"] += 1  # the resume function, compiling
    assert len(watch.poll()) == 1
    dynamo.records.append(
        Record(
            co_name="r",
            co_filename="/w/t.py",
            start_time_us=int((wall - 1.5) * 1e6),
            duration_us=int(1e6),
        )
    )
    (window,) = watch.poll()
    assert window == pytest.approx((98.5, 99.5), abs=0.05)
    assert watch.poll() == [] and watch.pending is None


def test_a_count_before_its_record_waits_one_poll(dynamo: Any) -> None:
    clock = Clock()
    watch = CompileWatch(clock)
    dynamo.counters["frames"]["total"] += 1  # dynamo counts a frame when it starts
    clock.now = 101.0
    assert watch.poll() == []
    clock.now = 102.0
    # still no record (a torch without them): the time since the first poll
    assert watch.poll() == [(100.0, 102.0)]


def test_report_names_the_break_line_and_recompile_reasons(dynamo: Any) -> None:
    import time

    wall = time.time()
    dynamo.counters["graph_break"][PRINT] = 3
    dynamo.counters["resumes"]["torch_dynamo_resume_in_forward_at_12"] = 3
    dynamo.counters["stats"]["unique_graphs"] = 4
    compile_frame(dynamo, "forward", wall - 5, 0.5, restart_reasons={PRINT})
    compile_frame(dynamo, "torch_dynamo_resume_in_forward_at_12", wall - 4, 0.2)
    forward = code("forward", "/w/train.py", 10)
    dynamo.guard_failures[forward] += [
        "1/0: tensor 'x' size mismatch at index 0. expected 8, actual 9",
        "1/1: len(G['__import_torch_dot_nn_dot_modules_dot_module']._global_forward_hooks) != 1",
    ]
    hook_code = code("_global_pre", sys.modules[CompileWatch.__module__].__file__ or "", 1)
    dynamo.guard_failures[hook_code].append("0/0: something")
    watch = CompileWatch(Clock())
    msg = watch.report()
    assert msg is not None
    report = CompileReport.from_wire(msg)
    assert report.frames == 2 and report.graphs == 4 and report.graph_breaks == 3
    assert report.compile_s == pytest.approx(0.7)
    (brk,) = report.breaks
    assert brk.reason == "Failed to trace builtin operator (Avoid calling builtin `print`.)"
    assert (brk.file, brk.line, brk.function, brk.count) == ("/w/train.py", 12, "forward", 3)
    (rec,) = report.recompile_reasons
    assert rec.reason == "tensor 'x' size mismatch at index 0. expected 8, actual 9"
    assert (rec.file, rec.line, rec.function) == ("/w/train.py", 10, "forward")
    assert report.recompiles == 3 and report.hook_recompiles == 2
    assert report.unavailable == ()


def test_a_torch_without_a_source_says_so(dynamo: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(dynamo, "guard_failures")
    monkeypatch.delattr(dynamo, "get_compilation_metrics")
    dynamo.counters["frames"]["total"] = 1
    dynamo.counters["graph_break"]["Unsupported Tensor.item() call"] = 1
    dynamo.counters["resumes"]["torch_dynamo_resume_in_forward_at_7"] = 1
    report = CompileReport.from_wire(CompileWatch(Clock()).report())
    assert set(report.unavailable) == {"guard_failures", "compilation_metrics"}
    assert report.recompiles is None
    # one break and one resume: the resume's line, without a file
    assert (report.breaks[0].line, report.breaks[0].function) == (7, "forward")
    note = compile_text.unavailable(report, None)
    assert note is not None and "unavailable on this torch" in note


def test_an_older_hook_of_a_compiling_job_is_said_unavailable() -> None:
    status = Status(t=1.0, compiled_graphs=3)
    assert compile_text.unavailable(None, status) == (
        "torch.compile details: unavailable (the job's hook predates them)"
    )
    assert compile_text.unavailable(None, Status(t=1.0)) is None


def test_report_text_cleans_the_jobs_strings() -> None:
    report = CompileReport(
        frames=2,
        graphs=3,
        graph_breaks=1,
        recompiles=0,
        compile_s=1.5,
        breaks=(CompileReason("bad\x1b[31m", 1, "/w/t\nrain.py", 3, "f"),),
    )
    text = "\n".join(compile_text.lines(report))
    assert "\x1b" not in text and "\\x1b" in text
    assert compile_text.short(report) == "compile: 1 break, 0 recompiles, 1.5 s"


# -- keeping the hook's code out of dynamo (gputui.hook._dynamo) -----------------------------
class FakeHandler:
    def __init__(self) -> None:
        self.start_callbacks: list[Any] = []

    def register_start_callback(self, fn: Any) -> Any:
        self.start_callbacks.append(fn)
        return fn

    def remove_start_callback(self, fn: Any) -> None:
        self.start_callbacks.remove(fn)


def test_the_hooks_code_is_skipped_and_the_first_compile_is_told() -> None:
    """Every function torch may call from a skipped frame of its own is marked
    (a root's call route, the forward hooks, the recorder, closures made at
    install), and the start callback takes 2.4's no argument and 2.13's one."""
    from gputui.hook import _dynamo, _recorder, _roots, _torch_hooks

    skipped: list[Any] = []
    dynamo = types.SimpleNamespace(
        eval_frame=types.SimpleNamespace(skip_code=skipped.append), callback_handler=FakeHandler()
    )
    started: list[int] = []
    missing, remove = _dynamo.keep_out(dynamo, lambda: started.append(1))
    assert missing == [] and remove is not None
    codes = set(skipped)
    for fn in (
        _torch_hooks.TorchHooks._global_pre,
        _torch_hooks.TorchHooks._forward_post,
        _torch_hooks.TorchHooks.compile_starts,
        _roots._RootCall.__call__,
        _roots._RootPreHook.__call__,
        _recorder.Recorder.enter,
        _recorder.Recorder.mark,
    ):
        assert fn.__code__ in codes, fn
    closures = {c.co_name for c in codes}
    assert {"_engine_run_backward", "__next__", "capture_begin"} <= closures
    (callback,) = dynamo.callback_handler.start_callbacks
    callback()  # torch 2.4
    callback(object())  # torch 2.13: CallbackArgs
    assert started == [1, 1]
    remove()
    assert dynamo.callback_handler.start_callbacks == []


def test_a_torch_without_them_says_so_in_the_report(dynamo: Any) -> None:
    from gputui.hook import _dynamo

    bare = types.SimpleNamespace(eval_frame=types.SimpleNamespace(), callback_handler=None)
    missing, remove = _dynamo.keep_out(bare, lambda: None)
    assert remove is None
    assert missing == ["eval_frame.skip_code", "compile start callbacks"]
    watch = CompileWatch(Clock())
    watch.hook_missing = missing
    dynamo.counters["frames"]["total"] = 1
    report = CompileReport.from_wire(watch.report())
    assert set(missing) <= set(report.unavailable)
    note = compile_text.unavailable(report, None)
    assert note is not None and "compile start callbacks" in note
