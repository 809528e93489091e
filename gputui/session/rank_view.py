"""The local ranks of a multi-rank job side by side: one row of plain values per
rank (step times, phase shares, communication wait, memory, its GPU, steps
behind the leader, where it is now), the job's state (a rank stalled, a rank
gone), and the evidence the rank rules read.

The rank view, ``attach --once`` and its JSON all call :func:`summarize`, so they
show the same numbers.  Pure: values in (what each rank's hook sent, and its
GPU's samples), values out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gputui.analysis.evidence import (
    MIN_STEPS,
    RankEvidence,
    RanksEvidence,
)
from gputui.analysis.roofline import Roof
from gputui.protocol.capture import CaptureResult, CpuOpRow, KernelRow
from gputui.protocol.compile import CompileReport
from gputui.protocol.memsnap import MemorySnapshotResult
from gputui.protocol.messages import BACKWARD, COMM
from gputui.protocol.profile import PythonProfile
from gputui.protocol.schema import Hello, MemorySample, Status, StepRecord
from gputui.session.evidence import evidence
from gputui.snapshot.model import DeviceSnapshot
from gputui.trace.kernels import COMMUNICATION

#: a step in progress for this long, and STALL_FACTOR times the rank's usual
#: step, is stalled (a hang, a rank waiting for one that hangs)
STALL_S = 5.0
STALL_FACTOR = 10.0
#: phases in which a rank waits for its peers: explicit collectives, and the end
#: of a DDP backward (the all-reduce wait is only cut out of backward at its exit)
WAIT_PHASES = frozenset({COMM, BACKWARD})
#: steps each rank's statistics cover (the newest)
WINDOW = 1000
#: steps of compute history per rank (the view's sparklines)
HISTORY = 240
#: kernel rows and CPU-op rows kept per rank's capture
TOP_KERNELS = 10
TOP_OPS = 5

#: a synchronized capture starts this far ahead of the leading rank, so that its
#: request reaches every rank before the step (at least SYNC_LEAD_STEPS steps)
SYNC_LEAD_S = 0.5
SYNC_LEAD_STEPS = 2
SYNC_LEAD_MAX = 500

RUNNING = "running"
STALLED = "stalled"
EXITED = "exited"
STARTING = "starting"  # connected, no step yet


@dataclass(frozen=True)
class RankInput:
    """What one rank's session holds: its hook's messages, its GPU's samples."""

    hello: Hello
    steps: Sequence[StepRecord] = ()
    status: Status | None = None
    memory: Sequence[tuple[MemorySample, int | None]] = ()
    capture: CaptureResult | None = None
    gpu: Sequence[DeviceSnapshot] = ()
    memory_snapshot: MemorySnapshotResult | None = None
    #: the rank's GPU's ceilings (measured by gputui bench, else the datasheet)
    roof: Roof | None = None
    #: the rank's training thread's newest Python profile
    python_profile: PythonProfile | None = None
    #: what torch.compile did in the rank
    compile_report: CompileReport | None = None
    #: why the connection ended (None while connected), and whether the job said bye
    gone: str | None = None
    gone_clean: bool = False


@dataclass(frozen=True)
class RankCapture:
    """A rank's latest capture, reduced to what the rank view compares."""

    first_step: int | None
    last_step: int | None
    span_us: float | None
    busy_pct: float | None
    comm_us: float
    comm_span_share: float | None
    overlap: float | None
    kernels: tuple[KernelRow, ...]
    #: the top CPU ops by self time (what a CPU job's capture has)
    cpu_ops: tuple[CpuOpRow, ...]
    trace_path: str | None

    @classmethod
    def of(cls, cap: CaptureResult) -> RankCapture:
        gpu = cap.gpu_time
        span = None if gpu is None else gpu.span_us
        comm = float(cap.by_class.get(COMMUNICATION, 0.0))
        return cls(
            first_step=cap.first_step,
            last_step=cap.last_step,
            span_us=span,
            busy_pct=None if gpu is None else gpu.busy_pct,
            comm_us=comm,
            comm_span_share=comm / span if span else None,
            overlap=cap.comm_compute_overlap,
            kernels=tuple(cap.kernels[:TOP_KERNELS]),
            cpu_ops=tuple(cap.cpu_ops[:TOP_OPS]),
            trace_path=cap.trace_path,
        )


