"""Typed messages of the hook's Python stack sampler (standard library only).

The hook samples the training thread's Python stack about 100 times a second
and weighs each sample by the time since the previous one (``docs/hook.md``,
"Python stack sampler").  It sends ``python_profile`` to subscribed viewers
about every 2 s, once right after a subscribe, and in answer to
``get_python_profile``.  The status's ``sampler`` says whether it runs; a hook
older than the sampler sends neither (a viewer shows the profile as
unavailable), and a viewer older than it ignores both, as the protocol promises
for unknown types and keys.

Every time is seconds of the training thread's wall time, as sampled.  File and
function names are the job's own (untrusted): viewers clean them before
display.  Every list and string is bounded, so a profile always fits a frame.

See :mod:`gputui.protocol.schema` for the conventions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gputui.protocol import fields as f
from gputui.protocol import messages as m
from gputui.protocol.fields import MAX_TIME_S, SchemaError, header, typed

# -- vocabulary ------------------------------------------------------------------------------
#: a frame's code: the job's own (``user``), torch's package (``torch``), or
#: another library or the standard library (``lib``); ``other`` is the row that
#: aggregates functions past the hook's table bound
KIND_USER = "user"
KIND_TORCH = "torch"
KIND_LIB = "lib"
KIND_OTHER = "other"
KINDS = (KIND_USER, KIND_TORCH, KIND_LIB, KIND_OTHER)

#: the sampler's states (the status's ``sampler.state``)
SAMPLER_ON = "on"
SAMPLER_OFF = "off"  # turned off (GPUTUI_SAMPLER=0) or stopped with the hook
SAMPLER_FAILED = "failed"  # an error stopped it (the reason says which)
SAMPLER_STATES = frozenset({SAMPLER_ON, SAMPLER_OFF, SAMPLER_FAILED})

# -- bounds (the hook sends fewer; a viewer refuses more) ---------------------------------------
MAX_FILENAME = 512  # characters: the end of a longer path is kept
MAX_FUNCTION = 256
MAX_PHASE = 256
MAX_ROWS = 256  # functions, and lines, in one profile
MAX_ROW_PHASES = 64
MAX_NOTES = 16
MAX_LINE = 1 << 31
#: frames of one function's call path (the hook sends at most 32), and entries
#: of a profile's table of path frames
MAX_PATH = 64
MAX_PATH_FRAMES = 4096
_MAX_SECONDS = f.MAX_SECONDS


def clip_file(name: str) -> str:
    """A file name within :data:`MAX_FILENAME` characters (its end is kept)."""
    return name if len(name) <= MAX_FILENAME else name[-MAX_FILENAME:]


def _kind(obj: Mapping[str, Any], where: str) -> str:
    kind = f.text(obj, "kind", where, 16, default=KIND_USER)
    if kind not in KINDS:
        raise SchemaError(f"{where}.kind", f"expected one of {', '.join(KINDS)}, got {kind[:16]!r}")
    return kind  # type: ignore[no-any-return]


def _place(obj: Any, where: str) -> dict[str, Any]:
    """The fields every row names its code by: file, function, line, kind."""
    obj = typed(obj, where)
    return {
        "file": f.text(obj, "file", where, MAX_FILENAME),
        "function": f.text(obj, "function", where, MAX_FUNCTION, default=""),
        "line": f.integer(obj, "line", where, 0, MAX_LINE, default=0),
        "kind": _kind(obj, where),
    }


def _rows(obj: Mapping[str, Any], key: str, where: str, limit: int, parse: Any) -> tuple[Any, ...]:
    """The list ``key`` of ``obj``, each item read by ``parse(item, where)``."""
    return tuple(
        parse(x, f"{where}.{key}[{i}]") for i, x in enumerate(f.items(obj, key, where, limit))
    )


@dataclass(frozen=True)
class SamplerInfo:
    """The status's ``sampler``: whether the job's Python stack is sampled."""

    state: str = SAMPLER_ON
    interval_s: float | None = None  # the sampling period aimed at
    samples: int = 0  # samples taken since the hook started
    reason: str | None = None  # why it is off or failed

    @property
    def on(self) -> bool:
        return self.state == SAMPLER_ON

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any], where: str = "sampler") -> SamplerInfo:
        state = f.text(obj, "state", where, 32)
        if state not in SAMPLER_STATES:
            raise SchemaError(f"{where}.state", f"unknown state {state[:32]!r}")
        return cls(
            state=state,
            interval_s=f.opt_number(obj, "interval_s", where, hi=60.0),
            samples=f.integer(obj, "samples", where, default=0),
            reason=f.opt_text(obj, "reason", where, 1024),
        )

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"state": self.state, "samples": self.samples}
        if self.interval_s is not None:
            out["interval_s"] = self.interval_s
        if self.reason is not None:
            out["reason"] = self.reason
        return out


@dataclass(frozen=True)
class PathFrame:
    """One frame of a call path: a function stopped at the line of its call
    to the next frame (an entry of :attr:`PythonProfile.frames`)."""

    file: str
    function: str
    line: int = 0
    kind: str = KIND_USER

    @classmethod
    def from_wire(cls, obj: Any, where: str) -> PathFrame:
        return cls(**_place(obj, where))

    def to_wire(self) -> dict[str, Any]:
        return {"file": self.file, "function": self.function, "line": self.line, "kind": self.kind}


@dataclass(frozen=True)
class ProfileFunction:
    """One function (one code object) of the training thread's stack.

    ``self_s``: time it was the innermost frame (gputui's own frames are
    transparent); ``total_s``: time it was anywhere on the stack (counted once
    per sample, however deep it recurses); ``phases_s``: its self time per
    step phase.  ``site_s`` (the job's own code only): time it was the
    innermost frame of the job's code, with the library and torch code it
    called: where the job can change something (``augment`` calling numpy
    has the numpy time as site time, numpy's functions have it as self
    time); ``site_phases_s``: that per phase.  ``line`` is its hottest line
    (by site time, then self time), ``first_line`` the line of its ``def``.
    ``path``: its callers on the hottest stack through it, outermost first,
    as indices into the profile's ``frames`` (each at the line of its call);
    ``path_cut``: outer frames of that stack left out (absent from a hook
    that predates paths: both empty).  ``outside_s``: the part of its self
    time whose sample was in code outside torch (see
    :attr:`PythonProfile.outside_phases_s`); 0 from a hook that predates it."""

    file: str
    function: str
    kind: str = KIND_USER
    line: int = 0
    first_line: int = 0
    self_s: float = 0.0
    total_s: float = 0.0
    phases_s: dict[str, float] = field(default_factory=dict)
    site_s: float = 0.0
    site_phases_s: dict[str, float] = field(default_factory=dict)
    path: tuple[int, ...] = ()
    path_cut: int = 0
    outside_s: float = 0.0

    @property
    def time_s(self) -> float:
        """The time this function accounts for: its site time for the job's
        own code, else its self time (what the profile is ordered by)."""
        return max(self.self_s, self.site_s)

    @property
    def label(self) -> str:
        """``function (file:line)`` with the full path: display code shortens
        and cleans it."""
        return f"{self.function} ({self.file}:{self.line})"

    @classmethod
    def from_wire(cls, obj: Any, where: str) -> ProfileFunction:
        place = _place(obj, where)
        return cls(
            **place,
            first_line=f.integer(obj, "first_line", where, 0, MAX_LINE, default=0),
            self_s=f.number(obj, "self_s", where, default=0.0),
            total_s=f.number(obj, "total_s", where, default=0.0),
            phases_s=_phases(obj, "phases_s", where, MAX_ROW_PHASES),
            site_s=f.number(obj, "site_s", where, default=0.0),
            site_phases_s=_phases(obj, "site_phases_s", where, MAX_ROW_PHASES),
            path=_indices(obj, "path", where),
            path_cut=f.integer(obj, "path_cut", where, 0, MAX_LINE, default=0),
            outside_s=f.number(obj, "outside_s", where, default=0.0),
        )

    def to_wire(self) -> dict[str, Any]:
        out = {
            "file": self.file,
            "function": self.function,
            "kind": self.kind,
            "line": self.line,
            "first_line": self.first_line,
            "self_s": self.self_s,
            "total_s": self.total_s,
            "phases_s": dict(self.phases_s),
            "site_s": self.site_s,
            "site_phases_s": dict(self.site_phases_s),
        }
        if self.path:
            out["path"] = list(self.path)
        if self.path_cut:
            out["path_cut"] = self.path_cut
        if self.outside_s:
            out["outside_s"] = self.outside_s
        return out


@dataclass(frozen=True)
class ProfileLine:
    """One line of one function: the line a blocked call was made from (a
    ``loss.item()`` waiting for the GPU is time at that line).  ``site_s`` as
    for :class:`ProfileFunction`: the line of the job's code that called the
    library or torch code the time went to."""

    file: str
    line: int
    function: str
    kind: str = KIND_USER
    self_s: float = 0.0
    total_s: float = 0.0
    site_s: float = 0.0

    @classmethod
    def from_wire(cls, obj: Any, where: str) -> ProfileLine:
        place = _place(obj, where)
        return cls(
            **place,
            self_s=f.number(obj, "self_s", where, default=0.0),
            total_s=f.number(obj, "total_s", where, default=0.0),
            site_s=f.number(obj, "site_s", where, default=0.0),
        )

    def to_wire(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "function": self.function,
            "kind": self.kind,
            "self_s": self.self_s,
            "total_s": self.total_s,
            "site_s": self.site_s,
        }


def _indices(obj: Mapping[str, Any], key: str, where: str) -> tuple[int, ...]:
    """A list of frame-table indices (checked against the table by the profile)."""
    value = f.items(obj, key, where, MAX_PATH)
    for i, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, int) or not 0 <= item < MAX_PATH_FRAMES:
            raise SchemaError(f"{where}.{key}[{i}]", f"expected a frame index, got {item!r:.40}")
    return tuple(value)


def _phases(obj: Mapping[str, Any], key: str, where: str, max_items: int) -> dict[str, float]:
    value = f.seconds_map(obj, key, where, max_items, default=None)
    return {} if value is None else value  # type: ignore[no-any-return]


@dataclass(frozen=True)
class PythonProfile:
    """Where the training thread's time went over the last ``window_s``
    seconds, by Python function and line.

    ``sampled_s`` is the sum of the samples' weights (each the time since the
    previous sample): the denominator of every share; ``site_s`` the part of
    it with a frame of the job's own code on the stack.  ``functions`` holds
    the top functions by site, self and total time (most time first: site
    time for the job's own functions, self time for the others, see
    :attr:`ProfileFunction.time_s`); ``lines`` the top lines by site and self
    time.  ``phases_s`` is the sampled time per step phase, ``kinds_s`` the
    self time per kind of code.  ``truncated``: the hook's table was full, and
    the time of functions past its bound is in one row of kind ``other``.

    ``frames`` is the table the functions' call paths index.  ``workers``
    (the training thread's profile only) is the profile of the job's
    DataLoader worker processes, aggregated over the ``worker_processes``
    whose samples it holds (their ``sampled_s`` summed: shares are of the
    workers' time); ``workers_note`` says why there is none.  A hook that
    predates them sends neither: a viewer then says nothing about workers.

    ``outside_phases_s``: per step phase, the sampled time in code outside
    torch: a sample whose innermost frame (standard-library frames count as
    their caller's) is the job's own code or a library's, not torch's own
    Python and C++ (its autograd engine, optimizers, module calls, data
    loading, and the libraries its compiler runs, such as triton);
    ``outside_s`` its sum.  None from a hook that predates the split: a
    viewer estimates it from the functions' kinds and call paths."""

    t: float = 0.0
    window_s: float = 0.0
    sampled_s: float = 0.0
    site_s: float = 0.0
    samples: int = 0
    interval_s: float | None = None
    functions: tuple[ProfileFunction, ...] = ()
    lines: tuple[ProfileLine, ...] = ()
    phases_s: dict[str, float] = field(default_factory=dict)
    kinds_s: dict[str, float] = field(default_factory=dict)
    functions_seen: int = 0
    lines_seen: int = 0
    truncated: bool = False
    notes: tuple[str, ...] = ()
    frames: tuple[PathFrame, ...] = ()
    workers: PythonProfile | None = None
    worker_processes: int = 0
    workers_note: str | None = None
    outside_s: float | None = None
    outside_phases_s: dict[str, float] | None = None

    def share(self, seconds: float) -> float:
        """``seconds`` as a share (0-1) of the sampled time (0 without samples)."""
        return seconds / self.sampled_s if self.sampled_s > 0 else 0.0

    def top(self, n: int = 10) -> tuple[ProfileFunction, ...]:
        """The ``n`` functions that account for the most time (the job's own
        by site time, the others by self time): what a view shows first."""
        rows = sorted(self.functions, key=lambda r: (-r.time_s, -r.total_s))
        return tuple(r for r in rows if r.time_s > 0)[:n]

    def top_site(self, n: int = 10) -> tuple[ProfileFunction, ...]:
        """The ``n`` functions of the job's own code with the most site time."""
        rows = sorted(self.functions, key=lambda r: (-r.site_s, -r.self_s))
        return tuple(r for r in rows if r.site_s > 0)[:n]

    def top_self(self, n: int = 10) -> tuple[ProfileFunction, ...]:
        """The ``n`` functions with the most self time."""
        rows = sorted(self.functions, key=lambda r: (-r.self_s, -r.total_s))
        return tuple(r for r in rows if r.self_s > 0)[:n]

    def top_total(self, n: int = 10) -> tuple[ProfileFunction, ...]:
        """The ``n`` functions with the most total time."""
        return tuple(sorted(self.functions, key=lambda r: (-r.total_s, -r.self_s))[:n])

    def path_of(self, function: ProfileFunction) -> tuple[PathFrame, ...]:
        """``function``'s callers on its hottest stack, outermost first."""
        frames = self.frames
        return tuple(frames[i] for i in function.path if i < len(frames))

    @classmethod
    def from_wire(
        cls, obj: Any, where: str = "python_profile", nested: bool = False
    ) -> PythonProfile:
        """``nested``: the workers' profile inside another (which holds no
        further one)."""
        obj = typed(obj, where)
        kinds = _phases(obj, "kinds_s", where, len(KINDS))
        for kind in kinds:
            if kind not in KINDS:
                raise SchemaError(f"{where}.kinds_s", f"unknown kind {kind[:16]!r}")
        frames = _rows(obj, "frames", where, MAX_PATH_FRAMES, PathFrame.from_wire)
        functions = _rows(obj, "functions", where, MAX_ROWS, ProfileFunction.from_wire)
        for i, row in enumerate(functions):
            if any(k >= len(frames) for k in row.path):
                raise SchemaError(f"{where}.functions[{i}].path", "index past the frames")
        workers = None if nested else f.child(obj, "workers", where)
        return cls(
            t=f.number(obj, "t", where, hi=MAX_TIME_S, default=0.0),
            window_s=f.number(obj, "window_s", where, default=0.0),
            sampled_s=f.number(obj, "sampled_s", where, default=0.0),
            site_s=f.number(obj, "site_s", where, default=0.0),
            samples=f.integer(obj, "samples", where, default=0),
            interval_s=f.opt_number(obj, "interval_s", where, hi=60.0),
            functions=functions,
            lines=_rows(obj, "lines", where, MAX_ROWS, ProfileLine.from_wire),
            phases_s=_phases(obj, "phases_s", where, 1024),
            kinds_s=kinds,
            functions_seen=f.integer(obj, "functions_seen", where, default=0),
            lines_seen=f.integer(obj, "lines_seen", where, default=0),
            truncated=f.flag(obj, "truncated", where),
            notes=f.texts(obj, "notes", where, MAX_NOTES, 1024),
            frames=frames,
            workers=None
            if workers is None
            else PythonProfile.from_wire(workers, f"{where}.workers", nested=True),
            worker_processes=f.integer(obj, "worker_processes", where, 0, 1 << 20, default=0),
            workers_note=f.opt_text(obj, "workers_note", where, 1024),
            outside_s=f.opt_number(obj, "outside_s", where),
            outside_phases_s=f.seconds_map(obj, "outside_phases_s", where, 1024, default=None),
        )

    def to_wire(self) -> dict[str, Any]:
        out = header(m.PYTHON_PROFILE)
        out.update(
            t=self.t,
            window_s=self.window_s,
            sampled_s=self.sampled_s,
            site_s=self.site_s,
            samples=self.samples,
            functions=[r.to_wire() for r in self.functions],
            lines=[r.to_wire() for r in self.lines],
            phases_s=dict(self.phases_s),
            kinds_s=dict(self.kinds_s),
            functions_seen=self.functions_seen,
            lines_seen=self.lines_seen,
            truncated=self.truncated,
            notes=list(self.notes),
        )
        if self.interval_s is not None:
            out["interval_s"] = self.interval_s
        if self.frames:
            out["frames"] = [x.to_wire() for x in self.frames]
        if self.workers is not None:
            workers = self.workers.to_wire()
            del workers["v"], workers["type"]
            out["workers"] = workers
        if self.worker_processes:
            out["worker_processes"] = self.worker_processes
        if self.workers_note is not None:
            out["workers_note"] = self.workers_note
        if self.outside_s is not None:
            out["outside_s"] = self.outside_s
        if self.outside_phases_s is not None:
            out["outside_phases_s"] = dict(self.outside_phases_s)
        return out


@dataclass(frozen=True)
class GetPythonProfile:
    """A viewer's request for the current profile, answered with a
    ``python_profile`` (or an ``error`` saying why not: the sampler is off; a
    hook older than the sampler answers "unknown request type")."""

    @classmethod
    def from_wire(cls, obj: Any, where: str = "get_python_profile") -> GetPythonProfile:
        typed(obj, where)
        return cls()

    def to_wire(self) -> dict[str, Any]:
        return header(m.GET_PYTHON_PROFILE)
