"""The step's time account (DESIGN §10): every profiled step's wall time split
into exclusive buckets that sum to the step, the same from a live capture (the
hook's raw events) and from a trace file.

Each bucket is the union of its intervals over every host thread of the
process (backward runs its ops on the autograd engine's thread while the
training thread waits in ``backward()``), and claims only the time no earlier
bucket claimed, in the order data > user phase > communication > host sync >
kernel launch > torch dispatch; what is left of the step is Python outside
torch.  Standard library only: the hook computes it inside the job.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from gputui.protocol.trace_metrics import StepAccount
from gputui.trace.step_breakdown import COLLECTIVE_OPS, is_dataloader
from gputui.trace.timeline import (
    ANNOTATION,
    DRIVER,
    MEMCPY,
    OP,
    RUNTIME,
    SYNC,
    Interval,
    Timeline,
    length,
    merge,
    subtract,
)

#: runtime and driver calls in which the CPU waits for the GPU.  Not
#: ``cudaStreamWaitEvent``: it makes a stream wait, and returns at once.
SYNC_CALLS = frozenset(
    {
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cudaEventSynchronize",
        "cudaMemcpy",
        "cudaMemcpy2D",
        "cudaMemcpyFromSymbol",
        "cudaMemcpyToSymbol",
        "cudaMemset",
        "cuCtxSynchronize",
        "cuStreamSynchronize",
        "cuEventSynchronize",
        "cuMemcpyDtoH_v2",
        "cuMemcpyHtoD_v2",
        "hipDeviceSynchronize",
        "hipStreamSynchronize",
        "hipEventSynchronize",
        "hipMemcpy",
        "hipMemcpy2D",
        "hipMemset",
    }
)
#: runtime and driver calls that queue GPU work
LAUNCH_CALLS = frozenset(
    {
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cudaLaunchCooperativeKernel",
        "cudaGraphLaunch",
        "cudaMemcpyAsync",
        "cudaMemsetAsync",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cuGraphLaunch",
        "hipLaunchKernel",
        "hipExtLaunchKernel",
        "hipModuleLaunchKernel",
        "hipExtModuleLaunchKernel",
        "hipGraphLaunch",
        "hipMemcpyAsync",
        "hipMemsetAsync",
        "hipMemcpyWithStream",
    }
)
#: the hook's own user phases (``gputui.hook.phase("ckpt")``) appear as ranges
#: named with this prefix
PHASE_PREFIX = "gputui.phase:"
_COMM_PREFIXES = ("c10d::", "nccl:", "gloo:", "record_param_comms")


def _is_comm(name: str) -> bool:
    return name in COLLECTIVE_OPS or name.startswith(_COMM_PREFIXES)


def _role(name: str, kind: str) -> str | None:
    """The bucket a host range claims for (None: none, a step mark)."""
    if kind not in (OP, ANNOTATION):
        return None
    if is_dataloader(name):
        return "data"
    if name.startswith(PHASE_PREFIX):
        return "phase"
    if _is_comm(name):
        return "comm"
    if kind == OP and not name.startswith("ProfilerStep#"):
        return "dispatch"
    return None


class _Clipped:
    """A merged interval list, measured inside any window in O(log n)."""

    def __init__(self, merged: list[Interval]) -> None:
        self.starts = [s for s, _ in merged]
        self.ends = [e for _, e in merged]
        self.prefix = [0]
        for s, e in merged:
            self.prefix.append(self.prefix[-1] + e - s)

    def within(self, lo: int, hi: int) -> int:
        if hi <= lo or not self.starts:
            return 0
        i = bisect.bisect_right(self.ends, lo)  # first interval ending after lo
        j = bisect.bisect_left(self.starts, hi)  # first interval starting at/after hi
        if j <= i:
            return 0
        total = self.prefix[j] - self.prefix[i]
        if self.starts[i] < lo:
            total -= lo - self.starts[i]
        if self.ends[j - 1] > hi:
            total -= self.ends[j - 1] - hi
        return max(0, total)


def _count_within(starts: Sequence[int], lo: int, hi: int) -> int:
    return bisect.bisect_left(starts, hi) - bisect.bisect_left(starts, lo)


def _windows(timeline: Timeline) -> list[Interval]:
    steps = [(r.start_us, r.end_us) for r in timeline.step_ranges() if r.end_us > r.start_us]
    if steps:
        return steps
    host = [(r.start_us, r.end_us) for r in timeline.ranges if r.kind in (OP, ANNOTATION)]
    host += [(c.start_us, c.end_us) for c in timeline.runtime]
    if not host:
        return []
    return [(min(s for s, _ in host), max(e for _, e in host))]


def step_account(timeline: Timeline) -> StepAccount | None:
    """The mean account of the timeline's ``ProfilerStep`` ranges (the whole
    host span when it has none); None without host events."""
    windows = _windows(timeline)
    if not windows:
        return None
    raw: dict[str, list[Interval]] = {
        "data": [],
        "phase": [],
        "comm": [],
        "sync": [],
        "launch": [],
        "dispatch": [],
    }
    roles: dict[tuple[str, str], str | None] = {}  # a trace repeats few names
    for r in timeline.ranges:
        start, end = r.start_us, r.end_us
        if end <= start:
            continue
        key = (r.name, r.kind)
        role = roles.get(key, "")
        if role == "":
            role = roles[key] = _role(r.name, r.kind)
        if role is not None:
            raw[role].append((start, end))
    # An "async" copy from pageable host memory blocks the CPU until it is done
    # (it runs synchronously): host sync wait, not launch.
    blocking = {
        a.correlation
        for a in timeline.gpu
        if a.kind == MEMCPY and a.correlation >= 0 and "Pageable" in a.name
    }
    sync_starts: list[int] = []
    launch_starts: list[int] = []
    for c in timeline.runtime:
        if c.kind not in (RUNTIME, DRIVER):
            continue
        if c.name in SYNC_CALLS or (c.correlation in blocking and c.correlation >= 0):
            sync_starts.append(c.start_us)
            if c.end_us > c.start_us:
                raw["sync"].append((c.start_us, c.end_us))
        elif c.name in LAUNCH_CALLS:
            launch_starts.append(c.start_us)
            if c.end_us > c.start_us:
                raw["launch"].append((c.start_us, c.end_us))
        elif c.end_us > c.start_us:  # other runtime calls are torch's own overhead
            raw["dispatch"].append((c.start_us, c.end_us))
    sync_starts.sort()
    launch_starts.sort()
    # each bucket keeps only what the earlier ones left
    claimed: list[Interval] = []
    exclusive: dict[str, _Clipped] = {}
    for bucket in ("data", "phase", "comm", "sync", "launch", "dispatch"):
        mine = subtract(merge(raw[bucket]), claimed)
        exclusive[bucket] = _Clipped(mine)
        claimed = merge([*claimed, *mine])
    launched = _Launched(timeline)
    totals = dict.fromkeys(exclusive, 0)
    wall = 0
    gpu = 0
    for lo, hi in windows:
        wall += hi - lo
        for bucket, clipped in exclusive.items():
            totals[bucket] += clipped.within(lo, hi)
        gpu += launched.busy(lo, hi)
    n = len(windows)
    claimed_total = sum(totals.values())
    return StepAccount(
        steps=n,
        step_us=round(wall / n, 3),
        **{f"{b}_us": round(v / n, 3) for b, v in totals.items()},
        python_us=round(max(0, wall - claimed_total) / n, 3),
        gpu_busy_us=round(gpu / n, 3) if launched.any else None,
        sync_calls_per_step=round(
            sum(_count_within(sync_starts, lo, hi) for lo, hi in windows) / n, 3
        ),
        launch_calls_per_step=round(
            sum(_count_within(launch_starts, lo, hi) for lo, hi in windows) / n, 3
        ),
    )


class _Launched:
    """The GPU work each step queued: the activities joined by correlation id to
    the runtime calls made inside the step's window (the GPU runs them later,
    often after the CPU has moved on to the next step), else, in a trace without
    correlation ids, the activities inside the window."""

    def __init__(self, timeline: Timeline) -> None:
        work: dict[int, list[Interval]] = {}
        loose: list[Interval] = []
        for a in timeline.gpu:
            if a.kind == SYNC or a.stream == -1 or a.end_us <= a.start_us:
                continue
            if a.correlation >= 0:
                work.setdefault(a.correlation, []).append((a.start_us, a.end_us))
            else:
                loose.append((a.start_us, a.end_us))
        self.any = bool(work or loose)
        calls = sorted(
            (c.start_us, c.correlation) for c in timeline.runtime if c.correlation in work
        )
        self.call_starts = [t for t, _ in calls]
        self.call_ids = [corr for _, corr in calls]
        self.work = work
        self.loose = _Clipped(merge(loose))

    def busy(self, lo: int, hi: int) -> int:
        i = bisect.bisect_left(self.call_starts, lo)
        j = bisect.bisect_left(self.call_starts, hi)
        spans = [iv for corr in self.call_ids[i:j] for iv in self.work[corr]]
        return length(merge(spans)) + self.loose.within(lo, hi)
