"""What the process table shows: columns, filter, sort and tree order.

The table widget asks this module for its rows in order, each with a stable key,
and makes only the cells that changed (their Rich text:
:mod:`gputui.tui.widgets.process_rows`).  Nothing here draws: it is tested
without an app.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import compress, count, filterfalse
from operator import attrgetter, ne
from typing import Any, overload

from gputui import fmt
from gputui.session import container_text, slurm_text
from gputui.session.process_sort import GPU_OF, SORT_VALUES, base_order, runtime_s, sorted_by
from gputui.session.process_sort import PID_OF as _PID
from gputui.snapshot.model import ProcessSnapshot, any_in_job, any_placed, replaced

#: shown only while a process shown is in a container (or is a host pid)
CONTAINER = ("container", "CONTAINER", 16)
#: shown only while a process shown is in a Slurm job
JOB = ("job", "JOB", 16)
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
    JOB,
    ("command", "COMMAND", None),
]
COLUMN_KEYS = [key for key, _label, _width in COLUMNS]
#: below this table width the least important columns give way to the command
NARROW_WIDTH = 110
NARROW_HIDDEN = {"type", "bw", "rss"}
SORTABLE = [key for key in COLUMN_KEYS if key != "mark"]
CONTAINER_COLUMN = CONTAINER[0]
JOB_COLUMN = JOB[0]
#: columns whose natural order is "biggest first"
DESCENDING_FIRST = {"gpu_mem", "sm", "bw", "cpu", "rss", "time"}
TYPE_SHORT = {"compute": "C", "graphics": "G", "compute+graphics": "C+G"}
MAX_COMMAND_CHARS = 300


#: the filter box's restricting terms (``user:NAME``, ``gpu:N``, ``type:KIND``)
FILTER_KEYS = frozenset({"user", "u", "gpu", "g", "type", "t"})


@dataclass(frozen=True)
class ProcFilter:
    """Which processes the table shows; parsed from the filter box.

    Words match the command, name, user or pid, a container or Slurm job
    (case-insensitive, all must match);
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
            if sep and not value and name in FILTER_KEYS:
                continue  # "user:" with nothing after it (yet): no restriction
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
            if proc.slurm is not None:
                haystack += " " + slurm_text.search_text(proc).lower()
            return all(word in haystack for word in self.words)
        return True


@dataclass(frozen=True)
class SortSpec:
    """The table's sort: a column of :data:`SORTABLE` and its direction."""

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


@dataclass
class TreeLayout:
    """The tree's rows as parallel lists, top to bottom: the row's process as a
    position in the sorted processes (-1: a parent that is not on a GPU), its pid,
    its prefix; ``children``: a parent row's processes, by row."""

    index: list[int] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)
    prefixes: list[str] = field(default_factory=list)
    children: dict[int, tuple[int, ...]] = field(default_factory=dict)


def tree_layout(procs: Sequence[ProcessSnapshot], ascii_only: bool = False) -> TreeLayout:
    """Processes grouped under their parents, siblings in ``procs`` order.

    A parent that is itself a GPU process nests its children; one that is not gets
    a row of its own (name filled in later by the table, or just its pid).  Init
    (pid 1) and unknown parents make a process a root.
    """
    by_pid: dict[int, list[int]] = {}
    for i, proc in enumerate(procs):
        by_pid.setdefault(proc.pid, []).append(i)

    Node = tuple[str, int]  # ("pid", pid) or ("ext", pid)
    children: dict[Node, list[Node]] = {}
    roots: list[Node] = []
    placed: set[Node] = set()

    def parent_of(pid: int) -> Node | None:
        ppid = procs[by_pid[pid][0]].ppid
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

    branch, last, pipe, blank = ("|- ", "`- ", "|  ", "   ") if ascii_only else TREE_MARKS
    out = TreeLayout()

    def emit(node: Node, lead: str, mark: str) -> None:
        kids = children.get(node, [])
        if node[0] == "ext":
            out.children[len(out.index)] = tuple(k[1] for k in kids)
            out.index.append(-1)
            out.pids.append(node[1])
            out.prefixes.append(lead + mark)
        else:
            for i in by_pid[node[1]]:
                out.index.append(i)
                out.pids.append(node[1])
                out.prefixes.append(lead + mark)
        child_lead = lead + ((blank if mark == last else pipe) if mark else "")
        for i, kid in enumerate(kids):
            emit(kid, child_lead, last if i == len(kids) - 1 else branch)

    for root in roots:
        emit(root, "", "")
    return out


