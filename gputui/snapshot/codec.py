"""Snapshots to and from plain JSON values.

The JSON form is the dataclass fields by name.  Reading is tolerant so that
recordings stay playable across versions: unknown keys are ignored, missing
keys take the field's default.  Reading is also strict about what it accepts: a
recording is untrusted input, so every value is type- and range-checked
(``gputui.snapshot.model.UNIT_RANGES``) and a value out of range is N/A, or an error
where the field cannot be N/A.  Writing never emits NaN or an infinity.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import sys
import types
import typing
from collections.abc import Callable
from functools import cache
from typing import Any, NamedTuple, TypeVar, Union

from gputui.snapshot.model import (
    FIELD_RANGES,
    FLOAT_RANGE,
    INT_RANGE,
    MAX_ITEMS,
    MAX_STR_CHARS,
    SCHEMA_VERSION,
    UNIT_RANGES,
    Snapshot,
)

T = TypeVar("T")


class DecodeError(ValueError):
    """A JSON value does not fit the snapshot schema."""


def to_json(value: Any) -> Any:
    """A dataclass tree as JSON-ready dicts, lists and scalars."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [to_json(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):  # NaN, inf are not JSON
        return None
    return value


def snapshot_to_json(snapshot: Snapshot) -> dict[str, Any]:
    data: dict[str, Any] = to_json(snapshot)
    data["schema"] = SCHEMA_VERSION
    return data


