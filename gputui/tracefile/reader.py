"""Read Chrome traces written by torch.profiler into timelines.

Accepts ``export_chrome_trace`` files, ``tensorboard_trace_handler`` directories
(``*.pt.trace.json[.gz]``), any ``.json`` / ``.json.gz`` trace, and gputui's own
capture traces.  Several files are several ranks (the rank from the trace's
``distributedInfo`` when it has one).

The file is parsed as a stream -- the top-level object key by key, then the
``traceEvents`` array a batch of whole events at a time (decoded by msgspec
into typed Structs, :mod:`gputui.tracefile.typed`, past the first megabyte),
each event turned into a small :mod:`gputui.trace.timeline` record at once --
so a large trace never sits in memory as text or as a list of dicts.
Bounded: only regular files, at most :data:`MAX_FILE_BYTES` on disk and
``json_stream.MAX_JSON_BYTES`` of JSON, no decompression ratio beyond
``json_stream.MAX_RATIO``.  Anything else -- a truncated file, a foreign format
-- is a :class:`TraceError` with one line naming the file and the problem.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from gputui import fmt
from gputui.protocol.op_rows import MAX_OP_ROWS, FlopTotals, OpRow
from gputui.protocol.value import ValueBase, value_class
from gputui.trace.links import relink
from gputui.trace.op_rows import ChromeTraceOps
from gputui.trace.timeline import Timeline, as_int
from gputui.tracefile.builder import Builder
from gputui.tracefile.json_stream import ByteSource, JsonStream, TraceError

if TYPE_CHECKING:
    from gputui.tracefile.typed import TypedReader

__all__ = ["DeviceProps", "Timeline", "TraceError", "TraceFile", "find_traces", "read_trace"]

MAX_FILE_BYTES = 2 << 30
#: the most files one command reads
MAX_FILES = 4096

TRACE_GLOBS = ("*.pt.trace.json", "*.pt.trace.json.gz")
JSON_GLOBS = ("*.json", "*.json.gz")


@value_class
class DeviceProps(ValueBase):
    """A GPU as the trace's ``deviceProperties`` describe it."""

    index: int
    name: str | None = None
    total_memory_bytes: int | None = None
    compute_capability: str | None = None  # "9.0"
    #: an AMD GPU under ROCm: its major.minor is a gfx architecture, not a CUDA
    #: compute capability (``compute_capability`` stays None)
    rocm: bool = False


@dataclass
class TraceFile:
    """One file's timeline and what its header says."""

    path: str
    timeline: Timeline
    rank: int | None = None  # distributedInfo.rank
    world_size: int | None = None
    devices: tuple[DeviceProps, ...] = ()
    json_bytes: int = 0  # decompressed size
    file_bytes: int = 0
    meta: dict[str, Any] = field(default_factory=dict)
    #: per op and input signature (traces recorded with shapes; the roofline)
    op_rows: tuple[OpRow, ...] = ()
    #: the FLOPs of the ops inside the host steps, and how many steps (traces
    #: recorded with shapes; the MFU)
    step_flops: tuple[FlopTotals, int] | None = None
    #: the process the host events ran in (the ``pid`` of the first CPU op)
    host_pid: int | None = None

    @property
    def trace_id(self) -> str | None:
        """The profiler's id of this capture (kineto's ``trace_id``): two files
        with the same one are copies of one trace."""
        value = self.meta.get("trace_id")
        return value if isinstance(value, str) and value else None


