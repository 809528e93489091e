"""What the process table shows: columns, filter, sort and tree order (no textual).

The table widget asks this module for an ordered list of rows, each with a stable
key and its cells, and only touches the cells that changed.  Keeping the logic
here makes it testable without an app.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from operator import attrgetter, itemgetter
from typing import Any, overload

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


#: how each sortable column orders its rows: a getter of a process's value (None
#: sorts last); a new column adds its getter here
SORT_VALUES: dict[str, Callable[[ProcessSnapshot], Any]] = {
    "gpu": attrgetter("gpu_index"),
    "pid": attrgetter("pid"),
    "user": attrgetter("user"),
    "type": attrgetter("type"),
    "gpu_mem": attrgetter("gpu_mem_bytes"),
    "sm": attrgetter("sm_pct"),
    "bw": attrgetter("mem_bw_pct"),
    "cpu": attrgetter("cpu_pct"),
    "rss": attrgetter("rss_bytes"),
    "container": container_text.sort_key,
    "command": attrgetter("command"),
}
_PID = attrgetter("pid")
_GPU = attrgetter("gpu_index")


def sort_processes(
    procs: Iterable[ProcessSnapshot], spec: SortSpec, now_s: float
) -> list[ProcessSnapshot]:
    """Sorted by ``spec``; unknown values (N/A) always last; ties by GPU then pid.

    The comparisons run in C (``sorted`` with a getter): the order of 20,000
    processes costs a few milliseconds, and an already ordered list (a snapshot's
    own order) costs one pass."""
    # by pid, then (stable) by GPU: two sorts of plain integers, no key tuples; a
    # snapshot comes in this order already, and an ordered list is one pass
    items = sorted(procs, key=_PID)
    items.sort(key=_GPU)
    if spec.column == "gpu" and not spec.descending:
        return items
    value: Callable[[ProcessSnapshot], Any] = (
        (lambda p: runtime_s(p, now_s)) if spec.column == "time" else SORT_VALUES[spec.column]
    )
    keyed = [(v, p) for p in items if (v := value(p)) is not None]
    unknown = [p for p in items if value(p) is None] if len(keyed) < len(items) else []
    keyed.sort(key=itemgetter(0), reverse=spec.descending)
    return [p for _v, p in keyed] + unknown


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


class RowList(Sequence[Row]):
    """The table's rows, top to bottom.

    Flat rows are made when asked for: a table of 20,000 processes draws the few
    dozen in view, and only those become rows.  The tree's rows are made whole
    (their prefixes depend on the rows around them).
    """

    def __init__(
        self, procs: Sequence[ProcessSnapshot] = (), rows: list[Row] | None = None
    ) -> None:
        self._procs = procs
        self._rows = rows

    def __len__(self) -> int:
        return len(self._rows) if self._rows is not None else len(self._procs)

    @overload
    def __getitem__(self, index: int) -> Row: ...
    @overload
    def __getitem__(self, index: slice) -> list[Row]: ...
    def __getitem__(self, index: int | slice) -> Row | list[Row]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if self._rows is not None:
            return self._rows[index]
        proc = self._procs[index]
        return Row(row_key(proc), proc, proc.pid)

    @property
    def is_tree(self) -> bool:
        return self._rows is not None

    @property
    def process_count(self) -> int:
        """The GPU processes among the rows (a tree's parent rows are not)."""
        if self._rows is None:
            return len(self._procs)
        return sum(1 for row in self._rows if row.proc is not None)

    def parents(self) -> list[Row]:
        """The tree's rows of parents that are not GPU processes."""
        return [row for row in self._rows or () if row.proc is None]

    def find(self, key: str) -> int | None:
        """The index of the row with ``key``, or None."""
        if self._rows is not None:
            return next((i for i, row in enumerate(self._rows) if row.key == key), None)
        uuid, _sep, pid_text = key.rpartition("|")
        try:
            wanted = int(pid_text)  # a host pid's key is its negated pid
        except ValueError:
            return None
        return next(
            (i for i, p in enumerate(self._procs) if p.key[1] == wanted and p.gpu_uuid == uuid),
            None,
        )


class RowBuilder:
    """Filters, sorts and lays out the rows at each refresh.

    A filter's verdict on a process is kept while the process (the same value
    object: an unchanged process of a replay, say) comes back, so a refresh
    tests only the processes that changed against the filter's words."""

    def __init__(self) -> None:
        self._filter: ProcFilter | None = None
        #: id(process) -> (process, matched): the process is held, so its id is not reused
        self._matched: dict[int, tuple[ProcessSnapshot, bool]] = {}

    def build(
        self,
        procs: Sequence[ProcessSnapshot],
        spec: SortSpec,
        flt: ProcFilter,
        tree: bool,
        now_s: float,
        ascii_only: bool = False,
    ) -> RowList:
        ordered = sort_processes(self._filtered(procs, flt), spec, now_s)
        return RowList(rows=tree_rows(ordered, ascii_only)) if tree else RowList(ordered)

    def _filtered(
        self, procs: Sequence[ProcessSnapshot], flt: ProcFilter
    ) -> Sequence[ProcessSnapshot]:
        if not flt.active:
            self._matched = {}
            return procs
        if flt != self._filter:
            self._filter, self._matched = flt, {}
        old, new = self._matched, {}
        shown = []
        for proc in procs:
            known = old.get(id(proc))
            matched = known[1] if known is not None and known[0] is proc else flt.matches(proc)
            new[id(proc)] = (proc, matched)
            if matched:
                shown.append(proc)
        self._matched = new
        return shown


def build_rows(
    procs: Iterable[ProcessSnapshot],
    spec: SortSpec,
    flt: ProcFilter,
    tree: bool,
    now_s: float,
    ascii_only: bool = False,
) -> list[Row]:
    rows = RowBuilder().build(tuple(procs), spec, flt, tree, now_s, ascii_only)
    return rows[:]
