"""Which op launched each runtime call, for traces whose ids do not say: the
profiler's own links on the recorded traces are the reference."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from gputui.trace.links import enclosing_ops, ids_are_correlations, relink
from gputui.trace.timeline import ANNOTATION, OP, PYTHON, HostRange, RuntimeCall, Timeline
from gputui.tracefile import reader
from gputui.tracefile.reader import read_trace

DATA = Path(__file__).resolve().parents[1] / "data"
#: the public traces written by a torch build that links a call to its op
_LINKING = (
    "tracelens-b200-eager.trace.json.gz",
    "tracelens-h100-bert-small.trace.json.gz",
    "openpi-h200-policy-inference.trace.json.gz",
)
#: public traces whose ids link the training thread's calls to their ops, where
#: NCCL's watchdog thread writes its cudaEventQuery calls' correlation as their
#: id: neither kind throughout
_MIXED = ("tokenomics-2x4090-llama-rank",)
#: traces written by torch builds that link a call to its op by the op's id
LINKED = sorted(
    p for p in DATA.rglob("*.json.gz") if "thirdparty" not in p.parts or p.name in _LINKING
)
#: public traces that write each call's correlation id as its External id
CORRELATED = sorted((DATA / "thirdparty").glob("*.json.gz"))
CORRELATED = [
    p
    for p in CORRELATED
    if "particle-transformer-a100-fp16" not in p.name
    and p.name not in _LINKING
    and not p.name.startswith(_MIXED)
]


def call(start: int, thread: int = 1, corr: int = 0, ext: int = -1) -> RuntimeCall:
    return RuntimeCall(start, start + 1, "cudaLaunchKernel", thread, corr, ext, "runtime")


def op(start: int, end: int, ext: int, thread: int = 1, kind: str = OP) -> HostRange:
    return HostRange(start, end, f"op{ext}", thread, kind, ext)


def test_the_innermost_op_open_on_the_calls_thread() -> None:
    ranges = [
        op(0, 100, 1),
        op(10, 50, 2),
        op(10, 20, 3),  # starts with its parent: under it
        op(60, 70, 4, kind=ANNOTATION),  # record_function ranges do not link
        op(60, 70, 5, kind=PYTHON),
        op(0, 100, 6, thread=2),
        op(200, 300, -1),  # no id: never a link
    ]
    runtime = [
        call(15),  # in 3, inside 2, inside 1
        call(30),  # 3 has ended: 2
        call(65),  # inside the annotation: the op around it
        call(100),  # the op's last microsecond
        call(150),  # no op open
        call(250),  # only an op without an id
        call(5, thread=2),
        call(5, thread=3),  # a thread without ops
    ]
    assert enclosing_ops(ranges, runtime) == [3, 2, 1, 1, -1, -1, 6, -1]


def _calls_with_an_op(path: Path) -> tuple[list[RuntimeCall], list[int]]:
    tl = read_trace(path).timeline
    op_ids = {r.external_id for r in tl.ranges if r.kind == OP and r.external_id >= 0}
    got = enclosing_ops(tl.ranges, tl.runtime)
    pairs = [(c, g) for c, g in zip(tl.runtime, got, strict=True) if c.external_id in op_ids]
    return [c for c, _g in pairs], [g for _c, g in pairs]


@pytest.mark.parametrize("path", LINKED, ids=lambda p: p.name)
def test_the_enclosing_op_is_the_one_the_profiler_linked(path: Path) -> None:
    """On every trace whose ids link ops, each call whose External id names an
    op is enclosed by that op: the time rule rebuilds the profiler's links."""
    calls, got = _calls_with_an_op(path)
    assert calls
    assert [c.external_id for c in calls] == got
    assert not ids_are_correlations(read_trace(path).timeline.runtime)


@pytest.mark.parametrize("path", CORRELATED, ids=lambda p: p.name)
def test_public_traces_that_write_correlations_are_relinked(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reader, "relink", lambda tl: None)
    raw = read_trace(path).timeline
    assert ids_are_correlations(raw.runtime)
    monkeypatch.undo()
    read = read_trace(path).timeline
    assert [c.external_id for c in read.runtime] == enclosing_ops(raw.ranges, raw.runtime)
    linked = [c for c in read.runtime if c.external_id >= 0]
    if read.gpu:  # (the CPU trace's few calls are device queries outside any op)
        assert len(linked) > len(read.runtime) // 2
    # the op each call now names encloses it
    ops = {r.external_id: r for r in read.ranges if r.kind == OP}
    assert all(
        ops[c.external_id].start_us <= c.start_us <= ops[c.external_id].end_us for c in linked
    )


WRITTEN = ("cuda_runtime", "cuda_driver", "kernel", "gpu_memcpy", "gpu_memset")


def _as_correlations(path: Path, out: Path) -> Path:
    """``path`` rewritten as those traces are: each call and each GPU activity
    gives its correlation id as its External id."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    for ev in doc["traceEvents"]:
        args = ev.get("args")
        if ev.get("cat") in WRITTEN and isinstance(args, dict) and "correlation" in args:
            args["External id"] = args["correlation"]
    out.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return out


@pytest.mark.parametrize(
    "name",
    ["h100-cases/gpt2_shapes_stack.pt.trace.json.gz", "h100_healthy_flops_step11.pt.trace.json.gz"],
)
def test_a_trace_written_with_correlations_reads_as_the_original(name: str, tmp_path: Path) -> None:
    """The same capture written the other way: the same links on the timeline,
    and the same op rows (each op's GPU time comes through its launches)."""
    path = DATA / name
    original = read_trace(path)
    rewritten = read_trace(_as_correlations(path, tmp_path / "t.json.gz"))
    assert original.op_rows and rewritten.op_rows == original.op_rows
    assert rewritten.step_flops == original.step_flops
    a, b = original.timeline, rewritten.timeline
    op_ids = {r.external_id for r in a.ranges if r.kind == OP}
    for before, after in zip(a.runtime, b.runtime, strict=True):
        if before.external_id in op_ids:
            assert after.external_id == before.external_id
    for before, after in zip(a.gpu, b.gpu, strict=True):
        if before.external_id in op_ids:
            assert after.external_id == before.external_id


def test_a_trace_whose_ids_link_ops_is_left_as_it_is() -> None:
    tl = Timeline(runtime=[call(5, corr=100, ext=1)], ranges=[op(0, 10, 2)])
    assert relink(tl) is None
    assert tl.runtime[0].external_id == 1
