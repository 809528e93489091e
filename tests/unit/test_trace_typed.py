"""The typed reader (msgspec Structs) against the reader before it (the standard
decoder's dicts, ``read_trace(typed=False)``): the same timeline, header, op
rows and FLOPs on every trace kept here and on any events at all."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gputui.trace import op_rows
from gputui.trace.op_rows import ChromeTraceOps
from gputui.tracefile import categories, json_stream, reader, typed
from gputui.tracefile.reader import TraceError, TraceFile, read_trace
from tests.helpers.tracegen import reference_trace

REPO = Path(__file__).resolve().parents[2]
#: third-party traces, kept beside the repository (shared/) or in tests/data
THIRD_PARTY = (REPO / "tests" / "data" / "thirdparty", REPO.parent / "shared" / "thirdparty")


def kept_traces() -> list[Path]:
    found = sorted((REPO / "tests" / "data").rglob("*.pt.trace.json*"))
    for folder in THIRD_PARTY:
        if folder.is_dir():
            found += sorted(p for p in folder.rglob("*.json*") if p.is_file())
    return found


def reading(tf: TraceFile) -> tuple[Any, ...]:
    """Everything a reader hands the analysis."""
    tl = tf.timeline
    return (
        tl.gpu,
        tl.runtime,
        tl.ranges,
        tl.collectives,
        tl.events,
        tl.skipped,
        tf.rank,
        tf.world_size,
        tf.devices,
        tf.json_bytes,
        tf.file_bytes,
        tf.meta,
        tf.op_rows,
        tf.step_flops,
        tf.host_pid,
    )


def both(path: Path) -> tuple[Any, Any]:
    """What each reader makes of ``path``: its reading, or its one-line error."""
    out = []
    for is_typed in (True, False):
        try:
            out.append(reading(read_trace(path, typed=is_typed)))
        except TraceError as exc:
            out.append(("error", str(exc)))
    return out[0], out[1]


class _NoShapes(ChromeTraceOps):
    """The op rows of a trace recorded without shapes: given up from the start."""

    def __init__(self) -> None:
        super().__init__()
        self.give_up()


@pytest.fixture(autouse=True, params=["op-rows", "no-shapes", "per-event"])
def typed_from_the_first_byte(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> str:
    """The typed decoder on every batch, however small the trace; each test runs
    three times: with the op rows probing for shapes (the by-category path with
    the ops' shape arguments), with them given up, as in a trace recorded
    without shapes (the by-category path without them,
    :mod:`gputui.tracefile.categories`), and with the by-category path off (the
    per-event path, which reads every batch the other one refuses)."""
    monkeypatch.setattr(reader, "TYPED_FROM_BYTES", 0)
    monkeypatch.setattr(reader, "TYPED_MIN_JSON", 0)
    if request.param == "no-shapes":
        monkeypatch.setattr(reader, "ChromeTraceOps", _NoShapes)
    if request.param == "per-event":
        real = typed.TypedReader.__init__

        def per_event(self: typed.TypedReader, *args: Any) -> None:
            real(self, *args)
            self.by_category = None

        monkeypatch.setattr(typed.TypedReader, "__init__", per_event)
    return str(request.param)


class Batches:
    """Counts the batches the typed decoder took and left, and those the by-category
    path took."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.took = self.left = self.by_category = 0
        real = typed.TypedReader.batch
        take = categories.ByCategory.take

        def counted(cols: categories.ByCategory, events: list[Any]) -> bool:
            ok = take(cols, events)
            self.by_category += ok
            return ok

        monkeypatch.setattr(categories.ByCategory, "take", counted)

        def batch(reader: typed.TypedReader, text: str) -> bool:
            ok = real(reader, text)
            if ok:
                self.took += 1
            else:
                self.left += 1
            return ok

        monkeypatch.setattr(typed.TypedReader, "batch", batch)


@pytest.mark.parametrize("path", kept_traces(), ids=lambda p: str(p.relative_to(p.parents[1])))
def test_both_readers_read_every_kept_trace_the_same(
    path: Path, monkeypatch: pytest.MonkeyPatch, typed_from_the_first_byte: str
) -> None:
    if typed_from_the_first_byte != "per-event":
        # batches of 16 kB: most of them without the metadata events (no
        # category) that send a batch to the per-event path
        monkeypatch.setattr(json_stream, "CHUNK", 1 << 14)
    batches = Batches(monkeypatch)
    new, old = both(path)
    assert new == old
    assert new[0] != "error"
    # the typed path read them (a trace torch wrote has nothing it leaves), and
    # but with it turned off the by-category path
    assert batches.took >= 1 and batches.left == 0
    if typed_from_the_first_byte != "per-event":
        assert batches.by_category >= 1


def test_batches_cut_small_read_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Many small batches, cut anywhere, and names holding '},{'."""
    t = reference_trace()
    t.op('weird},{"name": "x"},', 300.0, 1.0)
    t.launch(301.0, 1.0, 'kernel<"},">', 302.0, 1.0)
    path = t.write(tmp_path / "t.json")
    whole = both(path)
    assert whole[0] == whole[1]
    batches = Batches(monkeypatch)
    for chunk in (1, 7, 64, 300):
        monkeypatch.setattr(json_stream, "CHUNK", chunk)
        assert both(path) == whole
    assert batches.took > 10


def test_one_odd_event_sends_its_batch_to_the_dict_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A string stream, a null name, a boolean id: read as the dict path reads them."""
    t = reference_trace()
    doc = t.document()
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    kernel["args"]["stream"] = "7"
    doc["traceEvents"].insert(3, {"ph": "X", "cat": "cpu_op", "name": None, "ts": 1, "dur": 2})
    doc["traceEvents"].insert(
        4, {"ph": "X", "cat": "cpu_op", "ts": 1, "dur": 2, "args": {"External id": True}}
    )
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(doc))
    batches = Batches(monkeypatch)
    new, old = both(path)
    assert new == old and batches.left >= 1
    assert any(r.name == "" for r in new[2])