def snapshot_document(
    snapshot: Snapshot,
    label: str,
    is_recording: bool,
    rate_window_s: float | None = None,
    findings: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The ``--once --json`` document: the snapshot plus where it came from.

    ``rate_window_s``: the window live rates were measured over (``--window``);
    None for a live snapshot of instant values (rates are null) or a recording.
    """
    doc = snapshot_to_json(snapshot)
    doc["source"] = {
        "label": label,
        "is_recording": is_recording,
        "rate_window_s": rate_window_s,
    }
    if findings is not None:
        doc["findings"] = findings
    return doc


#: processes encoded per write (a node's thousands go out as they are encoded)
STREAM_PROCESSES = 256


def print_document(
    snapshot: Snapshot, *source: Any, out: typing.TextIO | None = None, **options: Any
) -> None:
    """Write :func:`snapshot_document` (of ``snapshot`` and where it came from, the
    arguments it takes) to ``out`` (standard output), strict JSON (no
    NaN), streamed: the processes are encoded and written a few at a time, each on
    a line of its own, so that 20,000 of them are never one string (nor their
    dicts one list) in memory.  The rest of the document is laid out as
    ``json.dumps(doc, indent=1)`` lays it out, and encoded before anything is
    written."""
    out = sys.stdout if out is None else out
    doc = snapshot_document(dataclasses.replace(snapshot, processes=()), *source, **options)
    parts: list[str | None] = []
    for key, value in doc.items():
        if key == "processes":
            parts.append(None)  # where the processes go
            continue
        text = json.dumps(value, indent=1, allow_nan=False).replace("\n", "\n ")
        parts.append(f" {json.dumps(key)}: {text}")
    out.write("{\n")
    for n, part in enumerate(parts):
        out.write(",\n" if n else "")
        if part is not None:
            out.write(part)
            continue
        out.write(' "processes": ')
        _write_processes(out, snapshot.processes)
    out.write("\n}\n")
    out.flush()


@cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def _flat_json(value: Any) -> dict[str, Any]:
    """A dataclass of plain fields (a process) as a dict: tuples stay tuples (JSON
    writes them as lists), nothing checked (the encoder refuses a NaN, and a value
    of its own, a container or a Slurm job: :func:`to_json` writes those)."""
    names = _field_names(type(value))  # type: ignore[arg-type]
    return {name: getattr(value, name) for name in names}


def _write_processes(out: typing.TextIO, processes: tuple[Any, ...]) -> None:
    if not processes:
        out.write("[]")
        return
    out.write("[\n")
    encode = json.JSONEncoder(separators=(", ", ": "), allow_nan=False).encode
    for start in range(0, len(processes), STREAM_PROCESSES):
        chunk = processes[start : start + STREAM_PROCESSES]
        try:
            texts = [encode(_flat_json(p)) for p in chunk]
        except (ValueError, TypeError):  # a NaN or an infinity (null), or a nested value
            texts = [encode(to_json(p)) for p in chunk]
        out.write(("  " if not start else ",\n  ") + ",\n  ".join(texts))
    out.write("\n ]")


def check_schema(value: Any, what: str, newest: int = SCHEMA_VERSION) -> int:
    """``value`` as a schema version this gputui reads (at most ``newest``);
    DecodeError with the reason."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DecodeError(f"{what} schema {_short(value)} is not a schema version")
    if value > newest:
        raise DecodeError(f"{what} schema {value} is newer than this gputui understands ({newest})")
    return value


def snapshot_from_json(data: Any) -> Snapshot:
    """A Snapshot from its JSON form, every value type- and range-checked.

    Raises DecodeError (and nothing else) for anything that is not a snapshot.
    """
    if not isinstance(data, dict):
        raise DecodeError("snapshot is not a JSON object")
    check_schema(data.get("schema", SCHEMA_VERSION), "snapshot")
    return from_json(Snapshot, data)


def from_json(cls: type[T], data: Any) -> T:
    """Build dataclass ``cls`` from ``data``, checking types and ranges on the way.

    A number, string or list outside its field's range (``gputui.snapshot.model``) is
    None where the field allows None, else a DecodeError.
    """
    convert: Converter = _dataclass_converter(cls)  # type: ignore[arg-type]
    result: T = convert(data)
    return result


def from_json_or_none(cls: type[T], data: Any) -> T | None:
    """:func:`from_json` of an optional part of a document: None where it is
    absent or empty, or does not decode."""
    if not data:
        return None
    try:
        return from_json(cls, data)
    except DecodeError:
        return None


Converter = Callable[[Any], Any]


def converter_of(cls: type[T]) -> Callable[[Any], T]:
    """:func:`from_json` for ``cls``, looked up once (for a caller that reads
    thousands of values of one class)."""
    return _dataclass_converter(cls)  # type: ignore[arg-type]


class _OutOfRange(DecodeError):
    """A value of the right type outside its field's range (None where allowed)."""


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class _Complex:
    """No JSON value has this type: a field of it always takes its converter."""


class _Words:
    """A list of strings (a command line), taken as a tuple when its length and
    every string's are within bounds."""


_ONLY_STR = frozenset((str,))


#: a field's plan: key, the type its common values have, their range (a string's
#: length), whether null is allowed (N/A), and the converter that decides the rest
_FieldPlan = tuple[str, type, float, float, bool, Converter]


class ClassPlan(NamedTuple):
    """How a dataclass is read: a plan per field, the fields without a default,
    and the defaults when the instance's dict can be filled at once (no default
    factory, ``__post_init__`` or slots), else None."""

    fields: tuple[_FieldPlan, ...]
    required: tuple[str, ...]
    defaults: dict[str, Any] | None


#: (module, annotation) -> the type it names, evaluated once: the model's fields
#: repeat a few annotations ("float | None") dozens of times, and
#: ``typing.get_type_hints`` compiles every occurrence anew (a ``ForwardRef`` per
#: field, 121 compilations: most of the codec's start-up, on ``--once``'s path)
_ANNOTATIONS: dict[tuple[str, str], Any] = {}


def field_types(cls: type) -> dict[str, Any]:
    """The type of each dataclass field of ``cls``, as ``typing.get_type_hints``
    gives it, each distinct annotation string evaluated once per module."""
    names = {f.name for f in dataclasses.fields(cls)}
    out: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):  # a subclass's annotation wins, as there
        namespace = vars(sys.modules[klass.__module__])
        for name, annotation in inspect.get_annotations(klass).items():
            if name not in names:
                continue
            if isinstance(annotation, str):
                key = (klass.__module__, annotation)
                if key not in _ANNOTATIONS:
                    # the class's own source text, as get_type_hints evaluates it
                    value = eval(annotation, namespace)
                    _ANNOTATIONS[key] = type(None) if value is None else value
                annotation = _ANNOTATIONS[key]
            out[name] = annotation
    return out


@cache
def dataclass_plan(cls: type) -> ClassPlan:
    """How ``cls`` is read (:class:`ClassPlan`)."""
    hints = field_types(cls)
    plan: list[_FieldPlan] = []
    required: list[str] = []
    for f in dataclasses.fields(cls):
        where = f"{cls.__name__}.{f.name}"
        plan.append((f.name, *_fast_check(hints[f.name], where), _converter(hints[f.name], where)))
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(f.name)
    direct = (
        all(f.default_factory is dataclasses.MISSING for f in dataclasses.fields(cls))
        and not hasattr(cls, "__post_init__")
        and "__slots__" not in cls.__dict__
    )
    defaults = {f.name: f.default for f in dataclasses.fields(cls)} if direct else None
    return ClassPlan(tuple(plan), tuple(required), defaults)


#: conversions of one class after which its converter is compiled: compiling
#: costs about 2 ms a class (20 ms for a snapshot's classes: a tenth of
#: ``--once``), and pays off only for the classes read by the thousand
COMPILE_AFTER = 256


