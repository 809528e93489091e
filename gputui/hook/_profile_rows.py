"""The rows of a Python profile, from the sampler's tables (on the I/O
thread, outside the sampler's lock): functions with their hottest line and
call path, times rounded, phases bounded in name."""

from __future__ import annotations

import heapq
from types import CodeType
from typing import Any

from gputui.protocol.profile import (
    KIND_OTHER,
    MAX_FUNCTION,
    MAX_PHASE,
    PathFrame,
    ProfileFunction,
    ProfileLine,
    PythonProfile,
    clip_file,
)

# A code's classification: (code, file, qualified name, kind, skip, first line,
# {instruction offset: line} filled by snapshots, what its frames are for a
# sample's owner: the sampler's _C_* values).
_Info = tuple[CodeType | None, str, str, str, bool, int, dict[int, int], int]
_OTHER_INFO: _Info = (None, "(other)", "(other)", KIND_OTHER, False, 0, {}, 3)
MAX_OFFSETS = 4096  # offsets remembered per code
#: callers a call path carries (the nearest; the outer ones are counted)
PATH_FRAMES = 32
#: rows a profile carries: the union of the top functions by site, self and
#: total time, and of the top lines by site and self time
TOP_FUNCTIONS = 40
TOP_LINES = 40


def _line_of(info: _Info, offset: int) -> int:
    """The line of an instruction offset of a code (0 when it has none)."""
    code = info[0]
    if code is None or offset < 0:
        return 0
    known = info[6]
    line = known.get(offset)
    if line is None:
        line = 0
        for start, end, number in code.co_lines():
            if start <= offset < end:
                line = number or 0
                break
        if len(known) < MAX_OFFSETS:
            known[offset] = line
    return line


def _add(into: dict[Any, float], more: dict[Any, float]) -> None:
    for key, value in more.items():
        into[key] = into.get(key, 0.0) + value


def _self_key(row: list[Any]) -> tuple[float, float]:
    return (row[0], row[1])


def _site_key(row: list[Any]) -> tuple[float, float]:
    return (row[5], row[1])


def _total_key(row: list[Any]) -> tuple[float, float]:
    return (row[1], row[0])


def _order(row: list[Any]) -> tuple[float, float]:
    """Most time first: the job's own functions by their site time, the others
    by their self time."""
    return (-max(row[0], row[5]), -row[1])


def _r(seconds: float) -> float:
    return round(seconds, 6)