@dataclass(frozen=True)
class RankRow:
    """One rank as the rank view shows it (seconds, bytes, 0..1 shares)."""

    pid: int
    rank: int | None
    local_rank: int | None
    state: str  # RUNNING, STALLED, EXITED, STARTING
    note: str | None  # why it exited, where it is stuck
    steps: int  # step records received
    last_step: int | None
    behind: int | None  # steps behind the leader
    step_p50_s: float | None
    step_p90_s: float | None
    #: wall-time share per phase over its window (display order)
    phase_shares: tuple[tuple[str, float], ...]
    comm_s: float | None  # mean per step
    comm_share: float | None
    compute_s: float | None  # mean step less comm
    mem_allocated_bytes: int | None
    mem_peak_bytes: int | None
    gpu_uuid: str | None
    gpu_name: str | None
    gpu_util_pct: float | None
    gpu_sm_clock_mhz: float | None
    gpu_throttle: tuple[str, ...]
    phase_now: str | None
    phase_now_s: float | None
    capture: RankCapture | None
    #: the newest steps' compute time (wall less comm), oldest first
    compute_history: tuple[float, ...] = ()

    @property
    def label(self) -> str:
        return f"rank {self.rank}" if self.rank is not None else f"pid {self.pid}"

    def to_json(self) -> dict[str, Any]:
        """A rank of ``attach --once --json``'s ``ranks`` (docs/json.md)."""
        cap = self.capture
        return {
            "pid": self.pid,
            "rank": self.rank,
            "local_rank": self.local_rank,
            "state": self.state,
            "note": self.note,
            "steps_received": self.steps,
            "last_step": self.last_step,
            "steps_behind": self.behind,
            "step_p50_s": self.step_p50_s,
            "step_p90_s": self.step_p90_s,
            "phase_shares": dict(self.phase_shares),
            "comm_s": self.comm_s,
            "comm_share": self.comm_share,
            "compute_s": self.compute_s,
            "memory_allocated_bytes": self.mem_allocated_bytes,
            "memory_peak_bytes": self.mem_peak_bytes,
            "gpu": {
                "uuid": self.gpu_uuid,
                "name": self.gpu_name,
                "util_pct": self.gpu_util_pct,
                "sm_clock_mhz": self.gpu_sm_clock_mhz,
                "throttle_reasons": list(self.gpu_throttle),
            },
            "phase_now": self.phase_now,
            "phase_now_s": self.phase_now_s,
            "capture": None
            if cap is None
            else {
                "first_step": cap.first_step,
                "last_step": cap.last_step,
                "span_us": cap.span_us,
                "busy_pct": cap.busy_pct,
                "communication_us": cap.comm_us,
                "communication_span_share": cap.comm_span_share,
                "comm_compute_overlap": cap.overlap,
                "kernels": [k.to_wire() for k in cap.kernels],
                "cpu_ops": [o.to_wire() for o in cap.cpu_ops],
                "trace_path": cap.trace_path,
            },
        }


@dataclass(frozen=True)
class RanksSummary:
    rows: tuple[RankRow, ...]
    world_size: int | None
    leader_step: int | None
    #: one line when the job is stuck or a rank is gone, else None
    alert: str | None
    evidence: RanksEvidence
    #: the job's ranks on this node (LOCAL_WORLD_SIZE), when the ranks say
    local_world_size: int | None = None

    @property
    def local(self) -> int:
        return len(self.rows)

    @property
    def missing(self) -> int:
        """Ranks of the job not shown here."""
        return self.evidence.missing

    @property
    def remote(self) -> int:
        """Ranks on other nodes (all the missing ones when the node's count is
        not known)."""
        world, local_world = self.world_size, self.local_world_size
        if world is None:
            return 0
        if local_world is None:
            return self.missing
        return max(0, world - local_world)

    @property
    def local_missing(self) -> int:
        """Ranks of this node that are not shown (gone before we looked)."""
        return max(0, self.missing - self.remote)

    def missing_text(self) -> str | None:
        """What the view says about ranks it cannot see."""
        parts = []
        if self.remote:
            parts.append(
                f"{self.remote} of {self.world_size} ranks run on other nodes: only the "
                f"{self.local} local ranks are visible here (their hooks serve local sockets); "
                "'gputui cluster --prometheus URL' shows every rank's steps and phases from "
                "each node's 'gputui exporter'"
            )
        if self.local_missing:
            parts.append(
                f"{self.local_missing} of this node's {self.local_world_size} ranks have no "
                "hook socket (exited, or not started through 'gputui run')"
            )
        return "; ".join(parts) if parts else None


