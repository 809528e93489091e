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
from typing import Any

from gputui.protocol import fields as f
from gputui.protocol import messages as m
from gputui.protocol import spec
from gputui.protocol.fields import MAX_TIME_S, SchemaError, typed
from gputui.protocol.value import value_class

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


def _kind(obj: Mapping[str, Any], key: str, where: str) -> str:
    kind = f.text(obj, key, where, 16, default=KIND_USER)
    if kind not in KINDS:
        raise SchemaError(f"{where}.kind", f"expected one of {', '.join(KINDS)}, got {kind[:16]!r}")
    return kind  # type: ignore[no-any-return]


# the fields every row names its code by: file, function, line, kind
def _file() -> Any:
    return spec.text(limit=MAX_FILENAME)


def _function() -> Any:
    return spec.text(limit=MAX_FUNCTION, missing="")


def _line(default: Any = 0) -> Any:
    return spec.integer(default, hi=MAX_LINE, missing=0)


def _code_kind() -> Any:
    return spec.field(_kind, default=KIND_USER)


def _state(obj: Mapping[str, Any], key: str, where: str) -> str:
    state = f.text(obj, key, where, 32)
    if state not in SAMPLER_STATES:
        raise SchemaError(f"{where}.{key}", f"unknown state {state[:32]!r}")
    return state  # type: ignore[no-any-return]


@spec.value("sampler")
@value_class
class SamplerInfo(spec.Wire):
    """The status's ``sampler``: whether the job's Python stack is sampled."""

    state: str = spec.field(_state, default=SAMPLER_ON)
    #: the sampling period aimed at
    interval_s: float | None = spec.number(None, hi=60.0, omit_none=True)
    samples: int = 0  # samples taken since the hook started
    reason: str | None = spec.text(None, 1024, omit_none=True)  # why it is off or failed

    @property
    def on(self) -> bool:
        return self.state == SAMPLER_ON


@spec.value("frame")
@value_class
class PathFrame(spec.Wire):
    """One frame of a call path: a function stopped at the line of its call
    to the next frame (an entry of :attr:`PythonProfile.frames`)."""

    file: str = _file()
    function: str = _function()
    line: int = _line()
    kind: str = _code_kind()


def _indices(obj: Mapping[str, Any], key: str, where: str) -> tuple[int, ...]:
    """A list of frame-table indices (checked against the table by the profile)."""
    value = f.items(obj, key, where, MAX_PATH)
    for i, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, int) or not 0 <= item < MAX_PATH_FRAMES:
            raise SchemaError(f"{where}.{key}[{i}]", f"expected a frame index, got {item!r:.40}")
    return tuple(value)


@spec.value("function")
@value_class
class ProfileFunction(spec.Wire):
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
    :attr:`PythonProfile.outside_phases_s`); 0 from a hook that predates it.
    ``off_cpu_s``: the part of its time (:attr:`time_s`) the training thread
    spent off the CPU (sleeping, blocked in I/O or on a lock, waiting on a
    subprocess), by the thread's own CPU clock; 0 from a hook that predates it."""

    file: str = _file()
    function: str = _function()
    kind: str = _code_kind()
    line: int = _line()
    first_line: int = spec.integer(0, hi=MAX_LINE)
    self_s: float = 0.0
    total_s: float = 0.0
    phases_s: dict[str, float] = spec.seconds(MAX_ROW_PHASES)
    site_s: float = 0.0
    site_phases_s: dict[str, float] = spec.seconds(MAX_ROW_PHASES)
    path: tuple[int, ...] = spec.field(_indices, default=(), write="list({v})", omit_empty=True)
    path_cut: int = spec.integer(0, hi=MAX_LINE, omit_empty=True)
    outside_s: float = spec.number(0.0, omit_empty=True)
    off_cpu_s: float = spec.number(0.0, omit_empty=True)

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