def _phase_map(phases: dict[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, seconds in phases.items():
        key = name[:MAX_PHASE]
        out[key] = _r(out.get(key, 0.0) + seconds)
    return out


def _paths(
    merged: dict[Any, list[Any]],
    chosen: dict[int, list[Any]],
    stack_copies: list[list[tuple[tuple[int, ...], list[Any]]]],
    frames: dict[tuple[str, str, int, str], int],
) -> dict[int, tuple[tuple[int, ...], int]]:
    """id(merged row) -> (its path as indices into ``frames``, filled here;
    outer frames left out) for the chosen rows: the callers on the hottest
    stack through each, heaviest stacks first until every row has one."""
    stacks: dict[tuple[int, ...], list[Any]] = {}
    for items in stack_copies:
        for key, (seconds, offsets) in items:
            have = stacks.get(key)
            if have is None:
                stacks[key] = [seconds, offsets]
            else:
                have[0] += seconds
    want = {code: row for code, row in merged.items() if code is not None and id(row) in chosen}
    found: dict[int, tuple[tuple[int, ...], tuple[int, ...], int]] = {}
    for key, (_seconds, offsets) in sorted(stacks.items(), key=lambda kv: -kv[1][0]):
        if len(found) == len(want):
            break
        for pos, code in enumerate(key):
            if code in want and code not in found:
                found[code] = (key, offsets, pos)
    out: dict[int, tuple[tuple[int, ...], int]] = {}
    for code, (key, offsets, pos) in found.items():
        callers = range(pos + 1, min(len(key), pos + 1 + PATH_FRAMES))
        path = []
        for i in reversed(callers):
            caller = merged.get(key[i])
            info = caller[4] if caller is not None else _OTHER_INFO
            entry = (
                clip_file(info[1]),
                info[2][:MAX_FUNCTION],
                _line_of(info, offsets[i]),
                info[3],
            )
            index = frames.get(entry)
            if index is None:
                index = frames[entry] = len(frames)
            path.append(index)
        out[id(want[code])] = (tuple(path), max(0, len(key) - pos - 1 - PATH_FRAMES))
    return out


def _function(row: list[Any], path: tuple[tuple[int, ...], int] = ((), 0)) -> ProfileFunction:
    self_s, total_s, phases, lines, info, site_s, site_phases, outside_s, off, off_site = row
    line = 0
    if lines:
        line = max(lines.items(), key=lambda item: (item[1][2], item[1][0], item[1][1]))[0]
    return ProfileFunction(
        file=clip_file(info[1]),
        function=info[2][:MAX_FUNCTION],
        kind=info[3],
        line=line,
        first_line=max(0, info[5]),
        self_s=_r(self_s),
        total_s=_r(total_s),
        phases_s=_phase_map(phases),
        site_s=_r(site_s),
        site_phases_s=_phase_map(site_phases),
        path=path[0],
        path_cut=path[1],
        outside_s=_r(outside_s),
        # of its time (site time for the job's own code, else self time)
        off_cpu_s=_r(off_site if site_s > self_s else off),
    )


def build_profile(
    copies: list[tuple[Any, list[Any], list[Any]]],
    stack_copies: list[list[tuple[tuple[int, ...], list[Any]]]],
    fields: dict[str, Any],
) -> PythonProfile:
    """The profile from the copies of a sampler's tables (outside its lock):
    function rows merged over the windows (by code), their lines, the top
    ``TOP_FUNCTIONS`` functions by site, self and total time with their call
    paths, the top ``TOP_LINES`` lines; ``fields``: the profile's others."""
    # merged rows: [self_s, total_s, {phase: self_s}, {line: [self, total, site]},
    #               info, site_s, {phase: site_s}, outside_s, off-CPU self, off-CPU site]
    merged: dict[Any, list[Any]] = {}
    for key, times, offsets in copies:
        self_s, total_s, row_phases, info, site_s, site_phases, outside_s, off, off_site = times
        into = merged.get(key)
        if into is None:
            merged[key] = into = [0.0, 0.0, {}, {}, info, 0.0, {}, 0.0, 0.0, 0.0]
        into[0] += self_s
        into[1] += total_s
        into[7] += outside_s
        into[8] += off
        into[9] += off_site
        _add(into[2], row_phases)
        into[5] += site_s
        _add(into[6], site_phases)
        by_line = into[3]
        for offset, s, t, st in offsets:
            line = _line_of(info, offset)
            have = by_line.get(line)
            if have is None:
                by_line[line] = [s, t, st]
            else:
                have[0] += s
                have[1] += t
                have[2] += st
    values = list(merged.values())
    by_self = heapq.nlargest(TOP_FUNCTIONS, (r for r in values if r[0] > 0), key=_self_key)
    by_site = heapq.nlargest(TOP_FUNCTIONS, (r for r in values if r[5] > 0), key=_site_key)
    by_total = heapq.nlargest(TOP_FUNCTIONS, values, key=_total_key)
    chosen = {id(r): r for r in by_site + by_self + by_total}
    frames: dict[tuple[str, str, int, str], int] = {}
    paths = _paths(merged, chosen, stack_copies, frames)
    functions = tuple(
        _function(r, paths.get(id(r), ((), 0))) for r in sorted(chosen.values(), key=_order)
    )
    line_rows = [(lr, n, r[4]) for r in values for n, lr in r[3].items() if lr[0] > 0 or lr[2] > 0]
    top_lines = {
        id(x): x
        for x in heapq.nlargest(TOP_LINES, line_rows, key=lambda x: (x[0][2], x[0][0]))
        + heapq.nlargest(TOP_LINES, line_rows, key=lambda x: (x[0][0], x[0][2]))
    }
    lines_seen = sum(len(r[3]) for r in values)
    return PythonProfile(
        **fields,
        functions=functions,
        lines=tuple(
            ProfileLine(
                file=clip_file(info[1]),
                line=n,
                function=info[2][:MAX_FUNCTION],
                kind=info[3],
                self_s=_r(lr[0]),
                total_s=_r(lr[1]),
                site_s=_r(lr[2]),
            )
            for lr, n, info in sorted(
                top_lines.values(), key=lambda x: (-max(x[0][0], x[0][2]), -x[0][1])
            )
        ),
        functions_seen=len(values),
        lines_seen=lines_seen,
        frames=tuple(PathFrame(*k) for k in frames),
    )
