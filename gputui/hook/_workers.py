"""DataLoader worker processes: their Python profile, for the training
process's (docs/hook.md, "DataLoader workers").

A worker forked from the hooked process inherits the hook's modules but not its
threads.  The hook wraps torch's worker loop (``_worker_loop``, looked up by the
DataLoader when it starts its workers): in a forked worker of the hooked
process, the wrapper starts a sampler on the worker's main thread before the
loop runs (a safe point: the fork is over, the interpreter's own locks are new
and the worker runs ordinary code), and that sampler writes the worker's
profile (its top ``TOP_ROWS`` rows) every ``PERIOD_S``, and once more when the
loop returns (a worker of a short epoch is seen too), to
``<socket dir>/<pid>.workers/<worker pid>.json`` (0700 directory, 0600 file,
replaced atomically; JSON, never pickle).  The
training process reads the files off its training thread when it builds its
own profile and merges them into one profile of all its workers.

Workers started with spawn or forkserver run a fresh interpreter without the
hook: the profile says so.  Nothing here raises into the worker or the job:
an error leaves the worker unsampled.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import stat
import sys
import time
from collections.abc import Iterable
from typing import Any

from gputui.hook._profile_rows import _add
from gputui.hook._recorder import Recorder
from gputui.hook._sampler import Sampler, env_enabled
from gputui.protocol import paths
from gputui.protocol.fields import SchemaError
from gputui.protocol.framing import MAX_FRAME
from gputui.protocol.profile import (
    MAX_PATH_FRAMES,
    MAX_ROWS,
    PathFrame,
    ProfileFunction,
    ProfileLine,
    PythonProfile,
)

#: a worker writes its profile this often (the training process reads the
#: changed files each time it builds its profile, every 2 s with a viewer)
PERIOD_S = 5.0
#: a worker's file older than this is left out and removed (a worker of an
#: epoch that ended: its time is in the training process's window for a while)
MAX_AGE_S = 60.0
#: worker files merged per profile (the newest)
MAX_WORKERS = 256
#: changed files read per profile (about 0.8 ms each): past it, a file's
#: previous read stands in, or it waits for the next profile
MAX_READS = 8
#: rows a worker's file, and the merged profile, keep (each a worker writes is
#: read and checked by the training process's I/O thread)
TOP_ROWS = 30
WORKER_LOOP = "torch.utils.data._utils.worker"
#: the phase of a worker's samples
WORKER_PHASE = "worker"
SUFFIX = ".json"


def worker_dir(pid: int) -> str:
    """Where the workers of the hooked process ``pid`` write their profiles."""
    return os.path.join(paths.socket_dirs()[0], f"{pid}.workers")


def start_method() -> str | None:
    """How this process's multiprocessing children were started (``fork``,
    ``spawn``, ``forkserver``: a DataLoader's workers are such children);
    ``fork`` when any was forked; None without children (I/O thread: reads
    multiprocessing's own set of children, never joins or polls them)."""
    process = sys.modules.get("multiprocessing.process")
    try:
        children = list(getattr(process, "_children", ()))
    except RuntimeError:  # changed while copied: ask again next time
        return None
    methods = set()
    for child in children:
        method = getattr(type(child), "_start_method", None)
        if method is None:  # the default context's
            import multiprocessing  # loaded already: it started the child

            method = multiprocessing.get_start_method(allow_none=True)
            method = method or multiprocessing.get_all_start_methods()[0]
        methods.add(str(method))
    if not methods:
        return None
    return "fork" if "fork" in methods else sorted(methods)[0]


class WorkerProfiles:
    """The training process's side (the wrapper, reading and merging the
    workers' files) and, in a forked worker, the worker's sampler."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        #: why the worker loop is not wrapped (None: it is, or torch is not in yet)
        self.missing: str | None = None
        self.installed = False
        self._module: Any = None
        self._orig: Any = None
        self._wrapper: Any = None
        #: in a forked child of the hooked process: that process's pid
        self.forked_from: int | None = None
        self.sampler: Sampler | None = None
        #: file name -> ((mtime_ns, size), its profile): unchanged files are not read again
        self._read: dict[str, tuple[tuple[int, int], PythonProfile]] = {}

    # -- the training process ----------------------------------------------------------
    def install(self) -> None:
        """Wrap torch's DataLoader worker loop (once torch is imported)."""
        if self.installed:
            return
        try:
            module = importlib.import_module(WORKER_LOOP)
        except Exception as exc:
            self.missing = f"torch's worker loop could not be imported ({type(exc).__name__})"
            return
        orig = getattr(module, "_worker_loop", None)
        if not callable(orig):
            self.missing = "this torch has no DataLoader worker loop to hook"
            return
        if getattr(orig, "_gputui_wrapped", False):
            self.installed = True
            return
        owner = self

        # functools.wraps keeps the module and name: a spawned worker's target is
        # pickled by that name and is torch's own function in the new interpreter.
        @functools.wraps(orig)
        def _worker_loop(*args: Any, **kwargs: Any) -> Any:
            owner.start_in_worker()
            try:
                return orig(*args, **kwargs)
            finally:
                owner.finish_in_worker()

        _worker_loop._gputui_wrapped = True  # type: ignore[attr-defined]
        setattr(module, "_worker_loop", _worker_loop)  # noqa: B010
        self._module, self._orig, self._wrapper = module, orig, _worker_loop
        self.installed = True
        self.missing = None

    def uninstall(self) -> None:
        module, orig = self._module, self._orig
        if module is not None and getattr(module, "_worker_loop", None) is not orig:
            module._worker_loop = orig
        self._module = self._orig = None
        self.installed = False

    def note(self, loader: tuple[Any, ...] | None, found: int) -> str | None:
        """Why the profile holds no worker's samples (None when it does)."""
        if found:
            return None
        method = start_method()
        if loader is None:
            return "no DataLoader workers: no DataLoader iterated yet"
        workers = loader[0]
        if not workers:
            return "no DataLoader workers: num_workers=0 loads batches on the training thread"
        if method is not None and method != "fork":
            return (
                f"DataLoader workers not hooked: started with {method}, without gputui "
                "(only forked workers inherit the hook)"
            )
        if not self.installed:
            return f"DataLoader workers not hooked: {self.missing or 'torch not imported'}"
        if not env_enabled():
            return "DataLoader workers not sampled: the sampler is off"
        return (
            f"no samples from the DataLoader's {workers} workers yet (each writes every "
            f"{PERIOD_S:g} s)"
        )

    def collect(self, now: float | None = None) -> list[PythonProfile]:
        """The workers' newest profiles (I/O thread); stale files removed."""
        directory = worker_dir(self.pid)
        try:
            names = os.listdir(directory)
        except OSError:
            return []
        now = time.time() if now is None else now
        found: list[tuple[float, PythonProfile]] = []
        read, self._read = self._read, {}
        reads = 0
        for name in names:
            if not name.endswith(SUFFIX) or not name[: -len(SUFFIX)].isdigit():
                continue
            path = os.path.join(directory, name)
            try:
                st = os.lstat(path)
                if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FRAME:
                    continue
                if now - st.st_mtime > MAX_AGE_S:
                    os.unlink(path)
                    continue
                stamp = (st.st_mtime_ns, st.st_size)
                known = read.get(name)
                if known is not None and (known[0] == stamp or reads >= MAX_READS):
                    stamp, profile = known
                elif reads >= MAX_READS:
                    continue
                else:
                    reads += 1
                    with open(path, "rb") as fh:
                        data = fh.read(MAX_FRAME + 1)
                    profile = PythonProfile.from_wire(json.loads(data), name, nested=True)
            except (OSError, ValueError, SchemaError):
                continue  # vanished, half-written by a killed worker, or not ours
            self._read[name] = (stamp, profile)
            found.append((st.st_mtime, profile))
        found.sort(key=lambda item: -item[0])
        return [p for _, p in found[:MAX_WORKERS]]

    def remove_dir(self) -> None:
        """The training process exits: its workers' files go with it."""
        directory = worker_dir(self.pid)
        try:
            names = os.listdir(directory)
        except OSError:
            return
        for name in names:
            try:
                os.unlink(os.path.join(directory, name))
            except OSError:
                pass
        try:
            os.rmdir(directory)
        except OSError:
            pass

    # -- a forked worker -------------------------------------------------------------------
    def after_fork_in_child(self, parent: int) -> None:
        """Called in every forked child of the hooked process: no thread is
        started here (the fork may be anything); the worker loop's wrapper
        starts the sampler."""
        self.forked_from = parent
        self.sampler = None

    def start_in_worker(self) -> None:
        """In the wrapper of the worker loop: sample this worker when it is a
        forked child of the hooked process (never raises)."""
        try:
            parent = self.forked_from
            if parent is None or os.getppid() != parent or self.sampler is not None:
                return
            if not env_enabled():
                return
            directory = worker_dir(parent)
            # the hooked process may not have opened its socket (gputui run opens it
            # at the first step; the first epoch's workers start before it)
            paths.ensure_private_dir(os.path.dirname(directory))
            paths.ensure_private_dir(directory)
            rec = Recorder()
            rec.enter(WORKER_PHASE)  # this thread, in its one phase
            sampler = Sampler(rec, enabled=True)
            wrapper = self._wrapper
            if wrapper is not None:
                sampler.bottom = wrapper.__code__
            path = os.path.join(directory, f"{os.getpid()}{SUFFIX}")
            sampler.periodic = functools.partial(write_profile, sampler, path)
            sampler.periodic_s = PERIOD_S
            self.sampler = sampler
            sampler.start()
        except Exception:
            self.sampler = None  # unsampled: the worker goes on

    def finish_in_worker(self) -> None:
        """The worker loop returned (its DataLoader shut it down at the end of
        an epoch) or raised: the worker's sampler stops and writes its profile
        once more, so that a worker that lived less than ``PERIOD_S`` is seen
        too (never raises)."""
        sampler, self.sampler = self.sampler, None
        if sampler is None:
            return
        try:
            sampler.stop()
            if sampler.periodic is not None:
                sampler.periodic()
        except Exception:
            pass  # the worker exits without its last profile


def write_profile(sampler: Sampler, path: str) -> None:
    """The worker's profile to ``path`` (its sampler thread), replaced
    atomically; its top ``TOP_ROWS`` functions and lines only."""
    profile = merge([p for p in [sampler.snapshot()] if p is not None])
    if profile is None:
        return
    data = json.dumps(profile.to_wire(), separators=(",", ":")).encode()
    if len(data) > MAX_FRAME:
        return
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)