@cache
def _dataclass_converter(cls: type) -> Converter:
    """``cls``'s converter: a loop over its plan, replaced by the compiled
    function once it has read :data:`COMPILE_AFTER` values."""
    plan = dataclass_plan(cls)
    loop = _loop_converter(cls, plan)
    state: list[Any] = [0, None]

    def convert(data: Any) -> Any:
        fast = state[1]
        if fast is not None:
            return fast(data)
        state[0] += 1
        if state[0] >= COMPILE_AFTER:
            state[1] = _compile_converter(cls, plan)
        return loop(data)

    return convert


def _loop_converter(cls: type, class_plan: ClassPlan) -> Converter:
    """The converter of ``cls`` as a loop over its plan: what the compiled one
    does, written once (see :func:`_compile_converter`)."""
    plan, required, defaults = class_plan
    name = cls.__name__

    def convert(data: Any) -> Any:
        if type(data) is not dict:
            raise DecodeError(f"{name}: expected an object, got {_json_type(data)}")
        for key in required:
            if key not in data:
                raise DecodeError(f"{name}: missing field {key!r}")
        kwargs: dict[str, Any] = {}
        for key, kind, lo, hi, nullable, conv in plan:
            if key not in data:
                continue
            value: Any = data[key]
            if value is None:
                kwargs[key] = None if nullable else conv(value)
            elif type(value) is kind and (
                kind is bool or lo <= (len(value) if kind is str else value) <= hi  # type: ignore[operator, arg-type]
            ):
                kwargs[key] = sys.intern(value) if type(value) is str else value
            else:
                kwargs[key] = conv(value)  # a list of words too: the converter's tuple
        if defaults is not None:
            value = object.__new__(cls)
            value.__dict__.update(defaults, **kwargs)
            return value
        return cls(**kwargs)

    return convert


def _compile_converter(cls: type, class_plan: ClassPlan) -> Converter:
    """The converter of ``cls`` as one function with a branch per field, written
    out and compiled once (as ``dataclasses`` writes ``__init__``): the same checks
    as a loop over ``plan`` in half the time, which a replay of thousands of
    processes spends thousands of times a second.  A value of the field's own type
    and in range, or null where N/A is allowed, is taken as it is; everything
    else, errors included, is the field's converter's.  With ``defaults`` the
    instance's dict is filled at once (a frozen dataclass sets each field through
    ``object.__setattr__`` in ``__init__``: three times the time)."""
    plan, required, defaults = class_plan
    name = cls.__name__
    env: dict[str, Any] = {
        "_cls": cls,
        "_new": object.__new__,
        "_defaults": defaults,
        "_DecodeError": DecodeError,
        "_json_type": _json_type,
        "_only_str": _ONLY_STR.issuperset,
        "_intern": sys.intern,
        "_max_chars": MAX_STR_CHARS,
    }
    target = "_d" if defaults is not None else "_kw"
    lines = [
        "def convert(data):",
        "    if type(data) is not dict:",
        f"        raise _DecodeError({name + ': expected an object, got '!r} + _json_type(data))",
    ]
    for key in required:
        lines += [
            f"    if {key!r} not in data:",
            f"        raise _DecodeError({f'{name}: missing field {key!r}'!r})",
        ]
    if defaults is not None:
        lines += ["    _obj = _new(_cls)", "    _d = _obj.__dict__", "    _d.update(_defaults)"]
    else:
        lines.append("    _kw = {}")
    for n, (key, kind, lo, hi, nullable, conv) in enumerate(plan):
        env[f"_k{n}"], env[f"_lo{n}"], env[f"_hi{n}"], env[f"_c{n}"] = kind, lo, hi, conv
        slot = f"{target}[{key!r}]"
        # (condition, value taken as it is), in order; the converter otherwise
        taken: list[tuple[str, str]] = [("v is None", "None")] if nullable else []
        if kind is bool:
            taken.append(("type(v) is bool", "v"))
        elif kind is str:
            taken.append((f"type(v) is str and _lo{n} <= len(v) <= _hi{n}", "_intern(v)"))
        elif kind is _Words:
            words = (
                f"type(v) is list and len(v) <= _hi{n} and _only_str(map(type, v))"
                " and max(map(len, v), default=0) <= _max_chars"
            )
            taken.append((words, "tuple(map(_intern, v))"))
        elif kind is not _Complex:
            taken.append((f"type(v) is _k{n} and _lo{n} <= v <= _hi{n}", "v"))
        lines += [f"    if {key!r} in data:", f"        v = data[{key!r}]"]
        for at, (condition, value) in enumerate(taken):
            lines += [
                f"        {'elif' if at else 'if'} {condition}:",
                f"            {slot} = {value}",
            ]
        if taken:
            lines += ["        else:", f"            {slot} = _c{n}(v)"]
        else:
            lines.append(f"        {slot} = _c{n}(v)")
    lines.append("    return _obj" if defaults is not None else "    return _cls(**_kw)")
    exec(compile("\n".join(lines), f"<converter of {name}>", "exec"), env)
    convert: Converter = env["convert"]
    return convert