TREE_MARKS = ("├─ ", "└─ ", "│  ", "   ")


def tree_rows(procs: list[ProcessSnapshot], ascii_only: bool = False) -> list[Row]:
    """Every row of the tree (:func:`tree_layout`), made."""
    rows = LazyRows(procs, tree_layout(procs, ascii_only))
    return rows[:]


def time_text(proc: ProcessSnapshot, now_s: float) -> str:
    """What a process's TIME cell says: how long it has run at ``now_s``."""
    return fmt.duration(runtime_s(proc, now_s))


def shown_columns(
    width: int,
    procs: Sequence[ProcessSnapshot],
    placed: Callable[[Sequence[ProcessSnapshot]], bool] = any_placed,
    in_job: Callable[[Sequence[ProcessSnapshot]], bool] = any_in_job,
) -> list[str]:
    """The columns a table ``width`` cells wide shows for ``procs`` (``placed``:
    :func:`any_placed`, ``in_job``: :func:`any_in_job`, or a
    :class:`PlacedMemo` of the caller's for each)."""
    narrow = width < NARROW_WIDTH
    hidden = set(NARROW_HIDDEN) if narrow else set()
    if not placed(procs):
        hidden.add(CONTAINER_COLUMN)
    if not in_job(procs):
        hidden.add(JOB_COLUMN)
    return [key for key in COLUMN_KEYS if key not in hidden]


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


_PPID = attrgetter("ppid")
_PID_GPU = attrgetter("pid", "gpu_index")


class LazyRows(Sequence[Row]):
    """The table's rows, top to bottom.

    Rows are made when asked for: a table of 20,000 processes draws the few dozen
    in view, and only those become rows.  A tree's rows come from its layout
    (which process, which prefix), made when its parent/child structure changes.
    """

    def __init__(
        self, procs: Sequence[ProcessSnapshot] = (), tree: TreeLayout | None = None
    ) -> None:
        self._procs = procs
        self._tree = tree

    def __len__(self) -> int:
        return len(self._tree.index) if self._tree is not None else len(self._procs)

    @overload
    def __getitem__(self, index: int) -> Row: ...
    @overload
    def __getitem__(self, index: slice) -> list[Row]: ...
    def __getitem__(self, index: int | slice) -> Row | list[Row]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        tree = self._tree
        if tree is None:
            proc = self._procs[index]
            return Row(row_key(proc), proc, proc.pid)
        at = tree.index[index]
        if at < 0:
            pid = tree.pids[index]
            line = index if index >= 0 else len(tree.index) + index
            return Row(parent_key(pid), None, pid, tree.prefixes[index], tree.children[line])
        proc = self._procs[at]
        return Row(row_key(proc), proc, proc.pid, tree.prefixes[index])

    @property
    def is_tree(self) -> bool:
        return self._tree is not None

    @property
    def process_count(self) -> int:
        """The GPU processes among the rows (a tree's parent rows are not)."""
        if self._tree is None:
            return len(self._procs)
        return len(self._tree.index) - len(self._tree.children)

    def parents(self) -> list[Row]:
        """The tree's rows of parents that are not GPU processes."""
        return [self[line] for line in self._tree.children] if self._tree else []

    def find(self, key: str) -> int | None:
        """The index of the row with ``key``, or None (the rows with its pid are
        found in C: no row is made for the search)."""
        uuid, _sep, pid_text = key.rpartition("|")
        try:
            wanted = int(pid_text)  # a host pid's key is its negated pid
        except ValueError:
            return None
        tree = self._tree
        pids = tree.pids if tree is not None else map(_PID, self._procs)
        for i in compress(count(), map(abs(wanted).__eq__, pids)):
            at = i if tree is None else tree.index[i]
            if at < 0:
                if uuid == "parent":
                    return i
                continue
            proc = self._procs[at]
            if proc.gpu_uuid == uuid and proc.key[1] == wanted:
                return i
        return None


#: the base order is mended when at most one process in this many has another
#: pid or GPU than the one at its place last time, else sorted again
_MENDED = 32


