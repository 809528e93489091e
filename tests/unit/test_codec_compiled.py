"""The codec's compiled converters read every value exactly as its loop over the
same plan does (the converter of the first values a class reads): the same
instance, or the same error with the same message, on real snapshots of the
embedded recording with fields replaced by values of every JSON type, in and
out of range, and fields removed."""

from __future__ import annotations

import dataclasses
import gzip
import json
import typing
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gputui.snapshot.codec import (
    DecodeError,
    _compile_converter,
    _loop_converter,
    dataclass_plan,
    from_json,
)
from gputui.snapshot.model import MAX_STR_CHARS, Snapshot

DEMO = Path(__file__).resolve().parents[2] / "gputui" / "data" / "demo.jsonl.gz"


def _classes(cls: type, seen: dict[str, type]) -> dict[str, type]:
    seen[cls.__name__] = cls
    pending = list(typing.get_type_hints(cls).values())
    while pending:
        tp = pending.pop()
        if isinstance(tp, type) and dataclasses.is_dataclass(tp) and tp.__name__ not in seen:
            _classes(tp, seen)
        pending.extend(typing.get_args(tp))
    return seen


CLASSES = _classes(Snapshot, {})


def _samples() -> list[tuple[type, dict[str, Any]]]:
    """(class, JSON value) of every value class a snapshot of the demo holds."""
    lines = gzip.open(DEMO, "rt").read().splitlines()
    found: dict[str, tuple[type, dict[str, Any]]] = {}

    def walk(cls: type, value: Any) -> None:
        if type(value) is not dict:
            return
        found.setdefault(cls.__name__, (cls, value))
        hints = typing.get_type_hints(cls)
        for key, item in value.items():
            tp = hints.get(key)
            inner = [a for a in typing.get_args(tp) if a is not type(None)] if tp else []
            for t in [tp, *inner, *(a for i in inner for a in typing.get_args(i))]:
                if isinstance(t, type) and dataclasses.is_dataclass(t):
                    for v in item if type(item) is list else [item]:
                        walk(t, v)
            if tp is not None and typing.get_origin(tp) is tuple:
                (item_type, _) = typing.get_args(tp)
                if dataclasses.is_dataclass(item_type) and type(item) is list:
                    for v in item:
                        walk(item_type, v)

    for line in lines[1:40]:
        walk(Snapshot, json.loads(line))
    return list(found.values())


SAMPLES = _samples()

#: values of every JSON type, in and out of every range
ODD = st.one_of(
    st.sampled_from(
        [None, True, False, 0, -1, 1, 2**63, -(2**70), 1.5, -0.5, 1e308, -1e308, 1e-300]
    ),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
    st.just("x" * (MAX_STR_CHARS + 1)),
    st.lists(st.text(max_size=4), max_size=4),
    st.lists(st.integers(), max_size=3),
    st.just(["a"] * 5000),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def shape(value: Any) -> Any:
    """``value`` with the type of every part (a tuple is not a list, 1 is not 1.0)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, [(k, shape(v)) for k, v in vars(value).items()])
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, [shape(v) for v in value])
    return (type(value).__name__, value)


def compiled(cls: type, data: Any) -> Any:
    return _compile_converter(cls, dataclass_plan(cls))(data)


def looped(cls: type, data: Any) -> Any:
    return _loop_converter(cls, dataclass_plan(cls))(data)


def outcome(fn: Any, cls: type, data: Any) -> Any:
    try:
        return ("ok", shape(fn(cls, data)))
    except DecodeError as exc:
        return ("error", type(exc).__name__, str(exc))


def test_the_samples_cover_the_nested_classes() -> None:
    """The control: the walk found a real value of most classes a snapshot holds."""
    assert {"Snapshot", "ProcessSnapshot", "DeviceSnapshot", "HostSnapshot"} <= {
        c.__name__ for c, _ in SAMPLES
    }
    assert len(SAMPLES) >= 5


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    st.sampled_from(SAMPLES),
    st.lists(st.tuples(st.integers(min_value=0), ODD, st.booleans()), max_size=4),
    st.one_of(st.none(), ODD),
)
def test_compiled_converters_agree_with_the_loop(
    sample: tuple[type, dict[str, Any]],
    edits: list[tuple[int, Any, bool]],
    whole: Any,
) -> None:
    cls, value = sample
    data: Any = dict(value)
    keys = sorted(data)
    for at, replacement, remove in edits:
        key = keys[at % len(keys)]
        if remove:
            data.pop(key, None)
        else:
            data[key] = replacement
    if whole is not None and not edits:
        data = whole  # not an object at all
    expected = outcome(looped, cls, data)
    assert outcome(compiled, cls, data) == expected
    assert outcome(lambda c, d: from_json(c, d), cls, data) == expected


def test_a_real_snapshot_reads_the_same_both_ways() -> None:
    for cls, value in SAMPLES:
        expected = outcome(looped, cls, value)
        assert expected[0] == "ok"
        for way in (compiled, lambda c, d: from_json(c, d)):
            assert outcome(way, cls, value) == expected


def test_equal_strings_read_from_different_values_are_one_object() -> None:
    """A node's thousands of processes repeat a few users, GPU ids and command
    words: each is held once (the memory of a 20,000-process replay)."""
    from gputui.snapshot.model import ProcessSnapshot

    def value() -> dict[str, Any]:  # new strings each time, as a JSON parse makes them
        return json.loads(
            '{"pid": 1, "gpu_index": 0, "gpu_uuid": "GPU-abc", "type": "compute",'
            ' "user": "ana", "cmdline": ["python", "serve.py", "--port=8000"]}'
        )

    for way in (compiled, looped):
        a, b = way(ProcessSnapshot, value()), way(ProcessSnapshot, value())
        assert a.user == b.user == "ana" and a.user is b.user
        assert a.gpu_uuid is b.gpu_uuid
        assert all(x is y for x, y in zip(a.cmdline, b.cmdline, strict=True))


def test_a_class_read_often_gets_its_compiled_converter() -> None:
    """The loop first (compiling costs start-up time), the compiled function
    after COMPILE_AFTER values: the same values either way."""
    from gputui.snapshot import codec
    from gputui.snapshot.model import GpmMetrics

    convert = codec._dataclass_converter(GpmMetrics)
    data = {"sm_activity_pct": 50.0, "tensor_activity_pct": 7.0}
    state = convert.__closure__  # the converter's own state, read as a test may
    assert state is not None
    values = [shape(convert(dict(data))) for _ in range(codec.COMPILE_AFTER + 3)]
    assert all(v == values[0] for v in values)
    fast = next(c.cell_contents for c in state if isinstance(c.cell_contents, list))[1]
    assert fast is not None and fast.__code__.co_filename == "<converter of GpmMetrics>"
