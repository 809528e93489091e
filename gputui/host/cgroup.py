"""The lines of a ``/proc/PID/cgroup`` file, for the parsers that read one
(:mod:`gputui.host.containers`, :mod:`gputui.host.slurm`).  Pure and standard
library only."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def best_line(
    text: str, parse_path: Callable[[str], T | None], rank: Callable[[T], int]
) -> T | None:
    """What the line that says most names: each line's path (``hierarchy:controllers:path``,
    v1 and v2 alike) read by ``parse_path``; of those that name something, the one of the
    highest ``rank``, the first on a tie (None: no line names anything).  Every line
    is read: v1 hierarchies can disagree, one may still name a daemon's service."""
    best: T | None = None
    best_rank = 0
    for line in text.splitlines():
        _hierarchy, sep, rest = line.partition(":")
        _controllers, sep2, path = rest.partition(":")
        if not (sep and sep2):
            continue
        found = parse_path(path)
        if found is None:
            continue
        found_rank = rank(found)
        if found_rank > best_rank:
            best, best_rank = found, found_rank
    return best