def _last_step(inp: RankInput) -> int | None:
    last = inp.steps[-1].index if inp.steps else None
    if inp.status is not None and inp.status.last_step is not None and inp.status.last_step >= 0:
        last = max(last if last is not None else -1, inp.status.last_step)
    return last


def _now_fields(inp: RankInput, now_s: float) -> tuple[str | None, float | None, float | None]:
    """Phase now, seconds in it and in the step, as of ``now_s`` (the status is
    up to a second old; time kept running since)."""
    st = inp.status
    if st is None or st.phase_now is None:
        return None, None, None
    age = max(0.0, now_s - st.t) if st.t else 0.0
    if inp.gone is not None:
        age = 0.0  # a gone rank's clock stopped with it
    phase_s = None if st.phase_now_s is None else st.phase_now_s + age
    step_s = None if st.step_now_s is None else st.step_now_s + age
    return st.phase_now, phase_s, step_s


def _row(
    inp: RankInput, ev: RankEvidence, now_s: float, leader: int | None
) -> tuple[RankRow, float | None]:
    """The rank's row, and how long its step in progress has been running if
    that makes it stalled."""
    h = inp.hello
    stats = ev.job.stats
    wall = stats.wall
    phase_now, phase_s, step_s = _now_fields(inp, now_s)
    last = ev.last_step
    usual = wall.p50 if wall is not None else None
    stalled = None
    if inp.gone is not None:
        state, note = EXITED, inp.gone
    elif last is None:
        # The first step (compilation, autotuning, data warm-up) takes long:
        # said, not called a stall.
        state, note = STARTING, None
        if step_s is not None and step_s >= STALL_S:
            note = f"first step running for {step_s:.0f} s (in {phase_now})"
    elif step_s is not None and step_s >= max(STALL_S, STALL_FACTOR * (usual or 0.0)):
        state, stalled = STALLED, step_s
        waiting = phase_now in WAIT_PHASES
        note = f"in {phase_now} for {step_s:.0f} s" + (" (waiting for peers?)" if waiting else "")
    else:
        state, note = RUNNING, None
    mem = inp.memory[-1][0] if inp.memory else None
    gpu = inp.gpu[-1] if inp.gpu else None
    comm = ev.comm_mean_s if stats.count else None
    step_mean = ev.step_mean_s
    return (
        RankRow(
            pid=h.pid,
            rank=h.rank,
            local_rank=h.local_rank,
            state=state,
            note=note,
            steps=len(inp.steps),
            last_step=last,
            behind=None if last is None or leader is None else leader - last,
            step_p50_s=usual,
            step_p90_s=wall.p90 if wall is not None else None,
            phase_shares=tuple((d.name, d.share) for d in stats.phases),
            comm_s=comm,
            comm_share=None if comm is None or not step_mean else comm / step_mean,
            compute_s=ev.compute_mean_s if stats.count else None,
            mem_allocated_bytes=None if mem is None else mem.allocated,
            mem_peak_bytes=None if mem is None else mem.peak_allocated,
            gpu_uuid=None if h.device is None else h.device.uuid,
            gpu_name=None if h.device is None else h.device.name,
            gpu_util_pct=None if gpu is None else gpu.util_gpu_pct,
            gpu_sm_clock_mhz=None if gpu is None else gpu.clock_sm_mhz,
            gpu_throttle=(gpu.throttle_reasons or ()) if gpu is not None else (),
            phase_now=phase_now,
            phase_now_s=phase_s,
            capture=None if inp.capture is None else RankCapture.of(inp.capture),
            compute_history=tuple(
                max(0.0, s.wall - s.phases.get(COMM, 0.0)) for s in inp.steps[-HISTORY:]
            ),
        ),
        stalled,
    )


