"""What the process table shows: columns, filter, sort and tree order (no textual).

The table widget asks this module for an ordered list of rows, each with a stable
key and its cells, and only touches the cells that changed.  Keeping the logic
here makes it testable without an app.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from rich.text import Text

from gputui import fmt
from gputui.reports import container_text
from gputui.snapshot.model import ProcessSnapshot
from gputui.tui import render

#: shown only while a process shown is in a container (or is a host pid)
CONTAINER = ("container", "CONTAINER", 16)
#: (key, label, width); width None = fit the content (the command takes the rest)
COLUMNS: list[tuple[str, str, int | None]] = [
    ("mark", " ", 1),
    ("gpu", "GPU", 4),
    ("pid", "PID", 7),
    ("user", "USER", 8),
    ("type", "TYPE", 5),
    ("gpu_mem", "GPU-MEM", 8),
    ("sm", "%SM", 4),
    ("bw", "%BW", 4),
    ("cpu", "%CPU", 5),
    ("rss", "HOST-MEM", 9),
    ("time", "TIME", 8),
    CONTAINER,
    ("command", "COMMAND", None),
]
COLUMN_KEYS = [key for key, _label, _width in COLUMNS]
#: below this table width the least important columns give way to the command
NARROW_WIDTH = 110
NARROW_HIDDEN = {"type", "bw", "rss"}
SORTABLE = [key for key in COLUMN_KEYS if key != "mark"]
CONTAINER_COLUMN = CONTAINER[0]
#: columns whose natural order is "biggest first"
DESCENDING_FIRST = {"gpu_mem", "sm", "bw", "cpu", "rss", "time"}
TYPE_SHORT = {"compute": "C", "graphics": "G", "compute+graphics": "C+G"}
MAX_COMMAND_CHARS = 300


@dataclass(frozen=True)
class ProcFilter:
    """Which processes the table shows; parsed from the filter box.

    Words match the command, name, user or pid (case-insensitive, all must match);
    ``user:NAME``, ``gpu:N`` and ``type:compute|graphics`` restrict further.
    """

    words: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    gpus: tuple[int, ...] = ()
    kind: str | None = None
    #: terms that were not understood (said on the status line, not applied)
    problems: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> ProcFilter:
        words: list[str] = []
        users: list[str] = []
        gpus: list[int] = []
        kind: str | None = None
        problems: list[str] = []
        for token in text.split():
            name, sep, value = token.partition(":")
            name = name.lower()
            if sep and value and name in ("user", "u"):
                users.append(value)
            elif sep and value and name in ("gpu", "g"):
                if value.isdigit() and len(value) <= 4:
                    gpus.append(int(value))
                else:
                    problems.append(f"gpu: takes a GPU index, not {value[:20]!r}")
            elif sep and value and name in ("type", "t"):
                wanted = value.lower()
                if "compute".startswith(wanted):
                    kind = "compute"
                elif "graphics".startswith(wanted):
                    kind = "graphics"
                else:
                    problems.append(f"type: is compute or graphics, not {value[:20]!r}")
            else:
                words.append(token.lower())
        return cls(tuple(words), tuple(users), tuple(gpus), kind, tuple(problems))

    def to_text(self) -> str:
        parts = [f"user:{u}" for u in self.users]
        parts += [f"gpu:{g}" for g in self.gpus]
        if self.kind:
            parts.append(f"type:{self.kind}")
        parts += list(self.words)
        return " ".join(parts)

    @property
    def active(self) -> bool:
        return bool(self.words or self.users or self.gpus or self.kind)

    def matches(self, proc: ProcessSnapshot) -> bool:
        if self.users and proc.user not in self.users:
            return False
        if self.gpus and proc.gpu_index not in self.gpus:
            return False
        if self.kind and self.kind not in proc.type:
            return False
        if self.words:
            haystack = f"{proc.pid} {proc.user or ''} {proc.name or ''} {proc.command}".lower()
            if proc.container is not None or proc.pid_is_host:
                haystack += " " + container_text.search_text(proc).lower()
            return all(word in haystack for word in self.words)
        return True


@dataclass(frozen=True)
class SortSpec:
    column: str = "gpu"
    descending: bool = False

    def next(self, step: int = 1) -> SortSpec:
        i = (SORTABLE.index(self.column) + step) % len(SORTABLE)
        column = SORTABLE[i]
        return SortSpec(column, column in DESCENDING_FIRST)

    def toggled(self) -> SortSpec:
        return SortSpec(self.column, not self.descending)

    def on(self, column: str) -> SortSpec:
        """Sort by ``column``; asking for the current column again reverses it."""
        if column == self.column:
            return self.toggled()
        return SortSpec(column, column in DESCENDING_FIRST)


def runtime_s(proc: ProcessSnapshot, now_s: float) -> float | None:
    if proc.start_time_s is None:
        return None
    return max(0.0, now_s - proc.start_time_s)


def _sort_value(proc: ProcessSnapshot, column: str, now_s: float) -> Any:
    getters: dict[str, Callable[[ProcessSnapshot], Any]] = {
        "gpu": lambda p: p.gpu_index,
        "pid": lambda p: p.pid,
        "user": lambda p: p.user,
        "type": lambda p: p.type,
        "gpu_mem": lambda p: p.gpu_mem_bytes,
        "sm": lambda p: p.sm_pct,
        "bw": lambda p: p.mem_bw_pct,
        "cpu": lambda p: p.cpu_pct,
        "rss": lambda p: p.rss_bytes,
        "time": lambda p: runtime_s(p, now_s),
        "container": container_text.sort_key,
        "command": lambda p: p.command,
    }
    return getters[column](proc)


def sort_processes(
    procs: Iterable[ProcessSnapshot], spec: SortSpec, now_s: float
) -> list[ProcessSnapshot]:
    """Sorted by ``spec``; unknown values (N/A) always last; ties by GPU then pid."""
    items = sorted(procs, key=lambda p: (p.gpu_index, p.pid))
    known = [p for p in items if _sort_value(p, spec.column, now_s) is not None]
    unknown = [p for p in items if _sort_value(p, spec.column, now_s) is None]
    known.sort(key=lambda p: _sort_value(p, spec.column, now_s), reverse=spec.descending)
    return known + unknown


@dataclass(frozen=True)
class Row:
    """One table row: a GPU process, or (tree view) a parent that is not on a GPU."""

    key: str
    proc: ProcessSnapshot | None
    pid: int
    prefix: str = ""
    #: for parent rows: the processes below it
    children: tuple[int, ...] = field(default=())


def row_key(proc: ProcessSnapshot) -> str:
    return f"{proc.gpu_uuid}|{proc.key[1]}"


def parent_key(pid: int) -> str:
    return f"parent|{pid}"


def flat_rows(procs: list[ProcessSnapshot]) -> list[Row]:
    return [Row(row_key(p), p, p.pid) for p in procs]


def tree_rows(procs: list[ProcessSnapshot], ascii_only: bool = False) -> list[Row]:
    """Processes grouped under their parents, siblings in ``procs`` order.

    A parent that is itself a GPU process nests its children; one that is not gets
    a row of its own (name filled in later by the table, or just its pid).  Init
    (pid 1) and unknown parents make a process a root.
    """
    by_pid: dict[int, list[ProcessSnapshot]] = {}
    for proc in procs:
        by_pid.setdefault(proc.pid, []).append(proc)

    Node = tuple[str, int]  # ("pid", pid) or ("ext", pid)
    children: dict[Node, list[Node]] = {}
    roots: list[Node] = []
    placed: set[Node] = set()

    def parent_of(pid: int) -> Node | None:
        ppid = by_pid[pid][0].ppid
        if ppid is None or ppid <= 1 or ppid == pid:
            return None
        return ("pid", ppid) if ppid in by_pid else ("ext", ppid)

    for proc in procs:
        node: Node = ("pid", proc.pid)
        seen: set[Node] = set()
        # Walk up until we reach a node already placed or a root; cycles stop the walk.
        while node not in placed and node not in seen:
            seen.add(node)
            parent = parent_of(node[1]) if node[0] == "pid" else None
            if parent is not None and parent in seen:
                parent = None
            placed.add(node)
            if parent is None:
                roots.append(node)
                break
            children.setdefault(parent, []).append(node)
            node = parent

    branch, last, pipe, blank = (
        ("|- ", "`- ", "|  ", "   ")
        if ascii_only
        else (
            "├─ ",
            "└─ ",
            "│  ",
            "   ",
        )
    )
    rows: list[Row] = []

    def emit(node: Node, lead: str, mark: str) -> None:
        kids = children.get(node, [])
        if node[0] == "ext":
            kid_pids = tuple(k[1] for k in kids)
            rows.append(Row(parent_key(node[1]), None, node[1], lead + mark, kid_pids))
        else:
            for proc in by_pid[node[1]]:
                rows.append(Row(row_key(proc), proc, proc.pid, lead + mark))
        child_lead = lead + ((blank if mark == last else pipe) if mark else "")
        for i, kid in enumerate(kids):
            emit(kid, child_lead, last if i == len(kids) - 1 else branch)

    for root in roots:
        emit(root, "", "")
    return rows


def cells(
    row: Row,
    now_s: float,
    ascii_only: bool = False,
    parent_name: str | None = None,
) -> tuple[Any, ...]:
    """The cells of one row, in COLUMNS order."""
    proc = row.proc
    if proc is None:
        name = (
            fmt.clean(parent_name, MAX_COMMAND_CHARS) if parent_name else "(parent, not on a GPU)"
        )
        return (
            "",
            "",
            str(row.pid),
            "",
            "",
            "",
            "",
            "",
            "",
            "",
            "",
            "",
            Text(row.prefix + name, style="dim"),
        )
    mark = ("@" if ascii_only else "◆") if proc.hooked else ""
    command = row.prefix + display_command(proc)
    return (
        Text(mark, style="bold magenta"),
        str(proc.gpu_index),
        str(proc.pid),
        fmt.clean(proc.user, 64),
        TYPE_SHORT.get(proc.type, proc.type),
        Text(fmt.size(proc.gpu_mem_bytes), justify="right"),
        _pct_cell(proc.sm_pct),
        _pct_cell(proc.mem_bw_pct),
        Text("-" if proc.cpu_pct is None else f"{proc.cpu_pct:.0f}", justify="right"),
        Text(fmt.size(proc.rss_bytes), justify="right"),
        Text(fmt.duration(runtime_s(proc, now_s)), justify="right"),
        Text(container_text.label(proc), style="dim" if proc.pid_is_host else ""),
        command,
    )


def shown_columns(width: int, procs: Iterable[ProcessSnapshot]) -> list[str]:
    """The columns a table ``width`` cells wide shows for ``procs``."""
    narrow = width < NARROW_WIDTH
    with_container = any(p.container is not None or p.pid_is_host for p in procs)
    return [
        key
        for key in COLUMN_KEYS
        if not (narrow and key in NARROW_HIDDEN) and (with_container or key != CONTAINER_COLUMN)
    ]


def _pct_cell(value: float | None) -> Text:
    if value is None:
        return Text("-", style="dim", justify="right")
    return Text(f"{value:.0f}", style=render.level_style(value), justify="right")


def display_command(proc: ProcessSnapshot) -> str:
    """A process's command line as shown: cleaned (another user chose it) and
    capped; the table cuts it to the column with an ellipsis."""
    cmdline, name = proc.cmdline, proc.name
    if len(name or "") + sum(map(len, cmdline or ())) > CACHED_COMMAND_CHARS:
        # Not kept: a cache of other users' megabyte command lines is theirs to fill.
        return fmt.command(cmdline, name, MAX_COMMAND_CHARS)
    return _command_text(cmdline, name)


#: the longest command line (with the name) that the table's cache keeps
CACHED_COMMAND_CHARS = 4096


@lru_cache(maxsize=1024)
def _command_text(cmdline: tuple[str, ...] | None, name: str | None) -> str:
    # Every row is redrawn each sample, and command lines rarely change: cleaning
    # each argument of every row again was a tenth of the table's drawing time.
    return fmt.command(cmdline, name, MAX_COMMAND_CHARS)


def build_rows(
    procs: Iterable[ProcessSnapshot],
    spec: SortSpec,
    flt: ProcFilter,
    tree: bool,
    now_s: float,
    ascii_only: bool = False,
) -> list[Row]:
    shown = [p for p in procs if flt.matches(p)]
    ordered = sort_processes(shown, spec, now_s)
    return tree_rows(ordered, ascii_only) if tree else flat_rows(ordered)
