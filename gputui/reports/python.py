"""The training thread's Python profile as text: the functions that hold the
step, each with its share of the sampled time, its file and line, its kind of
code and the phase it runs in; the DataLoader workers' functions the same way,
or why there are none.  File, function and phase names come from the job:
cleaned before display.  The attach screen's Python view (key y) draws the
same rows (:func:`function_rows`)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from gputui import fmt
from gputui.protocol.profile import PathFrame, ProfileFunction, PythonProfile
from gputui.reports.text import plural, table, wrap

#: functions listed
TOP = 8
#: how each kind of code is named
KIND_NAMES = {"user": "user", "torch": "torch", "lib": "library", "other": "other"}
#: a function's phase is named alone when it holds this share of its time
ONE_PHASE = 0.9


def where(f: ProfileFunction | PathFrame) -> str:
    """``data.py:12`` (the file's last two path parts: enough to find it)."""
    parts = fmt.clean(f.file, 512).replace(os.sep, "/").split("/")
    return f"{'/'.join(parts[-2:])}:{f.line}"


def top_label(f: ProfileFunction, profile: PythonProfile) -> str:
    """``augment (data.py:12) 71%``: a function as a finding names it."""
    return f"{fmt.clean(f.function, 80)} ({where(f)}) {profile.share(f.time_s) * 100:.0f}%"


def phase_of(f: ProfileFunction) -> str:
    """The phase ``f`` runs in (by the time it is ordered by), with its share
    when it runs in several: ``augment``, ``forward 62%``; ``-`` when none."""
    phases = f.site_phases_s if f.site_s > f.self_s and f.site_phases_s else f.phases_s
    total = sum(phases.values())
    if not phases or total <= 0:
        return "-"
    name, seconds = max(phases.items(), key=lambda item: item[1])
    label = fmt.clean(name, 24)
    share = seconds / total
    return label if share >= ONE_PHASE else f"{label} {share * 100:.0f}%"


@dataclass(frozen=True)
class FunctionRow:
    """One function as the views show it (plain values)."""

    function: ProfileFunction
    time: str  # share of the sampled time it accounts for (site time for the job's code)
    self_share: str
    total: str
    phase: str
    kind: str
    name: str
    where: str

    @property
    def key(self) -> str:
        f = self.function
        return f"{f.kind}\x00{f.file}\x00{f.function}"


def function_rows(profile: PythonProfile, n: int) -> list[FunctionRow]:
    """The ``n`` functions that account for the most time, as rows."""
    return [
        FunctionRow(
            function=f,
            time=_pct(profile.share(f.time_s)),
            self_share=_pct(profile.share(f.self_s)),
            total=_pct(profile.share(f.total_s)),
            phase=phase_of(f),
            kind=KIND_NAMES.get(f.kind, fmt.clean(f.kind, 8)),
            name=fmt.clean(f.function, 120),
            where=where(f),
        )
        for f in profile.top(n)
    ]


def path_rows(profile: PythonProfile, f: ProfileFunction) -> list[tuple[str, str, str]]:
    """(function, file:line, kind) of ``f``'s callers on its hottest stack,
    outermost first, then ``f`` at its hottest line."""
    rows = [
        (fmt.clean(x.function, 120), where(x), KIND_NAMES.get(x.kind, fmt.clean(x.kind, 8)))
        for x in profile.path_of(f)
    ]
    rows.append((fmt.clean(f.function, 120), where(f), KIND_NAMES.get(f.kind, "?")))
    return rows


def workers_heading(profile: PythonProfile) -> str | None:
    """The workers section's heading, or why there is none; None from a hook
    that predates worker profiles."""
    workers = profile.workers
    if workers is not None:
        return (
            f"DataLoader workers ({plural(profile.worker_processes, 'process', 'processes')}, "
            f"last {workers.window_s:.0f} s, shares of their time)"
        )
    if profile.workers_note:
        return fmt.clean(profile.workers_note, 300)
    return None


def _pct(share: float) -> str:
    return f"{share * 100:.1f}%"


def _table(rows: list[FunctionRow], width: int, indent: str) -> list[str]:
    cells = [[r.time, r.self_share, r.kind, r.phase, f"{r.name} {r.where}"] for r in rows]
    return [
        indent + line
        for line in table(
            ["time", "self", "kind", "phase", "function"],
            cells,
            width - len(indent),
            right=[True, True, False, False, False],
            flexible=4,
            optional=[3, 2, 1],  # narrower: phase, kind and self give way to the name
            least=16,
        )
    ]


def lines(profile: PythonProfile, width: int, indent: str = "  ") -> list[str]:
    """The profile's heading and its top functions by the time they account for
    (the job's own by site time -- with the library and torch code they call --
    the others by self time); then the DataLoader workers'."""
    head = (
        f"Python on the training thread (last {profile.window_s:.0f} s, "
        f"{plural(profile.samples, 'sample')}): the functions that hold the step"
    )
    out = wrap(head, width, "", indent)
    rows = function_rows(profile, TOP)
    if not rows:
        out.extend(wrap("no samples yet", width, indent))
        return out
    out.extend(_table(rows, width, indent))
    for note in profile.notes[:3]:
        out.extend(wrap(fmt.clean(note, 300), width, indent, indent + "  "))
    heading = workers_heading(profile)
    if heading is not None:
        out.extend(wrap(heading, width, "", indent))
        if profile.workers is not None:
            out.extend(_table(function_rows(profile.workers, TOP), width, indent))
    return out
