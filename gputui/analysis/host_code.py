"""The training thread's time in code outside torch, from the hook's Python
stack sampler (DESIGN §12: evidence that is always there, no capture needed).

The sampler weighs each sample of the training thread's stack by the time since
the previous one, and says whether the sample was in code outside torch: its
innermost frame, a standard-library frame counting as its caller's, is the
job's own code or a library's, not torch's own Python and C++ (the autograd
engine, optimizers, module calls, data loading, torch.compile's runtime and
the libraries it runs) (docs/hook.md, "Python stack sampler").  Here that time
is split by where in the step it falls:

- **the loop**: the optimizer phase and the time outside every phase
  (``other``), where the training loop's own code runs;
- **the model**: forward and backward.  A line of the model that calls a torch
  op implemented in C (``x @ w``, ``torch.cat``) is sampled as that line, so the
  sampler cannot tell the model's Python from the ops it issues: only a
  capture's step account can, and this part counts only beside one;
- **user phases** (``gputui.hook.phase``), by name;
- data loading and communication are the step account's own buckets.

A profile from a hook that predates the split (no ``outside_phases_s``) is
estimated from its functions: their kind and, for a library's function, the
callers on its hottest stack (its other stacks are not known).

The same for the DataLoader's work: the function the workers (or, with
``num_workers=0``, the training thread's data phase) spend their time in.
Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import field

from gputui import fmt
from gputui.analysis import thresholds
from gputui.protocol.messages import BACKWARD, COMM, DATA, FORWARD, OPTIMIZER, OTHER
from gputui.protocol.profile import (
    KIND_LIB,
    KIND_TORCH,
    KIND_USER,
    PathFrame,
    ProfileFunction,
    PythonProfile,
)
from gputui.protocol.value import ValueBase, value_class

#: the phases where the training loop's own code runs
LOOP_PHASES = frozenset({OTHER, OPTIMIZER})
#: the model's phases: its lines issue torch ops the sampler cannot tell apart
MODEL_PHASES = frozenset({FORWARD, BACKWARD})
#: phases that are buckets of their own in the step account
NOT_HOST_CODE = frozenset({DATA, COMM})
#: a profile needs this many samples before its shares count
MIN_SAMPLES = int(thresholds.value("min.profile_samples"))
#: functions a finding names
NAMED = 3
#: a function is named from this share of the sampled time
NAMED_SHARE = 0.01
#: a function runs "in" a phase that holds this share of its time
ONE_PHASE = 0.9
#: torch's compiler stack (the libraries it runs are torch's: triton, sympy)
_COMPILER = (
    "/torch/_dynamo/",
    "/torch/_inductor/",
    "/torch/_functorch/",
    "/torch/fx/",
    "/torch/_subclasses/",
    "/torch/_higher_order_ops/",
    "/torch/utils/_sympy/",
    "/torch/_export/",
    "/torch/export/",
    "/torch/_prims/",
    "/torch/_prims_common/",
    "/torch/_refs/",
    "/torch/_decomp/",
    "/torch/_guards.py",
    "/torchinductor_",
    "<eval_with_key>",
)


def _third_party(file: str) -> bool:
    """A library's file (site- or dist-packages), not the standard library's."""
    path = file.replace("\\", "/")
    return "/site-packages/" in path or "/dist-packages/" in path


def _compiler(file: str) -> bool:
    path = file.replace("\\", "/")
    return any(part in path for part in _COMPILER)


def estimated_outside(profile: PythonProfile, f: ProfileFunction) -> bool:
    """Whether ``f``'s self time is in code outside torch, for a profile whose
    hook did not say (the sampler's rule on its hottest stack): the job's own
    code is; torch's is not; a library's is, unless torch's compiler called it,
    and a standard-library function is its nearest caller's."""
    if f.kind == KIND_USER:
        return True
    if f.kind != KIND_LIB:
        return False
    frames: list[ProfileFunction | PathFrame] = [f, *reversed(profile.path_of(f))]
    in_library = False
    for frame in frames:
        if frame.kind == KIND_LIB:
            in_library = in_library or _third_party(frame.file)
            continue
        if frame.kind == KIND_USER:
            return True
        if frame.kind == KIND_TORCH:
            return in_library and not _compiler(frame.file)
        return False
    return True


def phases_of(f: ProfileFunction) -> Mapping[str, float]:
    """``f``'s self time by phase (all of it outside every phase where the
    profile did not split it)."""
    return f.phases_s or ({OTHER: f.self_s} if f.self_s > 0 else {})


def _outside_s(profile: PythonProfile, f: ProfileFunction, phases: Iterable[str]) -> float:
    """``f``'s self time outside torch in ``phases``."""
    names = frozenset(phases)
    by_phase = phases_of(f)
    own = sum(s for p, s in by_phase.items() if p in names)
    if own <= 0:
        return 0.0
    if profile.outside_phases_s is None:
        return own if estimated_outside(profile, f) else 0.0
    total = sum(by_phase.values())
    return f.outside_s * own / total if total > 0 else 0.0


def _by_function(profile: PythonProfile) -> list[tuple[ProfileFunction, dict[str, float]]]:
    """Each function with self time outside torch, and that time by phase."""
    exact = profile.outside_phases_s is not None
    out = []
    for f in profile.functions:
        by_phase = phases_of(f)
        if not by_phase:
            continue
        if exact:
            total = sum(by_phase.values())
            if f.outside_s > 0 and total > 0:
                k = f.outside_s / total
                out.append((f, {p: s * k for p, s in by_phase.items()}))
        elif estimated_outside(profile, f):
            out.append((f, dict(by_phase)))
    return out


def outside_phases(
    profile: PythonProfile, split: list[tuple[ProfileFunction, dict[str, float]]] | None = None
) -> dict[str, float]:
    """Seconds in code outside torch by phase: the hook's own split, else the
    estimate from the profile's functions (``split``: their split, when known)."""
    if profile.outside_phases_s is not None:
        return dict(profile.outside_phases_s)
    out: dict[str, float] = {}
    for _f, by_phase in _by_function(profile) if split is None else split:
        for phase, s in by_phase.items():
            out[phase] = out.get(phase, 0.0) + s
    return out


def _caller(profile: PythonProfile, f: ProfileFunction) -> PathFrame | None:
    """The nearest frame of the job's own code that called a library's ``f``."""
    if f.kind == KIND_USER:
        return None
    return next((x for x in reversed(profile.path_of(f)) if x.kind == KIND_USER), None)


def where(f: ProfileFunction | PathFrame) -> str:
    """``data.py:12``: the file's name and the line (cleaned)."""
    name = f.file.replace("\\", "/").rsplit("/", 1)[-1]
    return f"{fmt.clean(name, 120)}:{f.line}"


@value_class
class HotFunction(ValueBase):
    """A function that holds time outside torch: its ``share`` of the time the
    shares are of, the nearest of the job's own functions that called it (a
    library's function), and the one phase it runs in, where it has one."""

    function: ProfileFunction
    share: float
    caller: PathFrame | None = None
    phase: str | None = None

    @property
    def label(self) -> str:
        """``sort (fromnumeric.py:1092)``."""
        return f"{fmt.clean(self.function.function, 80)} ({where(self.function)})"

    @property
    def called_from(self) -> str:
        """``, called from hot_numpy (train.py:64)`` ('' for the job's own)."""
        caller = self.caller
        if caller is None:
            return ""
        return f", called from {fmt.clean(caller.function, 80)} ({where(caller)})"

    @property
    def off_cpu(self) -> float:
        """The share of its time the training thread spent there off the CPU
        (sleeping, blocked in I/O or on a lock); 0 from a hook that predates it."""
        f = self.function
        return min(1.0, f.off_cpu_s / f.time_s) if f.time_s > 0 else 0.0

    @property
    def words(self) -> str:
        """``sort (fromnumeric.py:1092) 73%, called from hot_numpy (train.py:64)``."""
        return f"{self.label} {self.share * 100:.0f}%{self.called_from}"


@value_class
class HostCode(ValueBase):
    """The training thread's time in code outside torch, as shares of the
    sampled time (about the step's wall time: the sampler weighs samples by
    the time between them)."""

    #: in the loop (optimizer, and the time outside every phase)
    loop: float
    #: in the model's forward and backward (only a capture separates it from the
    #: torch ops its lines issue)
    model: float
    #: in each user phase
    phases: Mapping[str, float] = field(default_factory=dict)
    samples: int = 0
    window_s: float = 0.0
    #: the hook's own split (False: estimated from the functions)
    exact: bool = True
    #: the functions holding it in the loop and the user phases, most first
    functions: tuple[HotFunction, ...] = ()
    #: the same, with the model's phases too
    all_functions: tuple[HotFunction, ...] = ()
    #: of the time in code outside torch, the share the training thread spent
    #: off the CPU (sleeping, blocked in I/O or on a lock), by its own CPU
    #: clock; None from a hook that predates it
    off_cpu: float | None = None

    @property
    def user_phases(self) -> float:
        return sum(self.phases.values())

    @property
    def counted(self) -> float:
        """What counts without a capture: the loop and the user phases."""
        return self.loop + self.user_phases

    def where_words(self, model: bool = False) -> str:
        """``the user phase augment 73%, the loop 2%``."""
        parts = [
            (f"the user phase {fmt.clean(p, 40)}", s)
            for p, s in sorted(self.phases.items(), key=lambda kv: -kv[1])
        ]
        parts.append(("the loop", self.loop))
        if model:
            parts.append(("forward and backward", self.model))
        return ", ".join(f"{name} {s * 100:.0f}%" for name, s in parts if s >= 0.005)

    def named(self, model: bool = False) -> str:
        """The functions that hold it, as a finding names them."""
        rows = self.all_functions if model else self.functions
        return "; ".join(h.words for h in rows)


def _hot(
    profile: PythonProfile,
    split: list[tuple[ProfileFunction, dict[str, float]]],
    phases: frozenset[str],
    base: float,
    n: int = NAMED,
) -> tuple[HotFunction, ...]:
    """The ``n`` functions with the most time outside torch in ``phases``, as
    shares of ``base`` seconds."""
    rows = []
    for f, by_phase in split:
        mine = {p: v for p, v in by_phase.items() if p in phases}
        s = sum(mine.values())
        if base > 0 and s / base >= NAMED_SHARE:
            rows.append((s, f, mine))
    rows.sort(key=lambda r: -r[0])
    out = []
    for s, f, mine in rows[:n]:
        one = max(mine.items(), key=lambda kv: kv[1])
        phase = one[0] if one[1] >= ONE_PHASE * s else None
        out.append(HotFunction(f, s / base, _caller(profile, f), phase))
    return tuple(out)


#: the last profile read and what it said (the ledger, the rule and the
#: account read the same profile in turn)
_last: tuple[PythonProfile | None, HostCode | None] = (None, None)


def host_code(profile: PythonProfile | None) -> HostCode | None:
    """What ``profile`` says of the training thread's time in code outside
    torch; None without one, or before it holds ``min.profile_samples``."""
    global _last
    last = _last
    if profile is not None and last[0] is profile:
        return last[1]
    found = _host_code(profile)
    _last = (profile, found)
    return found


def _host_code(profile: PythonProfile | None) -> HostCode | None:
    if profile is None or profile.samples < MIN_SAMPLES or profile.sampled_s <= 0:
        return None
    split = _by_function(profile)
    by_phase = outside_phases(profile, split)
    base = profile.sampled_s
    loop = sum(s for p, s in by_phase.items() if p in LOOP_PHASES) / base
    model = sum(s for p, s in by_phase.items() if p in MODEL_PHASES) / base
    skip = LOOP_PHASES | MODEL_PHASES | NOT_HOST_CODE
    user = {p: s / base for p, s in by_phase.items() if p not in skip and s > 0}
    counted = LOOP_PHASES | frozenset(user)
    return HostCode(
        loop=min(1.0, loop),
        model=min(1.0, model),
        phases=user,
        samples=profile.samples,
        window_s=profile.window_s,
        exact=profile.outside_phases_s is not None,
        functions=_hot(profile, split, counted, base),
        all_functions=_hot(profile, split, counted | MODEL_PHASES, base),
        off_cpu=(
            min(1.0, profile.outside_off_cpu_s / profile.outside_s)
            if profile.outside_off_cpu_s is not None and profile.outside_s
            else None
        ),
    )


@value_class
class LoadingHot(ValueBase):
    """The function the DataLoader's work goes to: in its worker processes, or
    (``num_workers=0``) on the training thread while it waits for data."""

    hot: HotFunction
    #: the worker processes sampled (0: the training thread's data phase)
    workers: int = 0


def _loading_rows(profile: PythonProfile, phase: str | None) -> list[tuple[float, ProfileFunction]]:
    """(seconds, function): the job's own functions by site time (with what they
    call), the others by their self time outside torch; in ``phase`` only
    where given."""
    rows = []
    for f in profile.functions:
        if f.kind == KIND_USER:
            s = f.site_s if phase is None else f.site_phases_s.get(phase, 0.0)
            if phase is not None and s < f.site_s / 2:
                # the loop's own function (train(), a framework's fit call): the
                # innermost job frame of every phase, not the loading's code
                continue
        elif f.kind == KIND_LIB:
            s = _outside_s(profile, f, phases_of(f) if phase is None else (phase,))
        else:
            continue
        if s > 0:
            rows.append((s, f))
    return rows


def loading_hot(profile: PythonProfile | None) -> LoadingHot | None:
    """The function that holds most of the data loading's sampled time (its
    share of the workers' time, or of the training thread's data phase), where
    the loading is sampled; None otherwise."""
    if profile is None:
        return None
    workers = profile.workers
    if workers is not None:
        if workers.samples < MIN_SAMPLES or workers.sampled_s <= 0:
            return None
        source, phase, base = workers, None, workers.sampled_s
    else:
        base = profile.phases_s.get(DATA, 0.0)
        if profile.samples < MIN_SAMPLES or base <= 0:
            return None
        source, phase = profile, DATA
    rows = _loading_rows(source, phase)
    if not rows:
        return None
    s, f = max(rows, key=lambda r: r[0])
    hot = HotFunction(f, min(1.0, s / base), _caller(source, f))
    return LoadingHot(hot, profile.worker_processes if workers is not None else 0)


#: the worker loop's wait for its next batch's indices (``index_queue.get``)
_WORKER_GET = ("/multiprocessing/queues.py", "Queue.get")
#: where a blocked wait's time lands as self time
_WAIT_FILES = ("/selectors.py",)
#: a batch received from a worker on the training thread: the pipe, the passed
#: descriptors of its shared memory, and torch rebuilding its tensors
_RECEIVE_FILES = (
    "/multiprocessing/connection.py",
    "/multiprocessing/reduction.py",
    "/torch/multiprocessing/reductions.py",
)


@value_class
class WorkersWait(ValueBase):
    """How the DataLoader's workers spend their sampled time: waiting for the
    next batch's indices (``idle``), and, of the rest, in the job's own code
    (``own``: decoding, augmenting) rather than torch's fetching and collating;
    ``receive``: the training thread's share of its data wait spent receiving
    batches from them (None where its data phase is not sampled)."""

    workers: int
    idle: float
    own: float
    receive: float | None


def _file_is(file: str, ends: tuple[str, ...]) -> bool:
    path = file.replace("\\", "/")
    return path.endswith(ends)


def workers_wait(profile: PythonProfile | None) -> WorkersWait | None:
    """Where the job's DataLoader workers are sampled: how much of their time
    they wait for work.  The worker loop's ``index_queue.get`` holds the wait
    (its total time); where that row is not in the table, the selector calls
    the wait blocks in (their self time)."""
    if profile is None or profile.workers is None:
        return None
    workers = profile.workers
    base = workers.sampled_s
    if workers.samples < MIN_SAMPLES or base <= 0:
        return None
    get = sum(
        f.total_s
        for f in workers.functions
        if f.function == _WORKER_GET[1] and _file_is(f.file, (_WORKER_GET[0],))
    )
    blocked = sum(f.self_s for f in workers.functions if _file_is(f.file, _WAIT_FILES))
    idle = min(1.0, max(get, blocked) / base)
    busy = base * (1.0 - idle)
    # the job's code: the profile's site time, or its outermost function's
    site = max([workers.site_s, *(f.site_s for f in workers.functions if f.kind == KIND_USER)])
    own = min(1.0, site / busy) if busy > 0 else 0.0
    data = profile.phases_s.get(DATA, 0.0)
    receive = None
    if profile.samples >= MIN_SAMPLES and data > 0:
        got = sum(
            f.phases_s.get(DATA, 0.0) for f in profile.functions if _file_is(f.file, _RECEIVE_FILES)
        )
        receive = min(1.0, got / data)
    return WorkersWait(profile.worker_processes, idle, own, receive)


#: torch's in-memory datasets (TensorDataset, Subset, ConcatDataset) and its collating
_DATASET_FILES = ("/torch/utils/data/dataset.py",)
_COLLATE_FILES = ("/torch/utils/data/_utils/collate.py",)


@value_class
class InMemoryData(ValueBase):
    """A data wait on the training thread (``num_workers=0``) spent mostly in
    torch's own datasets indexing tensors in host memory: ``indexing`` is its
    share of the data wait, ``collating`` the share spent stacking samples
    into a batch (the batch was indexed a sample at a time)."""

    indexing: float
    collating: float


def in_memory_data(profile: PythonProfile | None) -> InMemoryData | None:
    """Where the training thread's data phase is sampled and torch's dataset
    indexing holds at least half of it: how much, and how much collating."""
    if profile is None or profile.samples < MIN_SAMPLES:
        return None
    data = profile.phases_s.get(DATA, 0.0)
    if data <= 0:
        return None

    def share(ends: tuple[str, ...]) -> float:
        got = sum(f.phases_s.get(DATA, 0.0) for f in profile.functions if _file_is(f.file, ends))
        return min(1.0, got / data)

    indexing, collating = share(_DATASET_FILES), share(_COLLATE_FILES)
    if indexing <= 0 or indexing + collating < 0.5:
        return None
    return InMemoryData(indexing, collating)
