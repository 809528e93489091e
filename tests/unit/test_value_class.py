"""``@value_class``: a frozen dataclass with shared methods behaves as one made
by ``dataclass(frozen=True)``; what it cannot do it refuses."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from dataclasses import dataclass, field
from typing import Any

import pytest

from gputui.protocol.value import ValueBase, value_class


@value_class
class Shared(ValueBase):
    """A value with the shared methods."""

    name: str
    count: int = 0
    tags: tuple[str, ...] = ()
    extra: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Compiled:
    """The same fields, from dataclass itself (the control)."""

    name: str
    count: int = 0
    tags: tuple[str, ...] = ()
    extra: dict[str, int] = field(default_factory=dict)


CALLS: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    (("a",), {}),
    (("a", 3), {}),
    (("a",), {"tags": ("x",)}),
    ((), {"name": "b", "count": 2, "extra": {"k": 1}}),
    (("a", 1, ("t",), {"k": 2}), {}),
]


@pytest.mark.parametrize(("args", "kwargs"), CALLS, ids=[str(i) for i in range(len(CALLS))])
def test_it_takes_and_holds_what_a_dataclass_does(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    shared, compiled = Shared(*args, **kwargs), Compiled(*args, **kwargs)
    assert dataclasses.asdict(shared) == dataclasses.asdict(compiled)
    assert repr(shared) == repr(compiled).replace("Compiled(", "Shared(")
    assert shared == Shared(*args, **kwargs) and shared != Shared("other")


def test_defaults_from_a_factory_are_not_shared() -> None:
    assert Shared("a").extra is not Shared("a").extra


def test_it_is_frozen_hashable_and_copies() -> None:
    value = Shared("a", 1, ("t",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        value.count = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del value.count  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        value.other = 1  # type: ignore[attr-defined]
    assert dataclasses.replace(value, count=5) == Shared("a", 5, ("t",))
    assert copy.deepcopy(value) == value
    assert pickle.loads(pickle.dumps(value)) == value
    assert [f.name for f in dataclasses.fields(Shared)] == ["name", "count", "tags", "extra"]
    assert hash(Shared("a", tags=("t",), extra=None)) == hash(  # type: ignore[arg-type]
        Shared("a", 0, ("t",), None)  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((), {}, "missing required argument: 'name'"),
        (("a",), {"name": "b"}, "multiple values for argument 'name'"),
        (("a",), {"colour": "red"}, "unexpected keyword argument 'colour'"),
        (("a", 1, (), {}, 5), {}, "takes 4 positional arguments but 5 were given"),
    ],
    ids=["missing", "twice", "unknown", "too-many"],
)
def test_a_bad_call_is_a_type_error_as_with_a_dataclass(
    args: tuple[Any, ...], kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        Shared(*args, **kwargs)
    with pytest.raises(TypeError):  # the control
        Compiled(*args, **kwargs)


def test_what_it_cannot_do_is_refused() -> None:
    with pytest.raises(TypeError, match="derives from ValueBase"):

        @value_class
        class Plain:
            """Not a value."""

            x: int

    with pytest.raises(TypeError, match="__post_init__"):

        @value_class
        class Checked(ValueBase):
            """Checks in __post_init__."""

            x: int

            def __post_init__(self) -> None:
                pass

    with pytest.raises(TypeError, match="init=False"):

        @value_class
        class Hidden(ValueBase):
            """A field outside __init__."""

            x: int = field(default=0, init=False)


# a wire message may extend a value class with dataclass's compiled methods (a
# hot one), and a value class may extend either
@dataclass(frozen=True)
class Hot(Shared):
    more: int = 1


@value_class
class Cold(Hot):
    last: str = ""


@value_class
class Colder(Shared):
    last: str = ""


def test_frozen_dataclasses_derive_from_it_and_it_from_them() -> None:
    assert Shared.__dataclass_params__.frozen  # type: ignore[attr-defined]
    for made, fields in ((Hot("a", more=2), 5), (Cold("a", last="z"), 6), (Colder("a"), 5)):
        assert len(dataclasses.fields(made)) == fields
        with pytest.raises(dataclasses.FrozenInstanceError):
            made.name = "b"  # type: ignore[misc]
        assert pickle.loads(pickle.dumps(made)) == made
        assert dataclasses.replace(made, name="b").name == "b"
    assert Cold("a", 1, (), {}, 3, "z") == Cold("a", 1, (), {}, 3, "z") != Cold("a", last="y")
    assert Colder("a", last="y") != Shared("a")  # another class: never equal


def test_a_class_without_a_docstring_is_made_without_inspect(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """dataclass writes a missing docstring from ``inspect.signature``, which reads
    the inherited builtin ``__init__``'s text through tokenize (a millisecond a
    class at every start): the value class names its fields itself."""
    import inspect

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("inspect.signature called")

    monkeypatch.setattr(inspect, "signature", refuse)

    @value_class
    class Bare(ValueBase):
        first: int
        second: str = ""

    assert Bare.__doc__ == "Bare(first, second)"
    assert Bare(1).second == ""

    @value_class
    class Told(ValueBase):
        """Its own words."""

        only: int

    assert Told.__doc__ == "Its own words."