def test_shape_arguments_are_decoded_only_for_the_ops_in_a_row(
    tmp_path: Path, typed_from_the_first_byte: str
) -> None:
    if typed_from_the_first_byte == "no-shapes":
        pytest.skip("about the op rows of a trace with shapes")
    path = REPO / "tests" / "data" / "h100_fp32_matmul_flops.pt.trace.json.gz"
    decoded: list[str] = []
    real = typed.ShapeArgs.get

    def get(self: typed.ShapeArgs, key: str, default: Any = None) -> Any:
        decoded.append(key)
        return real(self, key, default)

    tf = read_trace(path)
    cpu_ops = sum(1 for r in tf.timeline.ranges if r.kind == "op")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(typed.ShapeArgs, "get", get)
        tf = read_trace(path)
    assert tf.op_rows, "a trace with shapes has op rows"
    ops_read = len(decoded) // 4
    assert 0 < ops_read < cpu_ops


def test_ops_with_the_same_shape_arguments_are_decoded_and_estimated_once(
    tmp_path: Path, typed_from_the_first_byte: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A training trace repeats its shapes every step: the ops that share their
    raw shape arguments share what is decoded and estimated of them, and the
    rows and FLOPs are the dict path's."""
    if typed_from_the_first_byte == "no-shapes":
        pytest.skip("about the op rows of a trace with shapes")
    n = 300
    events: list[dict[str, Any]] = []
    for i in range(n):
        ts = 10.0 * i
        for tid in (1, 2):  # two threads: one shape, two sets of ops
            ext = 2 * i + tid
            corr = 10_000 + ext
            events.append({
                "ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": tid,
                "ts": ts, "dur": 5.0,
                "args": {"External id": ext, "Input Dims": [[64, 128], [128, 32]],
                         "Input type": ["c10::BFloat16", "c10::BFloat16"],
                         "Concrete Inputs": ["", ""]},
            })  # fmt: skip
            events.append({
                "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7,
                "tid": tid, "ts": ts + 1, "dur": 1.0,
                "args": {"External id": ext, "correlation": corr},
            })  # fmt: skip
            events.append({
                "ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7,
                "ts": ts + 2, "dur": 3.0,
                "args": {"External id": ext, "correlation": corr, "stream": 7, "device": 0},
            })  # fmt: skip
    path = tmp_path / "repeated.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    decoded: list[str] = []
    real = typed.ShapeArgs.get

    def get(self: typed.ShapeArgs, key: str, default: Any = None) -> Any:
        decoded.append(key)
        return real(self, key, default)

    estimated: list[str] = []
    estimate = op_rows.op_costs.estimate_flops

    def counted(name: str, *rest: Any) -> Any:
        estimated.append(name)
        return estimate(name, *rest)

    with monkeypatch.context() as mp:
        mp.setattr(typed.ShapeArgs, "get", get)
        mp.setattr(op_rows.op_costs, "estimate_flops", counted)
        new = reading(read_trace(path, typed=True))
    assert new == reading(read_trace(path, typed=False))
    (row,) = new[12]
    assert row.calls == 2 * n and row.kernels == 2 * n
    assert row.flops == pytest.approx(2 * n * 2 * 64 * 128 * 32)
    # one shape: decoded once for the rows and once for the FLOP totals (its 4
    # arguments each time), not once per op (2 * n of them)
    assert len(decoded) == 2 * 4
    assert len(estimated) <= 2  # the rows, and the FLOP totals


# -- any events at all -------------------------------------------------------------------------
CATS = [
    "cpu_op",
    "kernel",
    "cuda_runtime",
    "cuda_driver",
    "user_annotation",
    "gpu_memcpy",
    "gpu_memset",
    "python_function",
    "Trace",
    "Kernel",
    "Runtime",
    "ac2g",
    "cuda_sync",
    "gpu_user_annotation",
    "Operator",
]
NAMES = [
    "aten::mm",
    "aten::addmm",
    "ProfilerStep#3",
    "ProfilerStep#4",
    "cudaLaunchKernel",
    "Event Sync",
    "Context Sync",
    "sgemm",
    "ncclKernel_AllReduce",
    "",
]

odd = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=4),
    st.lists(st.integers(0, 3), max_size=2),
    st.dictionaries(st.sampled_from(["a", "b"]), st.integers(0, 2), max_size=1),
)
ids = st.integers(-2, 60)
times = st.one_of(st.integers(0, 10**6), st.floats(0, 1e6).map(lambda x: round(x, 3)))
dims = st.lists(st.lists(st.integers(1, 64), max_size=3), max_size=3)