def _fast_check(tp: Any, where: str) -> tuple[type, float, float, bool]:
    """What ``convert`` takes as it is for a field of type ``tp``: (type, low,
    high, nullable).  An int is a valid float too, but becomes a float: that is
    the converter's work, so a float field's common type is float alone."""
    nullable = False
    if typing.get_origin(tp) in (Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        nullable, tp = True, inner[0] if len(inner) == 1 else _Complex
    if tp is float or tp is int:
        lo, hi = _range_of(where) or (FLOAT_RANGE if tp is float else INT_RANGE)
        return tp, lo, hi, nullable
    if tp is str:
        return str, 0, MAX_STR_CHARS, nullable
    if tp is bool:
        return bool, 0, 0, nullable
    if typing.get_origin(tp) is tuple and typing.get_args(tp) == (str, ...):
        return _Words, 0, MAX_ITEMS.get(where, 4096), nullable
    return _Complex, 0, 0, nullable


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false"}.get(
        type(value), "a number"
    )


def _range_of(where: str) -> tuple[float, float] | None:
    if where in FIELD_RANGES:
        return FIELD_RANGES[where]
    field_name = where.rsplit(".", 1)[-1]
    # the longest unit suffix wins: "_bytes_per_s" before "_s"
    for unit in sorted(UNIT_RANGES, key=len, reverse=True):
        if field_name.endswith(unit):
            return UNIT_RANGES[unit]
    return None


def _converter(tp: Any, where: str) -> Converter:
    origin = typing.get_origin(tp)
    if origin is Union or origin is types.UnionType:
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(inner) != 1:
            raise TypeError(f"{where}: unsupported type {tp!r}")
        convert = _converter(inner[0], where)

        def optional(value: Any) -> Any:
            if value is None:
                return None
            try:
                return convert(value)
            except _OutOfRange:
                return None  # N/A: the field allows it

        return optional
    if origin is tuple:
        item_type, _ellipsis = typing.get_args(tp)
        item = _converter(item_type, where)
        limit = MAX_ITEMS.get(where, 4096)

        def sequence(value: Any) -> Any:
            if not isinstance(value, list):
                raise DecodeError(f"{where}: expected a list, got {_json_type(value)}")
            if len(value) > limit:
                raise _OutOfRange(f"{where}: {len(value)} items, at most {limit} allowed")
            if (
                item_type is str
                and _ONLY_STR.issuperset(map(type, value))
                and max(map(len, value), default=0) <= MAX_STR_CHARS
            ):
                # words of a command line: all valid, the common case (each held
                # once: a node's processes repeat them)
                return tuple(map(sys.intern, value))
            return tuple(map(item, value))

        return _not_null(sequence, where)
    if dataclasses.is_dataclass(tp):
        return _not_null(_dataclass_converter(tp), where)  # type: ignore[arg-type]
    if tp is float:
        return _not_null(_number(where, float), where)
    if tp is int:
        return _not_null(_number(where, int), where)
    if tp is bool:

        def boolean(value: Any) -> bool:
            if isinstance(value, bool):
                return value
            raise DecodeError(f"{where}: expected true or false, got {_json_type(value)}")

        return _not_null(boolean, where)
    if tp is str:

        def string(value: Any) -> str:
            if not isinstance(value, str):
                raise DecodeError(f"{where}: expected a string, got {_json_type(value)}")
            if len(value) > MAX_STR_CHARS:
                raise _OutOfRange(f"{where}: a string of {len(value)} characters")
            return value

        return _not_null(string, where)
    raise TypeError(f"{where}: unsupported type {tp!r}")


def _not_null(convert: Converter, where: str) -> Converter:
    def required(value: Any) -> Any:
        if value is None:
            raise DecodeError(f"{where}: null not allowed")
        return convert(value)

    return required


def _number(where: str, kind: type) -> Converter:
    lo, hi = _range_of(where) or (FLOAT_RANGE if kind is float else INT_RANGE)
    want = "a number" if kind is float else "an integer"

    def number(value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise DecodeError(f"{where}: expected {want}, got {_json_type(value)}")
        if isinstance(value, float) and kind is int and not math.isinf(value):
            raise DecodeError(f"{where}: expected {want}, got {_short(value)}")
        # int against float compares exactly in Python: no overflow for big ints; NaN
        # fails both comparisons
        if not lo <= value <= hi:
            raise _OutOfRange(f"{where}: {_short(value)} is out of range ({lo:g} to {hi:g})")
        return kind(value)

    return number
