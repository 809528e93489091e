"""The training thread's Python profile as text: the functions that hold the
step, each with its share of the sampled time, its file and line, and its kind
of code.  File and function names come from the job: cleaned before display."""

from __future__ import annotations

import os

from gputui import fmt
from gputui.protocol.profile import ProfileFunction, PythonProfile
from gputui.reports.text import plural, table, wrap

#: functions listed
TOP = 8


def where(f: ProfileFunction) -> str:
    """``data.py:12`` (the file's last two path parts: enough to find it)."""
    parts = fmt.clean(f.file, 512).replace(os.sep, "/").split("/")
    return f"{'/'.join(parts[-2:])}:{f.line}"


def top_label(f: ProfileFunction, profile: PythonProfile) -> str:
    """``augment (data.py:12) 71%``: a function as a finding names it."""
    return f"{fmt.clean(f.function, 80)} ({where(f)}) {profile.share(f.time_s) * 100:.0f}%"


def lines(profile: PythonProfile, width: int, indent: str = "  ") -> list[str]:
    """The profile's heading and its top functions by the time they account for
    (the job's own by site time -- with the library and torch code they call --
    the others by self time)."""
    head = (
        f"Python on the training thread (last {profile.window_s:.0f} s, "
        f"{plural(profile.samples, 'sample')}): the functions that hold the step"
    )
    out = wrap(head, width, "", indent)
    rows = [
        [
            f"{profile.share(f.time_s) * 100:.1f}%",
            f"{profile.share(f.self_s) * 100:.1f}%",
            fmt.clean(f.kind, 8),
            f"{fmt.clean(f.function, 120)} {where(f)}",
        ]
        for f in profile.top(TOP)
    ]
    if not rows:
        out.extend(wrap("no samples yet", width, indent))
        return out
    out.extend(
        indent + line
        for line in table(
            ["time", "self", "kind", "function"],
            rows,
            width - len(indent),
            right=[True, True, False, False],
            flexible=3,
        )
    )
    for note in profile.notes[:3]:
        out.extend(wrap(fmt.clean(note, 300), width, indent, indent + "  "))
    return out