def arguments(value: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {},
        optional={
            "correlation": value,
            "stream": value,
            "device": value,
            "External id": value,
            "external id": value,
            "Input Dims": dims,
            "Input type": st.lists(
                st.sampled_from(["float", "c10::BFloat16", "Scalar"]), max_size=3
            ),
            "Concrete Inputs": st.lists(st.sampled_from(["", "1", "[2, 2]"]), max_size=3),
            "flops": st.integers(0, 10**9),
            "cbid": st.integers(0, 300),
            # a communication kernel's message
            "Collective name": st.sampled_from(["allreduce", "all_to_allv", ""]),
            "In msg nelems": value,
            "Out msg nelems": value,
            "dtype": st.sampled_from(["Float", "BFloat16", "Odd", ""]),
            "Group size": value,
            "In split size": st.sampled_from(["[4, 4]", "[]", ""]),
        },
    )


def events(
    value: st.SearchStrategy[Any],
    cat: st.SearchStrategy[Any],
    time: st.SearchStrategy[Any],
    args: st.SearchStrategy[Any],
) -> Any:
    return st.fixed_dictionaries(
        {},
        optional={
            "ph": st.sampled_from(["X", "i", "s", "f", "M"]),
            "cat": cat,
            "name": st.sampled_from(NAMES),
            "ts": time,
            "dur": time,
            "pid": value,
            "tid": value,
            "args": args,
        },
    )


regular = events(st.integers(0, 4), st.sampled_from(CATS), times, arguments(ids))
complete = st.fixed_dictionaries(
    {
        "ph": st.just("X"),
        "cat": st.sampled_from(CATS),
        "name": st.sampled_from(NAMES),
        "ts": times,
        "dur": times,
        "pid": st.integers(0, 4),
        "tid": st.integers(0, 4),
        "args": arguments(ids),
    }
)
FIELDS = [
    "cat",
    "name",
    "ts",
    "dur",
    "pid",
    "tid",
    "args",
    "correlation",
    "stream",
    "device",
    "External id",
    "external id",
    "Collective name",
    "In msg nelems",
    "Group size",
    "dtype",
]


@st.composite
def one_odd_value(draw: st.DrawFn) -> dict[str, Any]:
    """A complete event with one field of an odd type (or gone)."""
    ev = draw(complete)
    key = draw(st.sampled_from(FIELDS))
    target = ev if key in ev else ev["args"]
    if draw(st.booleans()):
        target[key] = draw(odd)
    else:
        target.pop(key, None)
    return ev


def read_both(doc: Any) -> tuple[Any, Any]:
    fd, name = tempfile.mkstemp(suffix=".json")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(doc, fh)  # NaN and Infinity written as torch's writer never would
        return both(Path(name))
    finally:
        os.unlink(name)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(regular, min_size=2, max_size=40))
def test_regular_events_read_the_same(evs: list[dict[str, Any]]) -> None:
    new, old = read_both({"schemaVersion": 1, "traceEvents": evs})
    assert new == old


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(complete, one_odd_value(), odd), min_size=1, max_size=30))
def test_any_events_read_the_same_and_never_crash(evs: list[Any]) -> None:
    new, old = read_both({"traceEvents": evs})
    assert new == old


#: events of the categories the by-category path knows, with ids that are sometimes
#: negative or missing (a stream, a correlation id): both paths' cases
known = st.fixed_dictionaries(
    {
        "ph": st.just("X"),
        "cat": st.sampled_from(categories.CATEGORIES),
        "name": st.sampled_from(NAMES),
        "ts": times,
        "dur": st.one_of(times, st.floats(0, 2).map(lambda x: round(x, 3))),
        "pid": st.integers(0, 4),
        "tid": st.integers(0, 4),
        "args": arguments(ids),
    }
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(known, min_size=1, max_size=40))
def test_events_of_known_categories_read_the_same(evs: list[dict[str, Any]]) -> None:
    new, old = read_both({"traceEvents": evs})
    assert new == old