# -- finding and opening files -------------------------------------------------------------
def find_traces(paths: Sequence[str], repeated: list[str] | None = None) -> list[Path]:
    """The trace files named by ``paths``: files as given, directories by their
    ``*.pt.trace.json[.gz]`` files (else any ``*.json[.gz]``), sorted by name.
    A file named twice (``a.json a.json``, or a file and its directory) is read
    once; ``repeated`` gets a line for each one left out, and one for each
    directory whose other ``*.json[.gz]`` files its profiler traces leave out."""
    found: list[Path] = []
    for arg in paths:
        path = Path(arg)
        if path.is_dir():
            traces, jsons = _files(path, TRACE_GLOBS), _files(path, JSON_GLOBS)
            inside = traces or jsons
            if not inside:
                raise TraceError(f"{fmt.clean(arg)}: no trace files (*.pt.trace.json[.gz], *.json)")
            others = len(jsons) - len(traces) if traces else 0
            if others and repeated is not None:
                repeated.append(
                    f"{fmt.clean(arg)}: {others} other .json file{'s' * (others > 1)} left "
                    "out (a directory is read by its *.pt.trace.json[.gz] files; name a "
                    "file to read it)"
                )
            found.extend(inside)
        elif path.exists() or path.is_symlink():
            found.append(path)
        else:
            raise TraceError(f"{fmt.clean(arg)}: no such file or directory")
        if len(found) > MAX_FILES:
            raise TraceError(f"more than {MAX_FILES} trace files given")
    return _once_each(found, repeated)


def _files(directory: Path, globs: Sequence[str]) -> list[Path]:
    """The files in ``directory`` that match one of ``globs``, sorted."""
    return sorted({p for g in globs for p in directory.glob(g) if p.is_file()})


def _identity(path: Path) -> tuple[int, int] | str:
    try:
        st = path.stat()
    except OSError:  # said when it is read
        return os.path.abspath(path)
    return st.st_dev, st.st_ino


def _once_each(found: Sequence[Path], repeated: list[str] | None) -> list[Path]:
    first: dict[tuple[int, int] | str, Path] = {}
    out: list[Path] = []
    for path in found:
        key = _identity(path)
        if key in first:
            if repeated is not None:
                name, earlier = fmt.clean(str(path)), fmt.clean(str(first[key]))
                same = "given twice" if name == earlier else f"the same file as {earlier}"
                repeated.append(f"{name}: {same}; read once")
            continue
        first[key] = path
        out.append(path)
    return out


