"""Snapshots to and from plain JSON values.

The JSON form is the dataclass fields by name.  Reading is tolerant so that
recordings stay playable across versions: unknown keys are ignored, missing
keys take the field's default.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
import typing
from functools import cache
from typing import Any, TypeVar, Union

from gputui.model import SCHEMA_VERSION, Snapshot

T = TypeVar("T")


class DecodeError(ValueError):
    """A JSON value does not fit the snapshot schema."""


def to_json(value: Any) -> Any:
    """A dataclass tree as JSON-ready dicts, lists and scalars."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [to_json(v) for v in value]
    if isinstance(value, float) and value != value:  # NaN is not JSON
        return None
    return value


def snapshot_to_json(snapshot: Snapshot) -> dict[str, Any]:
    data: dict[str, Any] = to_json(snapshot)
    data["schema"] = SCHEMA_VERSION
    return data


def snapshot_document(
    snapshot: Snapshot, label: str, is_recording: bool, rate_window_s: float | None = None
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
    return doc


def print_document(
    snapshot: Snapshot, label: str, is_recording: bool, rate_window_s: float | None = None
) -> None:
    """Write :func:`snapshot_document` to standard output (strict JSON: no NaN)."""
    doc = snapshot_document(snapshot, label, is_recording, rate_window_s)
    json.dump(doc, sys.stdout, indent=1, allow_nan=False)
    sys.stdout.write("\n")
    sys.stdout.flush()


def snapshot_from_json(data: Any) -> Snapshot:
    if not isinstance(data, dict):
        raise DecodeError("snapshot is not a JSON object")
    schema = data.get("schema", SCHEMA_VERSION)
    if not isinstance(schema, int) or schema > SCHEMA_VERSION:
        raise DecodeError(
            f"snapshot schema {schema!r} is newer than this gputui understands ({SCHEMA_VERSION})"
        )
    return from_json(Snapshot, data)


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def from_json(cls: type[T], data: Any) -> T:
    """Build dataclass ``cls`` from ``data``, checking types on the way."""
    if not isinstance(data, dict):
        raise DecodeError(f"{cls.__name__}: expected an object, got {type(data).__name__}")
    hints = _hints(cls)  # type: ignore[arg-type]
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in data:
            kwargs[f.name] = _convert(hints[f.name], data[f.name], f"{cls.__name__}.{f.name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise DecodeError(f"{cls.__name__}: missing field {f.name!r}")
    return cls(**kwargs)


def _convert(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if origin is Union or origin is types.UnionType:
        args = typing.get_args(tp)
        if value is None:
            if type(None) in args:
                return None
            raise DecodeError(f"{where}: null not allowed")
        inner = [a for a in args if a is not type(None)]
        errors = []
        for a in inner:
            try:
                return _convert(a, value, where)
            except DecodeError as exc:
                errors.append(str(exc))
        raise DecodeError(errors[0])
    if origin is tuple:
        if not isinstance(value, list):
            raise DecodeError(f"{where}: expected a list")
        (item_type, _ellipsis) = typing.get_args(tp)
        return tuple(_convert(item_type, v, where) for v in value)
    if dataclasses.is_dataclass(tp):
        return from_json(tp, value)  # type: ignore[arg-type]
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise DecodeError(f"{where}: expected a number")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise DecodeError(f"{where}: expected an integer")
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise DecodeError(f"{where}: expected true or false")
    if tp is str:
        if isinstance(value, str):
            return value
        raise DecodeError(f"{where}: expected a string")
    if tp is Any:
        return value
    raise DecodeError(f"{where}: unsupported type {tp!r}")
