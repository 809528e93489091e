"""The declared wire form (gputui.protocol.spec): the order of the keys, what is
left out, inline values, defaults on the wire, and the checks at declaration."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gputui.protocol import spec
from gputui.protocol.fields import SchemaError


@spec.value("inner")
@dataclass(frozen=True)
class Inner(spec.Wire):
    n: int = spec.integer(0, hi=9)


@spec.value("part")
@dataclass(frozen=True)
class Part(spec.Wire):
    a: int = 0
    b: str | None = None


@spec.message("example")
@dataclass(frozen=True, kw_only=True)
class Example(spec.Wire):
    part: Part = spec.inline(Part, factory=Part)
    first: int = spec.integer(missing=7)
    maybe: str | None = spec.text(None, 8, key="m", omit_none=True)
    inner: Inner | None = spec.nested(Inner)
    names: tuple[str, ...] = ()
    flag: bool = spec.flag(omit_empty=True)
    last: float = 0.0


def test_keys_sent_always_come_first_then_those_left_out_when_empty() -> None:
    full = Example(first=1, maybe="x", inner=Inner(2), names=("a",), flag=True, last=1.5)
    assert list(full.to_wire()) == [
        *("v", "type", "a", "b", "first", "inner", "names", "last"),
        *("m", "flag"),
    ]
    bare = Example(first=1).to_wire()
    assert "m" not in bare and "flag" not in bare and bare["inner"] is None
    assert bare["names"] == [] and bare["type"] == "example"


def test_a_round_trip_and_the_wires_own_default() -> None:
    msg = Example(part=Part(3, "p"), first=4, maybe="m", inner=Inner(5), names=("n",), flag=True)
    assert Example.from_wire(msg.to_wire()) == msg
    # the class requires ``first``; the wire has it 7 when absent
    assert Example.from_wire({}).first == 7


def test_an_error_names_the_field_by_its_wire_key_and_path() -> None:
    with pytest.raises(SchemaError, match=r"^example\.m: string of 9 characters"):
        Example.from_wire({"m": "x" * 9})
    with pytest.raises(SchemaError, match=r"^example\.inner\.n: 10 is outside 0\.\.9"):
        Example.from_wire({"inner": {"n": 10}})
    with pytest.raises(SchemaError, match=r"^example\.a: expected an integer"):
        Example.from_wire({"a": "x"})  # an inline value's keys are the message's own


def test_a_value_read_first_inside_another_keeps_its_own_name() -> None:
    @spec.value("alone")
    @dataclass(frozen=True)
    class Alone(spec.Wire):
        k: int = 0

    @spec.value("outer")
    @dataclass(frozen=True)
    class Outer(spec.Wire):
        alone: Alone | None = spec.nested(Alone)

    with pytest.raises(SchemaError, match=r"^outer\.alone\.k:"):
        Outer.from_wire({"alone": {"k": -1}})
    with pytest.raises(SchemaError, match=r"^alone\.k:"):
        Alone.from_wire({"k": -1})


def test_a_field_whose_kind_cannot_follow_from_its_annotation_is_refused() -> None:
    with pytest.raises(TypeError, match="needs a wire spec"):

        @spec.value("bad")
        @dataclass(frozen=True)
        class Bad(spec.Wire):
            parts: tuple[int, ...] = ()