def _open_regular(path: Path) -> tuple[BinaryIO, int]:
    """Open ``path`` for reading if it is a regular file of a sane size.  The
    check is on the opened descriptor (no race), non-blocking so a FIFO cannot
    hang the open."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise TraceError(f"{fmt.clean(str(path))}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TraceError(f"{fmt.clean(str(path))}: not a regular file")
        if st.st_size > MAX_FILE_BYTES:
            raise TraceError(
                f"{fmt.clean(str(path))}: {fmt.size(st.st_size)} is more than the "
                f"{fmt.size(MAX_FILE_BYTES)} a trace may be"
            )
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb"), st.st_size
    except BaseException:
        os.close(fd)
        raise


# -- the header and the reading ----------------------------------------------------------
#: what a trace recorded under ROCm writes in its header (roctracer's and
#: HIP's versions; CUDA traces write ``cuda_runtime_version`` and the like)
_ROCM_KEYS = ("roctracer_version", "hip_runtime_version", "hip_driver_version")


def is_rocm(meta: dict[str, Any]) -> bool:
    """Whether a trace's header says it was recorded under ROCm (an AMD GPU):
    its HIP or roctracer versions, or a device of 64-lane wavefronts (NVIDIA's
    warps have 32)."""
    if any(key in meta for key in _ROCM_KEYS):
        return True
    props = meta.get("deviceProperties")
    return isinstance(props, list) and any(
        isinstance(p, dict) and p.get("warpSize") == 64 for p in props[:64]
    )


def _devices(meta: dict[str, Any]) -> tuple[DeviceProps, ...]:
    props = meta.get("deviceProperties")
    if not isinstance(props, list):
        return ()
    rocm = is_rocm(meta)
    out: list[DeviceProps] = []
    for p in props[:64]:
        if not isinstance(p, dict):
            continue
        major, minor = p.get("computeMajor"), p.get("computeMinor")
        versioned = type(major) is int and type(minor) is int
        mem = p.get("totalGlobalMem")
        name = p.get("name")
        name = name if isinstance(name, str) else None
        if rocm and not name:
            # ROCm writes no name; its major.minor is the gfx family (9.4: gfx94x, MI300)
            name = f"AMD GPU (gfx{major}{minor}x)" if versioned else "AMD GPU"
        out.append(
            DeviceProps(
                index=as_int(p.get("id"), len(out)),
                name=name,
                total_memory_bytes=mem if type(mem) is int and mem >= 0 else None,
                compute_capability=f"{major}.{minor}" if versioned and not rocm else None,
                rocm=rocm,
            )
        )
    return tuple(out)


#: the typed decoder takes over once this much JSON has been read: below it the
#: standard decoder is as fast, and a small trace does not import msgspec (10 ms)
TYPED_FROM_BYTES = 1 << 20
#: a trace of less JSON than this is read by the standard decoder alone:
#: importing msgspec and making its decoders costs more than they save on it
#: (traces of 1.1-2.6 MB read 4-20 ms faster without; docs/benchmarks.md)
TYPED_MIN_JSON = 3 << 20


def json_size(raw: BinaryIO, file_bytes: int) -> int | None:
    """The JSON bytes of a trace file: its size, or, gzipped, the size its
    trailer records (modulo 4 GiB, of its last member: a hint, not a bound);
    None for a gzip file too large to hold less than :data:`TYPED_MIN_JSON`.
    Leaves ``raw`` at its start."""
    head = raw.read(2)
    try:
        if head != b"\x1f\x8b":
            return file_bytes
        if file_bytes >= TYPED_MIN_JSON or file_bytes < 18:  # (18: a gzip's least)
            return None
        raw.seek(file_bytes - 4)
        return int.from_bytes(raw.read(4), "little")
    finally:
        raw.seek(0)


#: what a reader says while it reads: bytes of the file read, events decoded
Progress = Callable[[int, int], None]


def _disk_bytes(path: str | Path) -> int:
    """The size of the file at ``path`` (0 where it cannot say: read says why)."""
    try:
        return os.stat(path).st_size
    except (OSError, ValueError):
        return 0


def _farm_of(reader: TypedReader, workers: int) -> list[Any]:
    """The workers for the rest of a trace, once the reader's first batches
    have settled what a batch's reading depends on; [] while they have not,
    [None] where the trace is read here to the end."""
    from gputui.tracefile.farm import Farm, FarmFailed, can_fork

    ops = reader.ops
    if reader.builder.threads or not can_fork():
        return [None]  # (threads named by strings: numbered in the order they come)
    if not (ops.given_up or ops.has_shapes):
        return []  # the op rows have not yet said whether the trace has shapes
    try:
        return [Farm(reader, workers)]
    except FarmFailed:
        return [None]


def read_trace(
    path: str | Path,
    progress: Progress | None = None,
    *,
    typed: bool = True,
    workers: int = 0,
) -> TraceFile:
    """One trace file as a :class:`TraceFile`; :class:`TraceError` if it is not
    a readable Chrome trace.

    The events are decoded into typed Structs (:mod:`gputui.tracefile.typed`),
    batch by batch, once :data:`TYPED_FROM_BYTES` of JSON have been read (the
    first batches by the standard decoder into dicts, and all of a trace of
    less than :data:`TYPED_MIN_JSON`);
    ``typed=False`` reads every batch with the standard decoder (the reader
    before the typed one, kept to compare them).
    ``workers``: at most this many forked processes decode the batches of a
    large trace beside this one (:mod:`gputui.tracefile.farm`; fewer than 2:
    none), with the same result.
    ``progress``, when given, is called after each batch with the bytes of the
    file read so far and the events decoded."""
    if typed and workers >= 2 and _disk_bytes(path) >= TYPED_MIN_JSON:
        from gputui.tracefile.farm import FarmFailed

        try:
            return _read(Path(path), progress, typed, workers)
        except FarmFailed:
            pass  # read again in this process alone
    return _read(Path(path), progress, typed, 0)


def _read(path: Path, progress: Progress | None, typed: bool, workers: int) -> TraceFile:
    where = fmt.clean(str(path), 300)
    raw, file_bytes = _open_regular(path)
    builder = Builder()
    counter = [0, 0]
    farm: list[Any] = []  # the workers, once started (None: they will not be)
    spare = False
    with raw:
        ops = ChromeTraceOps()
        hook = None
        size = json_size(raw, file_bytes)
        if typed and (size is None or size >= TYPED_MIN_JSON):
            typed_batch: list[TypedReader] = []
            if workers:
                from gputui.tracefile import farm as farms

                # a CPU beyond the workers' and this process's: the inflating
                # thread's (on fewer it slows them: 5% on two CPUs)
                wanted = farms.workers_wanted(size, workers)
                spare = workers - wanted >= 2
                workers = wanted

            def hook(text: memoryview) -> bool:
                if not typed_batch:
                    if counter[0] < TYPED_FROM_BYTES:
                        return False
                    from gputui.tracefile.typed import TypedReader

                    typed_batch.append(TypedReader(builder, ops))
                reader = typed_batch[0]
                if workers and not farm and counter[0] >= farms.FARM_FROM_BYTES:
                    farm.extend(_farm_of(reader, workers))
                    if farm and inflate and (spare or farm[0] is None):
                        source.ahead()  # (a thread: only once the workers are forked)
                if farm and farm[0] is not None:
                    if farm[0].submit(text):
                        if progress is not None:
                            progress(counter[1], builder.timeline.events)
                        return True
                    farm[0].drain()  # (a batch too large for a worker: read here)
                took = reader.batch(text)
                if took and progress is not None:
                    progress(counter[1], builder.timeline.events)
                return took

        source = ByteSource(raw, file_bytes, where, counter)
        # a large gzip file is inflated by a thread ahead of the reader
        inflate = source.compressed and file_bytes >= TYPED_MIN_JSON
        if inflate and not workers:
            source.ahead()
        stream = JsonStream(source.read_into, where, hook)

        def add(events: list[Any]) -> None:
            builder.add(events)
            ops.add(events)

        def each(events: list[Any]) -> None:
            if farm and farm[0] is not None:
                farm[0].add(events, add)  # after what the workers hold
            else:
                add(events)
            if progress is not None:
                progress(counter[1], builder.timeline.events)

        try:
            meta = stream.document(each)
            if farm and farm[0] is not None:
                farm[0].finish()
            if progress is not None:  # every byte read, every batch taken back
                progress(counter[1], builder.timeline.events)
        except TraceError:
            if farm and farm[0] is not None:
                # a batch the workers find is not JSON (FarmFailed) misled the
                # stream: that, not this error, is what to say
                farm[0].finish()
            raise
        finally:
            source.close()
            if farm and farm[0] is not None:
                farm[0].kill()
    return _trace_file(path, where, builder, ops, meta, counter[0], file_bytes)


def _trace_file(
    path: Path,
    where: str,
    builder: Builder,
    ops: ChromeTraceOps,
    meta: dict[str, Any],
    json_bytes: int,
    file_bytes: int,
) -> TraceFile:
    """What a file's events and header keys make, once read."""
    tl = builder.timeline
    if not tl.events:
        raise TraceError(f"{where}: a trace with no events")
    if tl.skipped == tl.events:
        raise TraceError(
            f"{where}: not a Chrome trace (none of its {tl.events:,} entries is an event object)"
        )
    links = relink(tl)  # a trace whose ids are correlations: its launches' ops by time
    if links is not None:
        ops.relink(links)
    info = meta.get("distributedInfo")
    rank = world = None
    if isinstance(info, dict):
        rank_v, world_v = info.get("rank"), info.get("world_size")
        rank = rank_v if type(rank_v) is int and rank_v >= 0 else None
        world = world_v if type(world_v) is int and world_v > 0 else None
    return TraceFile(
        path=str(path),
        timeline=builder.timeline,
        rank=rank,
        world_size=world,
        devices=_devices(meta),
        json_bytes=json_bytes,
        file_bytes=file_bytes,
        meta={k: v for k, v in meta.items() if k != "deviceProperties"},
        op_rows=tuple(ops.rows(MAX_OP_ROWS)),
        step_flops=ops.step_totals(),
        host_pid=builder.host_pid,
    )