def rank_evidence(inp: RankInput, gpu_window: int = 30, window: int = WINDOW) -> RankEvidence:
    """One rank's evidence for the rules (its newest ``window`` steps)."""
    h, st = inp.hello, inp.status
    job = evidence(inp, window=window, gpu_window=gpu_window)
    return RankEvidence(
        pid=h.pid,
        job=job,
        rank=h.rank,
        local_rank=h.local_rank,
        last_step=_last_step(inp),
        connected=inp.gone is None,
        phase_now=None if st is None else st.phase_now,
        phase_now_s=None if st is None else st.phase_now_s,
    )


def _alert(rows: Sequence[RankRow], stalled: dict[int, float]) -> str | None:
    gone = [r for r in rows if r.state == EXITED]
    parts = []
    if stalled:
        stuck = [r for r in rows if r.pid in stalled]
        culprits = [r for r in stuck if r.phase_now not in WAIT_PHASES]
        waiting = [r for r in stuck if r.phase_now in WAIT_PHASES]
        longest = max(stalled.values())
        text = f"no step finished for {longest:.0f} s"
        if culprits:
            text += ": " + "; ".join(f"{r.label} stuck in {r.phase_now}" for r in culprits[:4])
        if waiting:
            text += f"; {_labels(waiting)} waiting in {_phases(waiting)} (collectives)"
        parts.append(text)
    if gone:
        parts.append(
            "; ".join(f"{r.label} exited ({r.note})" for r in gone[:4])
            + (f" (+{len(gone) - 4})" if len(gone) > 4 else "")
        )
        running = [r for r in rows if r.state != EXITED]
        if running and not stalled:
            parts.append(f"{_labels(running)} will wait for it at their next collective")
    return "; ".join(parts) if parts else None


def _labels(rows: Sequence[RankRow]) -> str:
    ranks = [r.rank for r in rows]
    if all(r is not None for r in ranks):
        return "ranks " + ",".join(str(r) for r in ranks) if len(ranks) > 1 else rows[0].label
    return ", ".join(r.label for r in rows)


def _phases(rows: Sequence[RankRow]) -> str:
    return "/".join(sorted({r.phase_now or "?" for r in rows}))


def summarize(inputs: Sequence[RankInput], now_s: float, window: int = WINDOW) -> RanksSummary:
    """The rank view's values for these ranks (in the order given), at ``now_s``
    (Unix seconds: a recording's own time when replaying), statistics over each
    rank's newest ``window`` steps."""
    evidence = tuple(rank_evidence(inp, window=window) for inp in inputs)
    lasts = [e.last_step for e in evidence if e.last_step is not None]
    leader = max(lasts) if lasts else None
    rows: list[RankRow] = []
    stalled: dict[int, float] = {}
    for inp, ev in zip(inputs, evidence, strict=True):
        row, stuck = _row(inp, ev, now_s, leader)
        rows.append(row)
        if stuck is not None:
            stalled[row.pid] = stuck
    worlds = [i.hello.world_size for i in inputs if i.hello.world_size]
    world = max(worlds) if worlds else None
    locals_ = [i.hello.local_world_size for i in inputs if i.hello.local_world_size]
    return RanksSummary(
        rows=tuple(rows),
        world_size=world,
        leader_step=leader,
        alert=_alert(rows, stalled),
        evidence=RanksEvidence(evidence, world),
        local_world_size=max(locals_) if locals_ else None,
    )


def enough_steps(summary: RanksSummary) -> bool:
    """The rank rules have what they need (two ranks with enough steps)."""
    return sum(1 for r in summary.evidence.ranks if r.job.stats.count >= MIN_STEPS) >= 2


def sync_start(last_steps: Sequence[int | None], step_s: float | None, warmup: int) -> int:
    """The first step a capture of every rank records: past the leading rank's
    step in progress and its warm-up, about :data:`SYNC_LEAD_S` ahead."""
    leader = max((s for s in last_steps if s is not None), default=-1)
    lead = SYNC_LEAD_STEPS
    if step_s and step_s > 0:
        lead = max(lead, min(SYNC_LEAD_MAX, math.ceil(SYNC_LEAD_S / step_s)))
    return leader + 1 + max(0, warmup) + lead