def mended_order(order: list[int], procs: Sequence[ProcessSnapshot], moved: list[int]) -> list[int]:
    """:func:`base_order` of ``procs`` from ``order``, the one of a list that
    differed from ``procs`` only at the positions ``moved``: those are taken out
    and put back where they belong.  The order by GPU and pid keeps equal
    processes in their positions' order, so (GPU, pid, position) orders every
    position as the full sort does."""

    def key(i: int) -> tuple[int, int, int]:
        proc = procs[i]
        return (proc.gpu_index, proc.pid, i)

    out = list(filterfalse(set(moved).__contains__, order))
    for i in moved:
        insort(out, i, key=key)
    return out


class RowBuilder:
    """Filters, sorts and lays out the rows at each refresh.

    A filter's verdict on a process is kept while the process (the same value
    object: an unchanged process of a replay, say) comes back, so a refresh
    tests only the processes that changed against the filter's words.  The
    order by GPU and pid (every sort's ties) is kept while the processes come
    in the same order, and the tree's layout while its structure (which
    process, on which GPU, under which parent, in which order) is the same."""

    def __init__(self) -> None:
        self._filter: ProcFilter | None = None
        #: id(process) -> (process, matched): the process is held, so its id is not reused
        self._matched: dict[int, tuple[ProcessSnapshot, bool]] = {}
        #: the processes last sorted, and their base order
        self._base: tuple[tuple[ProcessSnapshot, ...], list[int]] = ((), [])
        #: the processes last sorted in base order, the column, and their values
        self._values: tuple[tuple[ProcessSnapshot, ...], str, list[Any]] = ((), "", [])
        #: the pids, GPUs and parents of the processes last laid out as a tree, in
        #: their order, with ``ascii_only``; and that layout
        self._tree: tuple[tuple[Any, ...], TreeLayout] | None = None

    def build(
        self,
        procs: Sequence[ProcessSnapshot],
        spec: SortSpec,
        flt: ProcFilter,
        tree: bool,
        now_s: float,
        ascii_only: bool = False,
    ) -> LazyRows:
        shown = self._filtered(procs, flt)
        base = self._base_order(shown)
        items = list(map(shown.__getitem__, base))
        if spec.column == "gpu" and not spec.descending:
            ordered = items
        else:
            values = self._sort_values(items, spec)
            ordered = sorted_by(items, spec.column, spec.descending, now_s, values)
        if not tree:
            self._tree = None
            return LazyRows(ordered)
        return LazyRows(ordered, self._layout(ordered, ascii_only))

    def _base_order(self, procs: Sequence[ProcessSnapshot]) -> list[int]:
        """:func:`base_order`, kept while each process is the one at its place
        last time or has its pid and GPU (read only for those that are not), and
        mended when a few have another (a process replaced in its place)."""
        procs = tuple(procs)
        old, order = self._base
        changed = replaced(procs, old)
        if changed is None:
            order = base_order(procs)
        else:
            # those of the changed places whose pid or GPU changed, found in C
            now = map(_PID_GPU, map(procs.__getitem__, changed))
            then = map(_PID_GPU, map(old.__getitem__, changed))
            moved = list(compress(changed, map(ne, now, then)))
            if len(moved) > len(procs) // _MENDED:
                order = base_order(procs)
            elif moved:
                order = mended_order(order, procs, moved)
        self._base = (procs, order)
        return order

    def _sort_values(self, items: list[ProcessSnapshot], spec: SortSpec) -> list[Any] | None:
        """The sort column's value of each of ``items``, read only for the
        processes that are not the ones at their place last time; None for the
        columns whose values move with time (the run time)."""
        if spec.column == "time":
            return None
        getter = SORT_VALUES[spec.column]
        now = tuple(items)
        old, column, values = self._values
        changed = replaced(now, old) if column == spec.column else None
        if changed is None:
            values = list(map(getter, now))
        elif changed:
            values = values[:]
            for i in changed:
                values[i] = getter(now[i])
        self._values = (now, spec.column, values)
        return values

    def _layout(self, ordered: list[ProcessSnapshot], ascii_only: bool) -> TreeLayout:
        structure = (
            list(map(_PID, ordered)),
            list(map(GPU_OF, ordered)),
            list(map(_PPID, ordered)),
            ascii_only,
        )
        if self._tree is not None and self._tree[0] == structure:
            return self._tree[1]
        layout = tree_layout(ordered, ascii_only)
        self._tree = (structure, layout)
        return layout

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
