"""``@value_class``: a frozen dataclass whose methods are shared, not compiled
(standard library only: every room's values derive from it, the protocol's and
the trace math's too).

``dataclass`` writes the source of each class's ``__init__``, ``__repr__``,
``__eq__`` and ``__hash__`` (and of a frozen class's ``__setattr__`` and
``__delattr__``) and compiles it when the class is made: about half a
millisecond for a small class, more with many fields, at every start-up.  A
class made a few times a run (a trace's metrics and summary, the evidence, a
capture's result, the device rules' values) takes an ``__init__``, a
``__setattr__`` and a ``__delattr__`` written once here instead, and the
equality, hash and repr of :class:`ValueBase`, which it inherits.  Compiled,
the classes that load with ``gputui analyze`` took half of its imports
(docs/benchmarks.md, "Start-up of ``gputui analyze``").  The classes are dataclasses as before
(``dataclasses.fields``, ``replace``, frozen, pickled to and from a rank's
worker); their constructor takes the same arguments, and a frozen dataclass may
derive from one.  A class with ``__post_init__``, fields outside ``__init__``
or keyword-only fields is refused: use ``dataclass``.

Hot classes (the snapshot, its devices, processes and host: made per refresh,
per process; a step's record and a memory sample: made per step in the job)
keep ``dataclass``'s compiled ``__init__``, which is faster per call.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # a type checker's, never loaded (the protocol loads in any job)
    from typing_extensions import dataclass_transform
elif sys.version_info >= (3, 11):
    from typing import dataclass_transform
else:

    def dataclass_transform(**_kwargs: Any) -> Callable[[Any], Any]:
        return lambda decorated: decorated


_T = TypeVar("_T", bound=type)
_MISSING = dataclasses.MISSING


class ValueBase:
    """Equality, hashing and repr over the dataclass fields, for every value class.

    Written once instead of generated per class: ``dataclass`` compiles an
    ``__eq__``, ``__hash__`` and ``__repr__`` for each class at import, which was
    most of the snapshot model's import time, and that import is on ``--once``'s
    path.  The model re-exports it: other rooms' value classes derive from it.
    """

    __slots__ = ()
    __dataclass_fields__: dict[str, Any]

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__dataclass_fields__)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, ValueBase)
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__dataclass_fields__)
        return f"{type(self).__name__}({fields})"


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
def value_class(cls: _T) -> _T:
    """``cls`` as a frozen dataclass over ValueBase, its ``__init__``,
    ``__setattr__`` and ``__delattr__`` shared."""
    if not issubclass(cls, ValueBase):
        raise TypeError(f"{cls.__name__}: a value class derives from ValueBase")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__}: __post_init__ needs dataclass's own __init__")
    # frozen by the shared __setattr__ and __delattr__ below (dataclass would
    # compile a pair for the class, unless a base is frozen, where it must);
    # __init__ sets fields through object's
    frozen_base = any(_frozen(base) for base in cls.__mro__[1:])
    if not cls.__doc__:
        # dataclass would write one from inspect.signature, which for an __init__
        # it did not make reads the builtin's text signature through tokenize:
        # a millisecond of every command's start for a class without a docstring
        fields = inspect.get_annotations(cls)
        cls.__doc__ = f"{cls.__name__}({', '.join(fields)})"
    made: Any = dataclasses.dataclass(eq=False, repr=False, init=False, frozen=frozen_base)(cls)
    made.__setattr__ = _frozen_setattr
    made.__delattr__ = _frozen_delattr
    # and said to be frozen, as it is: a frozen dataclass may derive from it
    made.__dataclass_params__.frozen = True
    plan = []
    for f in dataclasses.fields(made):
        if not f.init or f.kw_only:
            raise TypeError(f"{cls.__name__}.{f.name}: use dataclass for init=False, kw_only")
        plan.append((f.name, f.default, f.default_factory))
    made.__init__ = _shared_init(made.__name__, tuple(plan))
    return cls  # the same class, made a dataclass in place


def _frozen(cls: type) -> bool:
    params = cls.__dict__.get("__dataclass_params__")
    return params is not None and bool(params.frozen)


def _frozen_setattr(self: Any, name: str, value: Any) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self: Any, name: str) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


def _shared_init(name: str, plan: tuple[tuple[str, Any, Any], ...]) -> Callable[..., None]:
    """An ``__init__`` taking ``plan``'s fields in order, positionally or by name,
    each missing one its default (or its factory's value), as dataclass's does."""
    names = frozenset(field for field, _, _ in plan)
    count = len(plan)
    setter = object.__setattr__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) > count:
            raise TypeError(
                f"{name}() takes {count} positional arguments but {len(args)} were given"
            )
        if kwargs and not names.issuperset(kwargs):
            unknown = sorted(set(kwargs) - names)[0]
            raise TypeError(f"{name}() got an unexpected keyword argument {unknown!r}")
        for position, (field, default, factory) in enumerate(plan):
            if position < len(args):
                if field in kwargs:
                    raise TypeError(f"{name}() got multiple values for argument {field!r}")
                value = args[position]
            elif field in kwargs:
                value = kwargs[field]
            elif default is not _MISSING:
                value = default
            elif factory is not _MISSING:
                value = factory()
            else:
                raise TypeError(f"{name}() missing required argument: {field!r}")
            setter(self, field, value)

    return __init__
