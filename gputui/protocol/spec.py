"""The typed messages' wire form, declared once per field (standard library only).

A typed message is a frozen dataclass whose fields say how each is read from
and written to the wire: its key, its checked reader from
:mod:`gputui.protocol.fields` with its limits, its default when the key is
absent, and whether it is left out when empty.  :func:`message` (a frame, with
``v`` and ``type``) and :func:`value` (an object inside one) compile the
class's ``from_wire`` and ``to_wire`` from them, once, at their first use (as
``dataclasses`` compiles ``__init__``, but only for the classes a process
uses)::

    @spec.message(m.PONG)
    @dataclass(frozen=True)
    class Pong(spec.Wire):
        t: float = spec.number(0.0, hi=MAX_TIME_S)  # a field kind with its limits
        seen: int = 0  # a plain int, float, bool, str or tuple of str: the reader's limits
        note: str | None = spec.text(None, 256, key="n", omit_none=True)

A field declares its kind in its metadata (the functions below), or, where its
annotation is ``int``, ``float``, ``bool``, ``str`` (or one of those ``| None``)
or ``tuple[str, ...]`` and its reader's default limits fit, nothing: its kind
follows from the annotation, its default from the field's.  (Type checkers
take a field kind for a default: a required field that follows one declares
its kind too.)

``from_wire(obj, where)`` checks that ``obj`` is an object, reads every field in
the fields' order with its reader (an error names the field's path:
``where.key``, ``where.key[i]`` inside a list), and ignores keys it does not
know.  ``to_wire()`` writes the keys always sent first, in the fields' order,
then those left out when empty (None, or any false value), in the fields'
order.  A class that defines ``from_wire`` or ``to_wire`` itself keeps it (a
fast path, a check across fields) and can call the compiled ones through
:func:`decode`.

The first argument of every field kind is its default (absent: the field is
required); ``missing`` gives the wire a default of its own where the class
requires the field but the wire has always allowed it to be absent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

from gputui.protocol import fields as f
from gputui.protocol.messages import PROTOCOL_VERSION
from gputui.protocol.value import ValueBase, value_class

_T = TypeVar("_T")
_W = TypeVar("_W", bound="Wire")

#: the default of a required field
REQUIRED: Any = f.MISSING
_SAME: Any = object()
#: the metadata key that holds a field's :class:`FieldSpec`
_KEY = "gputui.wire"

Reader = Callable[..., Any]


@value_class
class FieldSpec(ValueBase):
    """How one field is read (``read(obj, key, where, *args)``) and written:
    ``write`` is an expression of ``{v}`` (the field's value); ``then``, keys
    derived from the value written right after the field (property names, or
    a function of the message that returns them as a dict); ``omit`` is None
    (always sent), ``"none"`` or ``"empty"``; ``inline``, a nested message
    whose keys stand in this one's object rather than under ``key``."""

    read: Reader
    args: tuple[Any, ...] = ()
    key: str | None = None
    write: str = "{v}"
    omit: str | None = None
    then: tuple[str, ...] | Callable[[Any], dict[str, Any]] = ()
    inline: bool = False


class Wire(ValueBase):
    """A value with a wire form; :func:`message` and :func:`value` compile its
    methods."""

    WHERE: ClassVar[str] = ""
    TYPE: ClassVar[str | None] = None

    @classmethod
    def from_wire(cls: type[_W], obj: Any, where: str = "") -> _W:
        """The value of a JSON object, every field checked (a SchemaError
        names the field)."""
        raise NotImplementedError  # compiled per class

    def to_wire(self) -> dict[str, Any]:
        """The JSON object (with ``v`` and ``type`` for a message)."""
        raise NotImplementedError  # compiled per class


# -- field kinds ----------------------------------------------------------------------------------
def field(
    read: Reader,
    *args: Any,
    default: Any = REQUIRED,
    factory: Callable[[], Any] | None = None,
    key: str | None = None,
    write: str | Callable[[Any], Any] = "{v}",
    omit_none: bool = False,
    omit_empty: bool = False,
    then: tuple[str, ...] | Callable[[Any], dict[str, Any]] = (),
    inline: bool = False,
) -> Any:
    """A field read by ``read(obj, key, where, *args)``: the dataclass field
    with its spec in the metadata.  ``write``: an expression of ``{v}``, or a
    function of the value."""
    omit = "none" if omit_none else "empty" if omit_empty else None
    spec = FieldSpec(read, args, key, write, omit, then, inline)  # type: ignore[arg-type]
    meta = {_KEY: spec}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    if default is REQUIRED:
        return dataclasses.field(metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _wire_default(default: Any, missing: Any) -> Any:
    return default if missing is _SAME else missing


def _ranged(read: Reader, lo: Any, hi: Any, doc: str) -> Callable[..., Any]:
    def kind(
        default: Any = REQUIRED, lo: Any = lo, hi: Any = hi, *, missing: Any = _SAME, **kw: Any
    ) -> Any:
        return field(read, lo, hi, _wire_default(default, missing), default=default, **kw)

    kind.__doc__ = doc
    return kind


#: an int in [lo, hi] (a default of None: None when absent or null)
integer = _ranged(f.integer, 0, f.MAX_COUNT, "An int in [lo, hi] (default None: optional).")
#: a finite float in [lo, hi] (ints accepted)
number = _ranged(f.number, 0.0, f.MAX_SECONDS, "A finite float in [lo, hi] (ints accepted).")


def text(
    default: Any = REQUIRED, limit: int = f.MAX_STR, *, missing: Any = _SAME, **kw: Any
) -> Any:
    """A string of at most ``limit`` characters."""
    return field(f.text, limit, _wire_default(default, missing), default=default, **kw)


def flag(default: bool = False, **kw: Any) -> Any:
    """true or false (absent or null: the default)."""
    return field(f.flag, default, default=default, **kw)


def ident(**kw: Any) -> Any:
    """A request or capture id (absent or null: None)."""
    return field(f.ident, default=None, **kw)


def texts(
    max_items: int = 1000, limit: int = f.MAX_STR, *, required: bool = False, **kw: Any
) -> Any:
    """A list of strings, as a tuple (absent or null: empty; ``required``: the
    class has no default, the wire does)."""
    default = REQUIRED if required else ()
    return field(f.texts, max_items, limit, default=default, write="list({v})", **kw)


def _seconds(obj: Mapping[str, Any], key: str, where: str, max_items: int) -> dict[str, float]:
    if key not in obj:
        return {}  # a new one each time
    return f.seconds_map(obj, key, where, max_items)  # type: ignore[no-any-return]


def _seconds_or_empty(
    obj: Mapping[str, Any], key: str, where: str, max_items: int
) -> dict[str, float]:
    value = f.seconds_map(obj, key, where, max_items, default=None)
    return {} if value is None else value  # type: ignore[no-any-return]


def seconds(
    max_items: int = 1024, *, default: Any = dict, required: bool = False, **kw: Any
) -> Any:
    """A ``{name: seconds}`` object (see :func:`fields.seconds_map`): absent or
    null, empty; ``default=None``: None when absent or null; ``required``: the
    class has no default, the wire's is empty (null is an error)."""
    if default is None:
        return field(f.seconds_map, max_items, None, default=None, write="dict({v})", **kw)
    if required:
        return field(_seconds, max_items, write="dict({v})", **kw)
    return field(_seconds_or_empty, max_items, factory=dict, write="dict({v})", **kw)


def _nested(
    obj: Mapping[str, Any],
    key: str,
    where: str,
    cls: type[Wire],
    factory: Callable[[], Any] | None,
) -> Any:
    value = f.child(obj, key, where)
    if value is None:
        return None if factory is None else factory()
    return cls.from_wire(value, f"{where}.{key}")


def nested(
    cls: type[Wire],
    *,
    factory: Callable[[], Any] | None = None,
    required: bool = False,
    **kw: Any,
) -> Any:
    """An object read by ``cls`` (absent or null: None, or ``factory()``;
    ``required``: the class has no default, the wire's is None)."""
    if factory is not None:
        return field(_nested, cls, factory, factory=factory, write="{v}.to_wire()", **kw)
    write = "None if {v} is None else {v}.to_wire()"
    default = REQUIRED if required else None
    return field(_nested, cls, None, default=default, write=write, **kw)


def _rows(
    obj: Mapping[str, Any], key: str, where: str, cls: type[Wire], limit: int
) -> tuple[Any, ...]:
    return tuple(
        cls.from_wire(item, f"{where}.{key}[{i}]")
        for i, item in enumerate(f.items(obj, key, where, limit))
    )


def rows(cls: type[Wire], limit: int = f.MAX_ITEMS, *, required: bool = False, **kw: Any) -> Any:
    """A list of objects read by ``cls``, as a tuple (absent or null: empty;
    ``required``: the class has no default, the wire does)."""
    default = REQUIRED if required else ()
    return field(_rows, cls, limit, default=default, write="[x.to_wire() for x in {v}]", **kw)


def _inline(obj: Mapping[str, Any], key: str, where: str, cls: type[Wire]) -> Any:
    return cls.from_wire(obj, where)


def inline(cls: type[Wire], *, factory: Callable[[], Any]) -> Any:
    """A value of ``cls`` whose keys stand in this message's own object."""
    return field(_inline, cls, factory=factory, inline=True)


# -- compiling ------------------------------------------------------------------------------------
def message(kind: str) -> Callable[[type[_T]], type[_T]]:
    """Declares a frame: ``from_wire`` (``where`` defaults to its type) and
    ``to_wire`` (``v`` and ``type`` first)."""
    return lambda cls: _declare(cls, kind, kind)


def value(where: str = "") -> Callable[[type[_T]], type[_T]]:
    """Declares an object inside a frame; ``where`` names it in errors when the
    caller does not."""
    return lambda cls: _declare(cls, where, None)


def decode(cls: type[_T], obj: Any, where: str) -> _T:
    """``cls``'s compiled ``from_wire`` (for a class that wraps it)."""
    return cls.__wire_decode__(cls, obj, where)  # type: ignore[attr-defined, no-any-return]


#: the kind of a field that declares none, by its annotation: its reader with
#: the reader's own limits, and the field's default
_BY_TYPE: dict[str, Callable[[Any], Any]] = {
    "int": integer,
    "int | None": integer,
    "float": number,
    "float | None": number,
    "str": text,
    "str | None": text,
    "bool": flag,
    "tuple[str, ...]": lambda default: texts(required=default is REQUIRED),
}


def _specs(cls: type) -> list[tuple[str, str, FieldSpec]]:
    out = []
    for fld in dataclasses.fields(cls):  # type: ignore[arg-type]
        spec = fld.metadata.get(_KEY)
        if spec is None:
            kind = _BY_TYPE.get(fld.type) if isinstance(fld.type, str) else None
            if kind is None:
                raise TypeError(f"{cls.__name__}.{fld.name}: a {fld.type} needs a wire spec")
            default = REQUIRED if fld.default is dataclasses.MISSING else fld.default
            spec = kind(default).metadata[_KEY]
        out.append((fld.name, spec.key or fld.name, spec))
    return out


def _declare(cls: type[_T], where: str, kind: str | None) -> type[_T]:
    """Checks the fields' specs now (a field without one fails the import) and
    puts stubs in place of the methods: the first call of any compiles them
    all (most processes use a few of the classes)."""
    specs = _specs(cls)
    own = {name for name in ("from_wire", "to_wire") if name in cls.__dict__}
    target: Any = cls

    done: list[bool] = []

    def compile_now() -> None:
        if not done:  # once: a stub kept by a caller (a bound method) then only forwards
            _compile(target, specs, where, kind, own)
            done.append(True)

    _DECLARED.append((compile_now, done))

    def decode_stub(cls_: Any, obj: Any, where: str = where) -> Any:
        compile_now()  # with the class's own default ``where``, not this call's
        return target.__wire_decode__(cls_, obj, where)

    def body_stub(self: Any) -> dict[str, Any]:
        compile_now()
        return self.__wire_body__()  # type: ignore[no-any-return]

    def encode_stub(self: Any) -> dict[str, Any]:
        compile_now()
        return self.__wire_encode__()  # type: ignore[no-any-return]

    _install(target, decode_stub, body_stub, encode_stub, own)
    target.WHERE = where
    target.TYPE = kind
    return cls


#: every declared class's compiler, and whether it ran (:func:`compile_declared`)
_DECLARED: list[tuple[Callable[[], None], list[bool]]] = []


def uncompiled() -> int:
    """How many declared classes no call has compiled yet."""
    return sum(1 for _, done in _DECLARED if not done)


def compile_declared() -> int:
    """Compile the methods of every class declared so far that no call has
    compiled yet; returns how many were declared.  For a process that must not
    exec source later: the hook's I/O thread, at its start, so that nothing it
    sends as the job exits compiles then (an exec of a string after an
    unhandled KeyboardInterrupt makes CPython forget it: the job would exit 1,
    not by SIGINT)."""
    for compile_now, _ in list(_DECLARED):
        compile_now()
    return len(_DECLARED)


def _install(cls: Any, decoder: Any, body: Any, encoder: Any, own: set[str]) -> None:
    cls.__wire_decode__ = decoder
    cls.__wire_body__ = body
    cls.__wire_encode__ = encoder
    if "from_wire" not in own:
        cls.from_wire = classmethod(decoder)
    if "to_wire" not in own:
        cls.to_wire = encoder


def _compile(
    cls: Any, specs: list[tuple[str, str, FieldSpec]], where: str, kind: str | None, own: set[str]
) -> None:
    """Writes the class's decoder and encoders out and compiles them (as
    ``dataclasses`` writes ``__init__``)."""
    ns: dict[str, Any] = {"_typed": f.typed, "_where": where}
    reads = []
    for i, (name, key, spec) in enumerate(specs):
        ns[f"_r{i}"] = spec.read
        args = "".join(f", _a{i}_{j}" for j in range(len(spec.args)))
        ns.update({f"_a{i}_{j}": arg for j, arg in enumerate(spec.args)})
        reads.append(f"{name}=_r{i}(obj, {key!r}, where{args})")
    source = [
        "def __wire_decode__(cls, obj, where=_where):",
        "    obj = _typed(obj, where)",
        f"    return cls({', '.join(reads)})",
        "def __wire_body__(self):",
        *_encoder(specs, ns, "{"),
        "def __wire_encode__(self):",
        *_encoder(specs, ns, f"{{'v': {PROTOCOL_VERSION!r}, 'type': {kind!r}, " if kind else "{"),
    ]
    exec("\n".join(source), ns)  # the source is built above from the fields' specs
    _install(cls, ns["__wire_decode__"], ns["__wire_body__"], ns["__wire_encode__"], own)


def _encoder(specs: list[tuple[str, str, FieldSpec]], ns: dict[str, Any], head: str) -> list[str]:
    """The body of a ``to_wire``: one dict display of the keys always sent, then
    one statement per key left out when empty."""
    always, later = [], []
    for i, (name, key, spec) in enumerate(specs):
        attr = f"self.{name}"
        if callable(spec.write):
            ns[f"_w{i}"] = spec.write
            written = f"_w{i}({attr})"
        else:
            written = spec.write.format(v=attr)
        if spec.inline:
            always.append(f"**{attr}.__wire_body__()")
        elif spec.omit is None:
            always.append(f"{key!r}: {written}")
        else:
            test = f"{attr} is not None" if spec.omit == "none" else attr
            later += [f"    if {test}:", f"        out[{key!r}] = {written}"]
        if callable(spec.then):
            ns[f"_t{i}"] = spec.then
            always.append(f"**_t{i}(self)")
        else:
            always += [f"{extra!r}: self.{extra}" for extra in spec.then]
    return [f"    out = {head}{', '.join(always)}}}", *later, "    return out"]
