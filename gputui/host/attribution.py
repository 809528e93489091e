"""Each GPU process's container and pod, and its Slurm job step: its cgroup,
then the names.

For every process: :func:`~gputui.host.containers.parse_cgroup` of its
``/proc/PID/cgroup`` gives the runtime, container id, pod UID and QoS class;
the runtime's API (:mod:`gputui.host.runtime_api`) gives the container's
name; a pod's name and namespace come from the runtime's labels, else from the
process's own ``/etc/hostname`` and service-account ``namespace`` file (read
through ``/proc/PID/root``: root only).  :func:`~gputui.host.slurm.parse_cgroup`
of the same text gives the Slurm job and step; the job's name comes from the
process's own environment (``SLURM_JOB_NAME``, where gputui may read it), else
from ``scontrol`` (:mod:`gputui.host.scontrol`).  What cannot be read stays
None and the value's ``note`` says why; nothing here raises.

Cached per (pid, start time): a process's container and job never change, so a
refresh costs a dictionary look-up per process, and a reused pid is read anew.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from itertools import repeat
from operator import attrgetter, is_
from typing import TYPE_CHECKING, Any

from gputui.host import slurm
from gputui.host.containers import parse_cgroup
from gputui.host.kept import KeptRun
from gputui.host.processes import read_environ
from gputui.snapshot.model import ContainerInfo, ProcessSnapshot, SlurmJob, evolve, replaced

#: where a process runs: its container and its Slurm job step (None: neither)
Place = tuple[ContainerInfo | None, SlurmJob | None]


def _placed(process: ProcessSnapshot, place: Place | None) -> ProcessSnapshot:
    if place is None:
        return process
    container, job = place
    return evolve(process, container=container, slurm=job)


_PID = attrgetter("pid")
_START = attrgetter("start_time_s")
_HOST_PID = attrgetter("host_pid")


if TYPE_CHECKING:  # the runtimes' API client (socket, json) loads with a container
    from gputui.host.runtime_api import Names, RuntimeNames
    from gputui.host.scontrol import ScontrolNames

#: the most of a cgroup file read (a few lines of paths)
MAX_CGROUP_BYTES = 1 << 16
HOSTNAME_FILE = "etc/hostname"
NAMESPACE_FILE = "var/run/secrets/kubernetes.io/serviceaccount/namespace"
#: more cached processes than this: the cache is rebuilt from those seen
MAX_CACHED = 1 << 14
#: the most cgroup texts kept parsed (a node has a few hundred containers at most)
MAX_PARSED = 256
#: the most of a process's environment read for its Slurm job's name
MAX_ENVIRON_BYTES = 1 << 18

_MISSING = object()


def _read_text(path: str, limit: int) -> str | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(limit).decode("utf-8", "replace")
    except (OSError, ValueError):
        return None


class ContainerAttributor:
    """Fills in ``ProcessSnapshot.container`` for processes in containers, and
    ``ProcessSnapshot.slurm`` for processes in Slurm jobs."""

    def __init__(
        self,
        proc: str = "/proc",
        names: RuntimeNames | None = None,
        node_hostname: str | None = None,
        jobs: ScontrolNames | None = None,
    ) -> None:
        self._proc = proc
        #: made at the first container with an id (most nodes have none)
        self._names = names
        #: made at the first Slurm job whose process's environment does not name it
        self._jobs = jobs
        # gethostname() is uname's node name: the same, without importing socket
        self._node_hostname = node_hostname if node_hostname is not None else os.uname().nodename
        self._cache: dict[tuple[int, float], Place | None] = {}
        #: each placed process's value, kept while the process and its place are
        self._placed: KeptRun[ProcessSnapshot, Place | None, ProcessSnapshot] = KeptRun(_placed)
        #: cgroup texts already parsed, and what they name
        self._parsed: dict[str, Place | None] = {}
        #: the last list attributed, its containers, and whether each was read from
        #: the cache by (pid, start time) (then a process object at the same place
        #: next time has the same container)
        self._last: tuple[tuple[ProcessSnapshot, ...], list[Any], bool] = ((), [], False)

    def attribute(self, processes: Sequence[ProcessSnapshot]) -> tuple[ProcessSnapshot, ...]:
        infos = self._carried(processes)
        if infos is None:
            infos = self._infos(processes)
        # the value of the last refresh while the process and its container are
        return self._placed.values(processes, infos)

    def _carried(self, processes: Sequence[ProcessSnapshot]) -> list[Any] | None:
        """The containers of ``processes`` from the last list's, where most places
        hold the very process objects of the last refresh (a node of thousands, of
        which a few changed): the others looked up one by one.  None when the last
        list had a process read at every refresh (no start time, or another
        namespace's pid), when too many places changed, or when the cache is due to
        be pruned: all are then looked up."""
        last, infos, steady = self._last
        if not steady or type(processes) is not tuple or len(self._cache) > len(processes) + 64:
            return None
        changed = replaced(processes, last)
        if changed is None or len(changed) > len(processes) // 4:
            return None
        infos = list(infos)
        cache = self._cache
        for i in changed:
            process = processes[i]
            pid, start, host = process.pid, process.start_time_s, process.host_pid
            if start is None or host is not None:
                return None  # read at every refresh: the whole list's path
            key = (pid, start)
            info = cache.get(key, _MISSING)
            if info is _MISSING:
                info = cache[key] = self.place(pid)
            infos[i] = info
        self._last = (processes, infos, True)
        return infos

    def _infos(self, processes: Sequence[ProcessSnapshot]) -> list[Any]:
        """The container of each of ``processes``, from the cache by (pid, start
        time), looked up where missing."""
        cache = self._cache
        pids = list(map(_PID, processes))
        starts = list(map(_START, processes))
        keys = list(zip(pids, starts, strict=True))
        infos: list[Any] = list(map(cache.get, keys, repeat(_MISSING)))
        host_pids = list(map(_HOST_PID, processes))
        steady = not starts.count(None) and host_pids.count(None) == len(host_pids)
        if not steady or any(map(is_, infos, repeat(_MISSING))):
            for i, info in enumerate(infos):
                pid, host = pids[i], host_pids[i]
                if host is not None and host == pid:  # pid_is_host
                    infos[i] = None  # another namespace's pid: nothing here is about it
                elif starts[i] is None:
                    # no start time to tell a reused pid by: read it every time
                    infos[i] = self.place(pid)
                elif info is _MISSING:
                    infos[i] = cache[keys[i]] = self.place(pid)
        if len(cache) > len(keys) + 64 or len(cache) > MAX_CACHED:
            seen = set(keys)
            self._cache = {key: cache[key] for key in seen if key in cache}
        self._last = (tuple(processes), infos, steady)
        return infos

    def lookup(self, pid: int) -> ContainerInfo | None:
        """The container of ``pid`` now (not cached)."""
        place = self.place(pid)
        return None if place is None else place[0]

    def job_of(self, pid: int) -> SlurmJob | None:
        """The Slurm job step of ``pid`` now (not cached)."""
        place = self.place(pid)
        return None if place is None else place[1]

    def place(self, pid: int) -> Place | None:
        """The container and Slurm job step of ``pid`` now (not cached); None
        for a process in neither."""
        text = _read_text(f"{self._proc}/{pid}/cgroup", MAX_CGROUP_BYTES)
        if text is None:
            return None
        # the processes of one container (or of none) share one text: parsed once
        if text in self._parsed:
            parsed = self._parsed[text]
        else:
            info, job = parse_cgroup(text), slurm.parse_cgroup(text)
            parsed = None if info is None and job is None else (info, job)
            if len(self._parsed) >= MAX_PARSED:
                self._parsed.clear()
            self._parsed[text] = parsed
        if parsed is None:
            return None
        info, job = parsed
        return (
            None if info is None else self._named(pid, info),
            None if job is None else self._job_named(pid, job),
        )

    def _job_named(self, pid: int, job: SlurmJob) -> SlurmJob:
        """``job`` with its name: the process's own environment's, where it is
        the job's and gputui may read it, else scontrol's."""
        env = read_environ(pid, MAX_ENVIRON_BYTES, self._proc)
        said = slurm.from_environ(env, job.job_id)
        if said is None:
            if self._jobs is None:
                from gputui.host.scontrol import ScontrolNames

                self._jobs = ScontrolNames()
            said = self._jobs.lookup(job.job_id)
        return evolve(
            job,
            name=said.name,
            array_job_id=said.array_job_id,
            array_task_id=said.array_task_id,
            note=said.note,
        )

    def _named(self, pid: int, info: ContainerInfo) -> ContainerInfo:
        """``info`` with its container's, pod's and namespace's names."""
        names: Names = (None, None, None, None)
        if info.id is not None:
            if self._names is None:
                from gputui.host.runtime_api import RuntimeNames

                self._names = RuntimeNames()
            names = self._names.lookup(info.runtime, info.id)
        name, pod_name, namespace, note = names
        notes = [note] if note else []
        pod = info.pod
        if pod is not None and (pod_name is None or namespace is None):
            root = f"{self._proc}/{pid}/root/"
            if pod_name is None:
                pod_name = self._pod_hostname(root + HOSTNAME_FILE)
                if pod_name is None:
                    notes.append(f"pod name: {root}{HOSTNAME_FILE} is not readable")
            if namespace is None:
                namespace = _first_line(_read_text(root + NAMESPACE_FILE, 512))
                if namespace is None:
                    notes.append(
                        "namespace: the pod's service-account namespace file is not readable"
                    )
        if pod is not None:
            pod = evolve(pod, name=pod_name, namespace=namespace)
        return evolve(info, name=name, pod=pod, note="; ".join(notes) or None)

    def _pod_hostname(self, path: str) -> str | None:
        name = _first_line(_read_text(path, 512))
        # a pod on the host's network has the node's hostname, not its own
        if name is None or name == self._node_hostname:
            return None
        return name


def _first_line(text: str | None) -> str | None:
    if text is None:
        return None
    from gputui.host.runtime_api import MAX_NAME_CHARS

    line = text.strip().split("\n", 1)[0].strip()
    return line[:MAX_NAME_CHARS] or None
