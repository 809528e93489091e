"""The ranks of one multi-process job (torchrun and the like), found from the
hellos of this machine's hooked processes.

Every rank's hook serves its own socket and says in its hello who it is:
``rank``, ``local_rank``, ``world_size``, ``run_id`` (``TORCHELASTIC_RUN_ID``)
and ``master`` (``MASTER_ADDR:MASTER_PORT``), and its parent pid (the torchrun
agent starts the ranks of a node as its children).  :func:`group_jobs` is pure:
hellos in, jobs out.  :func:`find_job` and :func:`list_jobs` do the reading:
sockets, hellos, and the parent pid of a launcher that has no hook of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from gputui.client.hook import AttachError, hook_summary
from gputui.host.processes import read_environ
from gputui.protocol import list_sockets
from gputui.protocol.schema import Hello

#: torchrun's run id when no rendezvous id was given (every such job has it)
NO_RUN_ID = "none"
#: connections opened at once to read hellos (each reads one frame)
HELLO_THREADS = 16


@dataclass(frozen=True)
class JobGroup:
    """One job on this machine: a single process, or the local ranks of a
    multi-rank job (ordered by rank)."""

    hellos: tuple[Hello, ...]
    #: the ranks' common parent (the torchrun agent) when they share one
    launcher_pid: int | None = None

    @property
    def pids(self) -> tuple[int, ...]:
        return tuple(h.pid for h in self.hellos)

    @property
    def multi_rank(self) -> bool:
        return (self.world_size or 1) > 1

    @property
    def world_size(self) -> int | None:
        sizes = [h.world_size for h in self.hellos if h.world_size is not None]
        return max(sizes) if sizes else None

    @property
    def ranks(self) -> tuple[int | None, ...]:
        return tuple(h.rank for h in self.hellos)

    @property
    def local_ranks(self) -> tuple[int | None, ...]:
        return tuple(h.local_rank for h in self.hellos)

    @property
    def local_world_size(self) -> int | None:
        """Ranks of the job on this node (torchrun's LOCAL_WORLD_SIZE)."""
        sizes = [h.local_world_size for h in self.hellos if h.local_world_size is not None]
        return max(sizes) if sizes else None

    @property
    def missing(self) -> int:
        """Ranks of the job this machine cannot see (on other nodes, or gone)."""
        world = self.world_size
        return 0 if world is None else max(0, world - len(self.hellos))

    @property
    def run_id(self) -> str | None:
        return next((h.run_id for h in self.hellos if h.run_id), None)

    @property
    def master(self) -> str | None:
        return next((h.master for h in self.hellos if h.master), None)

    @property
    def first(self) -> Hello:
        return self.hellos[0]


def group_key(hello: Hello) -> tuple[str, ...] | None:
    """What the ranks of one job share, or None for a single-process job.

    torchrun gives every job a run id (``none`` without a rendezvous id) and a
    master address; two jobs of one machine cannot share a master port while
    both run.  Without either, ranks that share a parent are one job."""
    if (hello.world_size or 1) <= 1:
        return None
    run_id = hello.run_id if hello.run_id and hello.run_id != NO_RUN_ID else ""
    if run_id or hello.master:
        return ("job", hello.hostname, run_id, hello.master or "", str(hello.world_size))
    return ("parent", hello.hostname, str(hello.ppid), str(hello.world_size))


def _rank_order(hello: Hello) -> tuple[int, int]:
    return (hello.rank if hello.rank is not None else 1 << 30, hello.pid)


def group_jobs(hellos: Iterable[Hello]) -> list[JobGroup]:
    """Hellos grouped into jobs: each multi-rank job once (its ranks in rank
    order), each other process alone; ordered by their first pid."""
    groups: dict[tuple[str, ...], list[Hello]] = {}
    singles: list[JobGroup] = []
    for hello in hellos:
        key = group_key(hello)
        if key is None:
            singles.append(JobGroup((hello,)))
        else:
            groups.setdefault(key, []).append(hello)
    jobs = singles
    for members in groups.values():
        # Two processes claiming one rank are two jobs run one after the
        # other with the same id: keep them apart, oldest first.
        by_rank: list[list[Hello]] = []
        for hello in sorted(members, key=lambda h: (h.started, h.pid)):
            home = next((g for g in by_rank if all(m.rank != hello.rank for m in g)), None)
            if home is None:
                by_rank.append([hello])
            else:
                home.append(hello)
        for group in by_rank:
            ordered = tuple(sorted(group, key=_rank_order))
            parents = {h.ppid for h in ordered}
            launcher = parents.pop() if len(parents) == 1 and len(ordered) > 1 else None
            jobs.append(JobGroup(ordered, launcher_pid=launcher))
    jobs.sort(key=lambda j: min(j.pids))
    return jobs


# -- reading ------------------------------------------------------------------------------
def parent_pid(pid: int) -> int | None:
    """The parent of ``pid`` from /proc (None when it is gone or unreadable)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read(4096)
    except OSError:
        return None
    # The command name may hold spaces and parentheses: the fields after it
    # start after the last ')'.
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        return int(fields[1])
    except (IndexError, ValueError):
        return None


Summary = Callable[[int], Hello]


def read_hellos(
    pids: Sequence[int], summary: Summary | None = None
) -> tuple[list[Hello], dict[int, str]]:
    """The hellos of ``pids`` read in parallel, and pid -> why not for the rest."""
    read = summary or (lambda pid: hook_summary(pid, timeout=2.0))
    hellos: list[Hello] = []
    errors: dict[int, str] = {}

    def one(pid: int) -> tuple[int, Hello | None, str | None]:
        try:
            return pid, read(pid), None
        except AttachError as exc:
            return pid, None, str(exc)

    if not pids:
        return hellos, errors
    with ThreadPoolExecutor(max_workers=min(HELLO_THREADS, len(pids))) as pool:
        for pid, hello, error in pool.map(one, pids):
            if hello is not None:
                hellos.append(hello)
            else:
                errors[pid] = error or "no hello"
    return hellos, errors


def list_jobs(
    sockets: Mapping[int, str] | None = None, summary: Summary | None = None
) -> tuple[list[JobGroup], dict[int, str]]:
    """Every hooked job of this user on this machine, ranks grouped; and the
    pids whose hook did not answer, with why."""
    pids = sorted(list_sockets() if sockets is None else sockets)
    hellos, errors = read_hellos(pids, summary)
    return group_jobs(hellos), errors


def world_size_of(pid: int) -> int:
    """WORLD_SIZE in a process's environment (1 when absent or unreadable)."""
    value = read_environ(pid).get("WORLD_SIZE", "1")
    try:
        return max(1, int(value))
    except ValueError:
        return 1


def find_job(
    pid: int,
    sockets: Mapping[int, str] | None = None,
    summary: Summary | None = None,
    parent_of: Callable[[int], int | None] = parent_pid,
    world_size: Callable[[int], int] | None = None,
) -> JobGroup | None:
    """The job ``pid`` belongs to: the local ranks of its multi-rank job when
    ``pid`` is one of them or their launcher (the torchrun agent, which has no
    hook of its own); None when ``pid`` is a single-process job, or no hooked
    process has it as parent (the caller then connects to ``pid`` alone, and
    says why it could not)."""
    if sockets is None:
        sockets = list_sockets()
    if pid in sockets:
        # One connection less for the common single-process job: the hook
        # takes its world size from the same variable.
        if (world_size or world_size_of)(pid) <= 1:
            return None
        jobs, _ = list_jobs(sockets, summary)
        return next((j for j in jobs if pid in j.pids), None)
    children = [p for p in sorted(sockets) if parent_of(p) == pid]
    if not children:
        return None
    hellos, _ = read_hellos(children, summary)
    jobs = group_jobs(hellos)
    if not jobs:
        return None
    # A launcher of several jobs (a shell script running two torchruns) is
    # not what torchrun does: take the biggest and let the others be.
    job = max(jobs, key=lambda j: len(j.hellos))
    return JobGroup(job.hellos, launcher_pid=pid)