def test_the_by_category_path_reads_a_batch_as_the_dict_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, typed_from_the_first_byte: str
) -> None:
    """A batch of every kind of record, short and long, read by category."""
    evs = json.loads(json.dumps(PLAIN))
    for ev in evs:
        ev.get("args", {}).pop("Input Dims", None)
    evs += [dict(ev, ts=ev["ts"] + 0.4, dur=0.3) for ev in evs]
    evs.append({"ph": "X", "cat": "gpu_user_annotation", "name": "a", "ts": 9, "dur": 2, "tid": 3})
    evs.append({"ph": "s", "cat": "ac2g", "name": "flow", "ts": 9, "id": 1, "pid": 1, "tid": 1})
    evs.append({"ph": "X", "cat": "Trace", "name": "t", "ts": 0, "dur": 99, "tid": "x"})
    batches = Batches(monkeypatch)
    new, old = read_both({"traceEvents": evs})
    assert new == old and len(new[0]) == 2 and len(new[1]) == 2 and len(new[2]) == 5
    assert batches.by_category == (typed_from_the_first_byte != "per-event")


ODD_VALUES = [
    None,
    True,
    False,
    -1,
    2**70,
    1.5,
    1e300,
    float("nan"),
    float("inf"),
    "7",
    "x",
    [],
    [1],
    {},
    {"a": 1},
]
PLAIN = [
    {
        "ph": "X",
        "cat": "cpu_op",
        "name": "aten::mm",
        "pid": 1,
        "tid": 1,
        "ts": 10.5,
        "dur": 3,
        "args": {
            "External id": 4,
            "Input Dims": [[2, 3], [3, 4]],
            "Input type": ["float", "float"],
        },
    },
    {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaLaunchKernel",
        "pid": 1,
        "tid": 1,
        "ts": 11,
        "dur": 1,
        "args": {"External id": 4, "correlation": 9},
    },
    {
        "ph": "X",
        "cat": "kernel",
        "name": "sgemm",
        "pid": 0,
        "tid": 7,
        "ts": 12.25,
        "dur": 2,
        "args": {"External id": 4, "correlation": 9, "stream": 7, "device": 0},
    },
    {
        "ph": "X",
        "cat": "user_annotation",
        "name": "ProfilerStep#1",
        "pid": 1,
        "tid": 1,
        "ts": 9,
        "dur": 9,
    },
]


@pytest.mark.parametrize("value", ODD_VALUES, ids=repr)
@pytest.mark.parametrize("key", FIELDS)
@pytest.mark.parametrize("which", range(len(PLAIN)))
def test_each_odd_value_in_each_field_reads_the_same(which: int, key: str, value: Any) -> None:
    """Every field the readers read, with every odd type, in every kind of event:
    the same records (and no crash: a list as a thread id, an infinite time)."""
    evs = json.loads(json.dumps(PLAIN))
    ev = evs[which]
    target = ev if key in ("cat", "name", "ts", "dur", "pid", "tid", "args") else ev.get("args")
    if target is None:
        ev["args"] = target = {}
    target[key] = value
    new, old = read_both({"traceEvents": evs})
    assert new == old


@pytest.mark.parametrize(
    ("cut", "problem"),
    [(0.5, "truncated"), (0.999, "truncated"), (0.25, "truncated")],
)
def test_a_large_trace_cut_short_is_the_same_one_line_on_both(
    tmp_path: Path, cut: float, problem: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cut after the typed decoder has taken batches: the same line as before."""
    import gzip

    text = gzip.decompress((REPO / "tests/data/traces/healthy.pt.trace.json.gz").read_bytes())
    path = tmp_path / "cut.pt.trace.json"
    path.write_bytes(text[: int(len(text) * cut)])
    batches = Batches(monkeypatch)
    new, old = both(path)
    assert new == old and new[0] == "error" and problem in new[1]
    assert batches.took >= 1


@pytest.mark.parametrize(
    "doc",
    [
        {"traceEvents": [1, 2, 3]},
        {"traceEvents": [[1], [2]]},
        [5, "x"],
        {"traceEvents": []},
    ],
    ids=["numbers", "lists", "array-format", "empty"],
)
def test_json_that_is_not_a_trace_is_the_same_one_line_on_both(doc: Any) -> None:
    new, old = read_both(doc)
    assert new == old
    assert new[0] == "error" and "\n" not in new[1]