# -- merging -----------------------------------------------------------------------------------
def merge(profiles: Iterable[PythonProfile]) -> PythonProfile | None:
    """One profile of several workers: times summed per function and line
    (by file, name and kind); a function's line and call path are those of
    the worker where it took the most time."""
    profiles = [p for p in profiles if p.samples]
    if not profiles:
        return None
    funcs: dict[tuple[str, str, str], list[Any]] = {}
    lines: dict[tuple[str, int, str, str], list[float]] = {}
    frames: dict[PathFrame, int] = {}
    phases: dict[str, float] = {}
    kinds: dict[str, float] = {}
    # the split of time outside torch, where every worker's hook made one
    split = all(p.outside_phases_s is not None for p in profiles)
    outside: dict[str, float] = {}
    for p in profiles:
        _add(phases, p.phases_s)
        _add(kinds, p.kinds_s)
        _add(outside, p.outside_phases_s or {})
        for fn in p.functions:
            key = (fn.file, fn.function, fn.kind)
            have = funcs.get(key)
            if have is None:
                funcs[key] = have = [fn, 0.0, 0.0, 0.0, {}, {}, fn, p, 0.0]
            have[8] += fn.outside_s
            have[1] += fn.self_s
            have[2] += fn.total_s
            have[3] += fn.site_s
            _add(have[4], fn.phases_s)
            _add(have[5], fn.site_phases_s)
            if fn.time_s > have[6].time_s:
                have[6], have[7] = fn, p
        for ln in p.lines:
            lkey = (ln.file, ln.line, ln.function, ln.kind)
            lrow = lines.setdefault(lkey, [0.0, 0.0, 0.0])
            lrow[0] += ln.self_s
            lrow[1] += ln.total_s
            lrow[2] += ln.site_s
    rows = sorted(funcs.values(), key=lambda r: (-max(r[1], r[3]), -r[2]))[:TOP_ROWS]
    functions = []
    for first, self_s, total_s, site_s, fphases, sphases, best, owner, outside_s in rows:
        path = []
        for frame in owner.path_of(best):
            index = frames.get(frame)
            if index is None and len(frames) < MAX_PATH_FRAMES:
                index = frames[frame] = len(frames)
            if index is not None:
                path.append(index)
        functions.append(
            ProfileFunction(
                file=first.file,
                function=first.function,
                kind=first.kind,
                line=best.line,
                first_line=first.first_line,
                self_s=round(self_s, 6),
                total_s=round(total_s, 6),
                phases_s=fphases,
                site_s=round(site_s, 6),
                site_phases_s=sphases,
                path=tuple(path),
                path_cut=best.path_cut,
                outside_s=round(outside_s, 6),
            )
        )
    top_lines = sorted(lines.items(), key=lambda kv: -max(kv[1][0], kv[1][2]))[:TOP_ROWS]
    return PythonProfile(
        t=max(p.t for p in profiles),
        window_s=max(p.window_s for p in profiles),
        sampled_s=round(sum(p.sampled_s for p in profiles), 6),
        site_s=round(sum(p.site_s for p in profiles), 6),
        samples=sum(p.samples for p in profiles),
        interval_s=profiles[0].interval_s,
        functions=tuple(functions[:MAX_ROWS]),
        lines=tuple(
            ProfileLine(file, line, function, kind, *(round(v, 6) for v in times))
            for (file, line, function, kind), times in top_lines
        ),
        phases_s=phases,
        kinds_s=kinds,
        functions_seen=len(funcs),
        lines_seen=len(lines),
        truncated=any(p.truncated for p in profiles),
        frames=tuple(frames),
        outside_s=round(sum(outside.values()), 6) if split else None,
        outside_phases_s={k: round(v, 6) for k, v in outside.items()} if split else None,
    )