@spec.value("line")
@value_class
class ProfileLine(spec.Wire):
    """One line of one function: the line a blocked call was made from (a
    ``loss.item()`` waiting for the GPU is time at that line).  ``site_s`` as
    for :class:`ProfileFunction`: the line of the job's code that called the
    library or torch code the time went to."""

    file: str = _file()
    line: int = _line(spec.REQUIRED)
    function: str = _function()
    kind: str = _code_kind()
    self_s: float = 0.0
    total_s: float = 0.0
    site_s: float = 0.0


def _kinds(obj: Mapping[str, Any], key: str, where: str) -> dict[str, float]:
    kinds = f.seconds_map(obj, key, where, len(KINDS), default=None) or {}
    for kind in kinds:
        if kind not in KINDS:
            raise SchemaError(f"{where}.{key}", f"unknown kind {kind[:16]!r}")
    return kinds  # type: ignore[no-any-return]


def _workers(obj: Mapping[str, Any], key: str, where: str) -> PythonProfile | None:
    workers = f.child(obj, key, where)
    if workers is None:
        return None
    return PythonProfile.from_wire(workers, f"{where}.{key}", nested=True)


def _workers_wire(workers: PythonProfile) -> dict[str, Any]:
    return workers.__wire_body__()  # type: ignore[attr-defined, no-any-return]


@spec.message(m.PYTHON_PROFILE)
@value_class
class PythonProfile(spec.Wire):
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
    viewer estimates it from the functions' kinds and call paths.

    ``off_cpu_s``: of the sampled time, the part the training thread spent off
    the CPU (sleeping, blocked in I/O or on a lock), by its own CPU clock;
    ``outside_off_cpu_s`` that part of ``outside_s``.  None from a hook that
    predates them, or where the thread's CPU clock cannot be read."""

    t: float = spec.number(0.0, hi=MAX_TIME_S)
    window_s: float = 0.0
    sampled_s: float = 0.0
    site_s: float = 0.0
    samples: int = 0
    interval_s: float | None = spec.number(None, hi=60.0, omit_none=True)
    functions: tuple[ProfileFunction, ...] = spec.rows(ProfileFunction, MAX_ROWS)
    lines: tuple[ProfileLine, ...] = spec.rows(ProfileLine, MAX_ROWS)
    phases_s: dict[str, float] = spec.seconds(1024)
    kinds_s: dict[str, float] = spec.field(_kinds, factory=dict, write="dict({v})")
    functions_seen: int = 0
    lines_seen: int = 0
    truncated: bool = False
    notes: tuple[str, ...] = spec.texts(MAX_NOTES, 1024)
    frames: tuple[PathFrame, ...] = spec.rows(PathFrame, MAX_PATH_FRAMES, omit_empty=True)
    workers: PythonProfile | None = spec.field(
        _workers, default=None, write=_workers_wire, omit_none=True
    )
    worker_processes: int = spec.integer(0, hi=1 << 20, omit_empty=True)
    workers_note: str | None = spec.text(None, 1024, omit_none=True)
    outside_s: float | None = spec.number(None, omit_none=True)
    outside_phases_s: dict[str, float] | None = spec.seconds(default=None, omit_none=True)
    off_cpu_s: float | None = spec.number(None, omit_none=True)
    outside_off_cpu_s: float | None = spec.number(None, omit_none=True)

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
        further one: its ``workers`` are not read)."""
        if nested:
            obj = {**typed(obj, where), "workers": None}
        profile = spec.decode(cls, obj, where)
        for i, row in enumerate(profile.functions):
            if any(k >= len(profile.frames) for k in row.path):
                raise SchemaError(f"{where}.functions[{i}].path", "index past the frames")
        return profile


@spec.message(m.GET_PYTHON_PROFILE)
@value_class
class GetPythonProfile(spec.Wire):
    """A viewer's request for the current profile, answered with a
    ``python_profile`` (or an ``error`` saying why not: the sampler is off; a
    hook older than the sampler answers "unknown request type")."""
