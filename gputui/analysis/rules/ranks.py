"""Rules over the local ranks of a multi-rank job: the straggler, steps bound by
communication, comm/compute overlap, and good utilization with poor scaling.

In data-parallel training every rank waits at each gradient all-reduce for
the slowest one, so a rank's time in "comm" is the sum of the transfer itself
and the wait for its peers.  A rank's *compute* time (its step less its comm
time) is what it needs itself; the rank whose compute is longest sets the pace,
and the others' extra comm time is what its slowness costs them.
"""

from __future__ import annotations

from collections.abc import Iterable

from gputui import fmt
from gputui.analysis.evidence import MIN_GPU_SAMPLES, CaptureView, RankEvidence, RanksEvidence
from gputui.analysis.finding import Finding
from gputui.analysis.medians import median
from gputui.analysis.registry import finding, rule
from gputui.analysis.rules.capture import comm_fix
from gputui.analysis.severity import WARN
from gputui.protocol.messages import COMM, DATA, OTHER
from gputui.protocol.value import ValueBase, value_class
from gputui.trace.kernels import COMMUNICATION, MEMCPY, MEMSET

#: a rank whose compute time per step is this many times the others' median is
#: slow (the cluster view marks stragglers the same way)
STRAGGLER_SKEW = 1.1
#: ...and the others must wait at least this share of their step for it
STRAGGLER_WAIT_SHARE = 0.05
#: from captures: the others' communication kernels take this much more of
#: their GPU span than the straggler's
STRAGGLER_GPU_WAIT_SHARE = 0.10
#: communication above this share of the step (TensorBoard profiler's advice)
COMM_SHARE = 0.10
#: comm kernels overlapped with compute less than this (HTA's ratio) is poor
OVERLAP_MIN = 0.5
#: comm kernels under this share of the capture span are not worth overlapping
OVERLAP_COMM_SPAN = 0.10
#: "good utilization": NVML utilization at or above this on every rank's GPU
BUSY_UTIL_PCT = 80.0
#: a GPU clock this much below the other ranks' median counts as slower
SLOW_CLOCK = 0.95
#: clock-event reasons that lower a busy GPU's clocks
THROTTLE_REASONS = frozenset(
    {"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
     "hw_power_brake_slowdown"}
)  # fmt: skip
#: a straggler whose samples per step exceed the others' by this much has more input
INPUT_SKEW = 1.1
#: a step time spread (p90 / p50) above this points at inputs of varying size
SPREAD = 1.3


def _median(values: Iterable[float]) -> float | None:
    data = [v for v in values if v is not None]
    return median(data) if data else None


def _phase_means(r: RankEvidence) -> dict[str, float]:
    return {d.name: d.mean for d in r.job.stats.phases if d.name != COMM}


def _samples_per_step(r: RankEvidence) -> float | None:
    stats = r.job.stats
    if not stats.samples_per_s or not stats.steps_per_s:
        return None
    return stats.samples_per_s / stats.steps_per_s


def _ranks(ranks: Iterable[RankEvidence]) -> str:
    labels = [r.label for r in ranks]
    return ", ".join(labels[:6]) + (f" (+{len(labels) - 6})" if len(labels) > 6 else "")


def _cause(slow: RankEvidence, others: list[RankEvidence], phase: str) -> tuple[str, str]:
    """The likely cause (what was seen) and the fix, for the straggler's slowest
    phase."""
    if phase == DATA:
        return (
            f"{slow.label} waits longer for its batches than the others",
            f"look at {slow.label}'s data loading: give its DataLoader workers "
            "(num_workers, persistent_workers=True, pin_memory=True), check its node's CPU and "
            "disk (other processes, a slower file system) and whether its shard of the data is "
            "bigger or slower to decode",
        )
    gpu = slow.job.gpu
    peers = [o.job.gpu for o in others if o.job.gpu is not None]
    if gpu is not None and gpu.samples >= MIN_GPU_SAMPLES:
        reasons = sorted(r for r, share in gpu.throttle_share.items() if r in THROTTLE_REASONS)
        clock = gpu.clock_sm_mhz
        peer_clock = _median(p.clock_sm_mhz for p in peers if p.clock_sm_mhz is not None)
        if reasons or (clock and peer_clock and clock < SLOW_CLOCK * peer_clock):
            seen = f"its GPU runs at {clock:.0f} MHz" if clock else "its GPU is throttled"
            if peer_clock:
                seen += f" against {peer_clock:.0f} MHz on the others"
            if reasons:
                seen += f" (clock events: {', '.join(reasons)})"
            return (
                seen,
                f"{slow.label}'s GPU is slower: check its cooling and power (nvidia-smi -q -d "
                "PERFORMANCE,TEMPERATURE,POWER on that GPU), its application clocks, and other "
                "jobs on it; move the job off that GPU if it stays throttled",
            )
    mine = _samples_per_step(slow)
    theirs = _median(s for s in (_samples_per_step(o) for o in others) if s is not None)
    if mine and theirs and mine > INPUT_SKEW * theirs:
        return (
            f"it gets {mine:.0f} samples per step against {theirs:.0f} on the others",
            "balance the inputs: give every rank the same number of samples per step "
            "(DistributedSampler with drop_last=True, equal shards)",
        )
    wall = slow.job.stats.wall
    if wall is not None and wall.p50 > 0 and wall.p90 / wall.p50 > SPREAD:
        return (
            f"its steps vary (p90 {fmt.ms(wall.p90)} against p50 {fmt.ms(wall.p50)}), as inputs "
            "of varying size do",
            "balance the work per step: bucket samples by length (sequence length, image size) "
            "so that every rank gets a similar amount of work in each step",
        )
    return (
        f"its {phase} takes longer with no slower GPU or bigger inputs in sight",
        f"look for CPU contention on {slow.label}'s cores (other processes, too many threads: "
        "OMP_NUM_THREADS, DataLoader workers competing with the training thread) and for work "
        "only this rank does (logging, evaluation, checkpoints on rank 0: do them less often "
        "or in the background)",
    )


def _comm_kernel_s(r: RankEvidence) -> float | None:
    """Seconds per step of communication kernels in the rank's capture."""
    cap = r.job.capture
    if cap is None or not cap.steps or not cap.kernel_total_us:
        return None
    return cap.class_us(COMMUNICATION) / cap.steps / 1e6


def _comm_span_share(r: RankEvidence) -> float | None:
    """The share of the rank's capture span its communication kernels take."""
    cap = r.job.capture
    if cap is None or not cap.span_us:
        return None
    return cap.class_us(COMMUNICATION) / cap.span_us


def _one_off_s(r: RankEvidence) -> float:
    """A trace rank's one-off work per step (compiling, cold launches, set-up
    calls, ops' warm-up calls, graph captures: JobEvidence.one_off_share), in
    seconds; 0 for a live rank, whose steps leave warm-up out already."""
    job = r.job
    step = job.mean_step_s
    return job.one_off_share * step if job.from_trace and step else 0.0


def _excess(slow: RankEvidence, others: list[RankEvidence]) -> dict[str, float]:
    """Seconds per step more than the others' median, per phase (comm aside)."""
    theirs: dict[str, list[float]] = {}
    for o in others:
        for name, seconds in _phase_means(o).items():
            theirs.setdefault(name, []).append(seconds)
    return {
        name: seconds - (median(theirs[name]) if name in theirs else 0.0)
        for name, seconds in _phase_means(slow).items()
    }


@value_class
class _Straggler(ValueBase):
    slow: RankEvidence
    others: list[RankEvidence]
    #: what each of the others waits for it per step (seconds), and where
    wait: float
    where: str
    #: its phase with the largest excess over the others, and that excess
    phase: str
    excess: float
    #: the others' median step (seconds)
    step: float
    #: how it was seen: its compute time (wall), or its peers' GPUs waiting
    evidence: str


def _by_compute(ready: list[RankEvidence]) -> _Straggler | None:
    """The rank whose compute per step (its step less its comm) is longest, when
    the others wait for it in their comm phase, or in their communication
    kernels where captures show them (NCCL's kernels spin on the waiting rank's
    GPU while its CPU has moved on)."""
    slow = max(ready, key=lambda r: r.compute_mean_s or 0.0)
    others = [r for r in ready if r is not slow]
    slow_compute = slow.compute_mean_s or 0.0
    peer_compute = _median(o.compute_mean_s or 0.0 for o in others) or 0.0
    waits = [max(0.0, o.comm_mean_s - slow.comm_mean_s) for o in others]
    wait = median(waits)
    where = "in communication"
    slow_gpu = _comm_kernel_s(slow)
    gpu_waits = [_comm_kernel_s(o) for o in others]
    if slow_gpu is not None and all(w is not None for w in gpu_waits):
        gpu_wait = median(max(0.0, (w or 0.0) - slow_gpu) for w in gpu_waits)
        if gpu_wait > wait:
            wait, where = gpu_wait, "in communication kernels on the GPU"
    step = _median(o.step_mean_s or 0.0 for o in others) or 0.0
    if (
        not step
        or slow_compute < STRAGGLER_SKEW * peer_compute
        or wait < STRAGGLER_WAIT_SHARE * step
    ):
        return None
    excess = _excess(slow, others)
    phase = max(excess, key=lambda n: excess[n]) if excess else OTHER
    if where != "in communication" and excess:
        # The others cannot wait longer than the straggler is slower: its phase's
        # excess bounds what its peers' NCCL kernels spin for on the GPU (their
        # transfer is in that kernel time too)
        wait = min(wait, max(excess[phase], slow_compute - peer_compute, 0.0))
    evidence = (
        f"{slow.label} needs {fmt.ms(slow_compute)} per step against {fmt.ms(peer_compute)} on "
        f"the others ({phase} +{fmt.ms(max(0.0, excess.get(phase, 0.0)))}); "
        f"{_ranks(others)} {'waits' if len(others) == 1 else 'wait'} {fmt.ms(wait)} per step "
        f"for it {where}"
    )
    return _Straggler(slow, others, wait, where, phase, excess.get(phase, 0.0), step, evidence)


def _by_gpu_wait(ready: list[RankEvidence]) -> _Straggler | None:
    """The rank whose GPU spends least of its capture in communication kernels,
    when the others' GPUs spend much more there and it has a phase of its own
    that takes much longer than theirs.  With NCCL a waiting rank's CPU does not
    wait in the collective: it queues the all-reduce and blocks later, wherever
    the GPU's queue or memory makes it (its backward, its next copy), so every
    rank's step less its comm looks alike; the wait is on the GPU.  Captures of
    a healthy job can differ too (the profiler starts unevenly), hence the
    second condition: a phase of the straggler's own, on its CPU."""
    shares = {r.pid: _comm_span_share(r) for r in ready}
    if any(v is None for v in shares.values()):
        return None
    slow = min(ready, key=lambda r: shares[r.pid] or 0.0)
    others = [r for r in ready if r is not slow]
    mine = shares[slow.pid] or 0.0
    gpu_wait = median((shares[o.pid] or 0.0) - mine for o in others)
    step = _median(o.step_mean_s or 0.0 for o in others) or 0.0
    excess = _excess(slow, others)
    if not step or not excess or gpu_wait < STRAGGLER_GPU_WAIT_SHARE:
        return None
    phase = max(excess, key=lambda n: excess[n])
    if excess[phase] < (STRAGGLER_SKEW - 1.0) * step:
        return None
    # the captured share of the others' GPU time spent waiting, on an ordinary
    # step, and at most what the straggler's phase takes longer
    wait = min(gpu_wait * step, excess[phase])
    theirs = median(shares[o.pid] or 0.0 for o in others)
    verb, whose = ("waits", "its") if len(others) == 1 else ("wait", "their")
    evidence = (
        f"{slow.label}'s {phase} takes {fmt.ms(excess[phase])} per step longer than the "
        f"others'; {_ranks(others)} {verb} for it in communication kernels on the GPU "
        f"({theirs * 100:.0f}% of {whose} captured GPU time against {mine * 100:.0f}% on "
        f"{slow.label}), about {fmt.ms(wait)} per step"
    )
    where = "in communication kernels on the GPU"
    return _Straggler(slow, others, wait, where, phase, excess[phase], step, evidence)


def find_straggler(ev: RanksEvidence) -> _Straggler | None:
    ready = [r for r in ev.ready if r.compute_mean_s is not None]
    if len(ready) < 2:
        return None
    return _by_compute(ready) or _by_gpu_wait(ready)


def wait_hint(ev: RanksEvidence) -> str | None:
    """What to do when the rules see no straggler yet the ranks' own phases
    differ both ways: one rank a tenth of the step longer than the others in
    one phase, another in a different one.  With NCCL a rank that waits for a
    slower one blocks wherever its GPU's queue stops it, not in its comm phase,
    so the wall-time phases cannot say which waits; a synchronized capture
    (its communication kernels) can.  None once every rank has a capture or a
    rule names the straggler."""
    ready = list(ev.ready)
    if len(ready) < 2 or all(r.job.capture is not None for r in ready):
        return None
    step = ev.step_s
    if not step or find_straggler(ev) is not None:
        return None
    ahead: list[tuple[RankEvidence, str, float]] = []
    for r in ready:
        excess = _excess(r, [o for o in ready if o is not r])
        if excess:
            phase = max(excess, key=lambda n: excess[n])
            if excess[phase] >= (STRAGGLER_SKEW - 1.0) * step:
                ahead.append((r, phase, excess[phase]))
    if len(ahead) < 2 or len({phase for _r, phase, _x in ahead}) < 2:
        return None
    said = ", ".join(f"{r.label}'s {phase} +{fmt.ms(x)}" for r, phase, x in ahead[:4])
    return (
        f"the ranks' phases differ ({said} a step): with NCCL a rank that waits for "
        "another blocks outside comm; a synchronized capture (p, or --capture N) shows "
        "which GPU waits"
    )


@rule(
    "ranks.straggler",
    "comm",
    "bottleneck tables: GPU idle and CPU idle waiting at an NCCL barrier; the cluster view's "
    "straggler (compute per step against the job's median)",
    ("ranks", "steps"),
    scope="ranks",
    trigger=(
        "ranks: >= 2 ranks with 20 ordinary steps; one rank's compute per step (its step less "
        "its comm) >= 1.1x the others' median, and the others' comm beyond its own >= 5% of "
        "their step; or, from captures, the others' communication kernels >= 10 points more "
        "of their GPU span than its own, and one of its phases >= 10% of the step longer than "
        "the others'; cost: that wait's share of the step; where a trace rank's lead is "
        "one-off work (compiling, cold launches, set-up and ops' warm-up calls) its peers' "
        "windows hold less of, and without it the lead is under 10% of the step: an info "
        "that says so, cost 0"
    ),
)
def straggler(ev: RanksEvidence) -> Iterable[Finding]:
    found = find_straggler(ev)
    if found is None:
        return []
    slow = found.slow
    one_off = _one_off_s(slow) - median(_one_off_s(o) for o in found.others)
    if one_off > 0 and found.excess - one_off < (STRAGGLER_SKEW - 1.0) * found.step:
        # its lead is one-off work the others did before their window (CUDA
        # loading kernels on first use, cuDNN's search, compiling): gone by the
        # next steps, no straggler of the loop
        return [
            finding(
                ev,
                "ranks.straggler",
                f"{slow.label} lags the others in this capture by one-off work only",
                f"{found.evidence}; of its {found.phase} +{fmt.ms(found.excess)}, "
                f"{fmt.ms(one_off)} per step is one-off work the others' windows hold less "
                "of (CUDA loading kernels on first use, set-up calls, ops' warm-up calls, "
                "compiling: each rank's warnings name its own): without it no rank lags",
                "profile every rank past its warm-up (torch.profiler.schedule(wait=1, "
                "warmup=1, active=3) with prof.step() each step), then compare the ranks again",
                "the ranks' steps level out once the capture starts after the warm-up",
                share=0.0,
                scope=slow.label,
            )
        ]
    seen, fix = _cause(slow, found.others, found.phase)
    return [
        finding(
            ev,
            "ranks.straggler",
            f"{slow.label} is the straggler: the other ranks wait for it",
            f"{found.evidence}; {seen}",
            fix,
            "the ranks' compute times level out in the rank view, and the others' comm time "
            "drops to what the transfer itself takes",
            share=min(1.0, found.wait / found.step),
            scope=slow.label,
        )
    ]


#: the wait at the window's first collective that makes ranks' entry uneven:
#: this share of the waiting rank's step at least
UNEVEN_ENTRY_SHARE = 0.10


@value_class
class _Entry(ValueBase):
    """The ranks' captures matched collective by collective (:func:`uneven_entry`)."""

    late: RankEvidence
    #: (rank, its wait at the window's first collective, its wait at the later
    #: ones), in µs, the longest first wait first; the late rank left out
    waits: list[tuple[RankEvidence, float, float]]
    kind: str
    collectives: int
    #: the late rank's first collective ran this long (µs); the others' range
    late_us: float
    #: where the ranks' first collectives started in their windows (µs): lowest, highest
    entered: tuple[float, float]


def uneven_entry(ev: RanksEvidence) -> _Entry | None:
    """Ranks that began the captured window apart: every rank's capture holds
    the same collectives in the same order, the others' wait for the rank that
    reached the first of them last is most of their waiting in the window, and
    that rank reached it as far into its window as they did (its lag arose
    before the window).  A collective's kernels end together on every rank, so
    the shortest arrived last and the others' excess over it is their wait."""
    ranks = [r for r in ev.ranks if r.job.capture is not None and r.job.capture.comm_kernels]
    if len(ranks) < 2 or len(ranks) != len(ev.ranks):
        return None
    seqs = {r.pid: r.job.capture.comm_kernels for r in ranks if r.job.capture is not None}
    first = seqs[ranks[0].pid]
    n = len(first)
    if n < 2 or any(
        len(seq) != n or any(a[0] != b[0] for a, b in zip(seq, first, strict=True))
        for seq in seqs.values()
    ):
        return None
    least = [min(seqs[r.pid][i][2] for r in ranks) for i in range(n)]
    late = min(ranks, key=lambda r: seqs[r.pid][0][2])
    waits = sorted(
        (
            (
                r,
                seqs[r.pid][0][2] - least[0],
                sum(seqs[r.pid][i][2] - least[i] for i in range(1, n)),
            )
            for r in ranks
            if r is not late
        ),
        key=lambda w: -w[1],
    )
    top, entry, rest = waits[0]
    step = top.step_mean_s
    if not step or entry < UNEVEN_ENTRY_SHARE * step * 1e6 or entry < rest:
        return None
    # where each reached it: the late rank no later into its window than the
    # others (beyond half its lead), or its own work before the collective is
    # the lag, inside the window, which its phases show
    offsets = [seqs[r.pid][0][1] for r in ranks]
    theirs = median(seqs[r.pid][0][1] for r in ranks if r is not late)
    if seqs[late.pid][0][1] - theirs >= 0.5 * entry:
        return None
    return _Entry(late, waits, first[0][0], n, seqs[late.pid][0][2], (min(offsets), max(offsets)))


@rule(
    "ranks.uneven_start",
    "comm",
    "Holistic Trace Analysis: a collective's time on the ranks that reach it first is wait; "
    "PyTorch profiler recipe: skip the first steps (schedule's wait and warmup)",
    ("ranks", "capture"),
    scope="ranks",
    trigger=(
        "ranks' traces holding the same collectives in the same order: the others' wait for "
        "the rank whose first collective ran shortest (it arrived last) >= 10% of the most "
        "waiting rank's step and at least its wait at all later collectives, and that rank "
        "reached the collective no later into its window than the others (by half the wait): "
        "its lag arose before the window; an info, cost 0 (one window cannot tell whether it "
        "recurs)"
    ),
)
def uneven_start(ev: RanksEvidence) -> Iterable[Finding]:
    found = uneven_entry(ev)
    if found is None:
        return []
    late, waits = found.late, found.waits
    top = waits[0][0]
    rest = max(w[2] for w in waits)
    named = ", ".join(f"{r.label} {fmt.ms(w / 1e6)}" for r, w, _ in waits[:4])
    if len(waits) > 4:
        named += f" and {len(waits) - 4} more"
    steps = top.job.capture.steps if top.job.capture is not None else 1
    recurs = (
        "its later steps show no such wait: a one-off before the window, as a profiler "
        "starting at a different moment on each rank makes"
        if steps >= 2
        else "one step cannot tell whether it comes back each step (a straggler) or once "
        "(the profiler starting at a different moment on each rank)"
    )
    kind = found.kind.replace("_", "-") if found.kind.isidentifier() else "collective"
    lo, hi = found.entered
    return [
        finding(
            ev,
            "ranks.uneven_start",
            f"the ranks began the captured window apart: {late.label} last",
            f"at the window's first collective ({kind}), {late.label}'s kernel ran "
            f"{fmt.ms(found.late_us / 1e6)}: it arrived last, and the others waited for it "
            f"({named}); over the {found.collectives - 1} later collectives they wait "
            f"{fmt.ms(rest / 1e6)} at most; every rank reached that collective "
            f"{fmt.ms(lo / 1e6)}-{fmt.ms(hi / 1e6)} into its window: {late.label}'s lag "
            f"arose before the window, and {recurs}; the waiting ranks' communication and "
            "host sync figures hold that wait",
            "profile several steps past the warm-up on every rank "
            "(torch.profiler.schedule(wait=1, warmup=1, active=3), prof.step() each step): "
            "a lag that comes back each step is a straggler the ranks' view names with its "
            f"cause; one that does not is the capture's own.  Until then, read "
            f"{top.label}'s and the other waiting ranks' comm.share and sync.host_sync "
            "without this wait",
            "the ranks' first collectives take as long as their later ones in a capture of "
            "several steps",
            share=0.0,
            scope=late.label,
        )
    ]


@rule(
    "ranks.comm_bound",
    "comm",
    "TensorBoard profiler: communication over 10% of the step; bottleneck tables: NCCL calls "
    "between backward and optimizer (DDP gradient sync not overlapped)",
    ("ranks", "steps"),
    scope="ranks",
    trigger=(
        "ranks: even the rank that waits least spends >= 10% of its step in comm (explicit "
        "collectives, DDP's all-reduce wait at the end of backward); cost: that share"
    ),
)
def comm_bound(ev: RanksEvidence) -> Iterable[Finding]:
    ready = [r for r in ev.ready if r.step_mean_s]
    if not ready:
        return []
    # The least-waiting rank (the straggler, if any) shows what communication
    # costs by itself: its comm time is not spent waiting for a slower peer.
    least = min(ready, key=lambda r: r.comm_mean_s / (r.step_mean_s or 1.0))
    share = least.comm_mean_s / (least.step_mean_s or 1.0)
    if share < COMM_SHARE:
        return []
    return [
        finding(
            ev,
            "ranks.comm_bound",
            "steps are bound by communication",
            f"even {least.label}, which waits least, spends {share * 100:.0f}% of its step "
            f"({fmt.ms(least.comm_mean_s)} of {fmt.ms(least.step_mean_s)}) in collectives, "
            "after its own backward is done",
            "overlap more of the gradient all-reduce with backward and send less: "
            "DistributedDataParallel(bucket_cap_mb=...) (smaller buckets start earlier, larger "
            "ones cost fewer launches), gradient_as_bucket_view=True (no copies), "
            "static_graph=True when the graph does not change, model.no_sync() on gradient "
            "accumulation steps, a compression hook (bf16_compress_hook, PowerSGD), or a "
            "larger batch per rank",
            "the comm phase falls under 10% of the step in the rank view",
            share=share,
            scope="job",
        )
    ]


@rule(
    "ranks.poor_overlap",
    "comm",
    "Holistic Trace Analysis: comm/compute overlap (time both run / comm time); bottleneck "
    "tables: backward kernels with large gaps (compute not overlapping the all-reduce)",
    ("ranks", "capture"),
    scope="ranks",
    trigger=(
        "ranks' captures, of the rank whose communication kernels take the least of its GPU "
        "span (the one that waits least for its peers): those kernels >= 10% of the span, and "
        "< 50% of their time overlapping compute kernels (HTA's ratio); cost: the exposed "
        "share, span share x (1 - overlap), at most its compute kernels' share of the span "
        "(what overlap could hide the communication behind)"
    ),
)
def poor_overlap(ev: RanksEvidence) -> Iterable[Finding]:
    # A rank's communication kernels run from its own launch to the last peer's:
    # on every rank but the last to arrive they also spin, waiting (a healthy
    # job's ranks arrive in turns; a straggler's peers wait for it each step).
    # The rank whose kernels take the least of its GPU span waited least: its
    # capture shows the transfer itself, and how much of it overlaps compute.
    seen: list[tuple[float, RankEvidence, CaptureView, float, float]] = []
    for rank in ev.ranks:
        cap, share = rank.job.capture, _comm_span_share(rank)
        if cap is None or share is None or cap.comm_compute_overlap is None or not cap.span_us:
            continue
        seen.append((share, rank, cap, cap.span_us, cap.comm_compute_overlap))
    if not seen:
        return []
    span_share, r, cap, span_us, overlap = min(seen, key=lambda row: row[0])
    if span_share < OVERLAP_COMM_SPAN or overlap >= OVERLAP_MIN:
        return []
    # Overlap hides communication behind compute: it can recover at most the
    # compute there is
    comm_us = cap.class_us(COMMUNICATION)
    compute_us = max(0.0, cap.kernel_total_us - comm_us) - cap.class_us(MEMCPY, MEMSET)
    hideable = min(1.0, compute_us / span_us)
    exposed = min(span_share * (1.0 - overlap), hideable)
    others = "" if len(seen) < 2 else ", the rank that waits least for its peers"
    collectives = tuple(sorted({c for m in ev.ranks for c in m.job.context.collectives}))
    inference = all(m.job.context.inference for m in ev.ranks)
    return [
        finding(
            ev,
            "ranks.poor_overlap",
            "communication kernels run alone, not alongside compute",
            f"in {r.label}'s capture{others}, communication kernels take "
            f"{span_share * 100:.0f}% of the GPU span and only {overlap * 100:.0f}% of their "
            "time overlaps compute kernels",
            # the collectives in use: all-to-all and FSDP's get their own advice
            comm_fix(collectives, inference, cap.collectives)
            if set(collectives) - {"all_reduce"} or inference
            else "let DDP start all-reduces during backward: smaller bucket_cap_mb so the "
            "first buckets are ready early, no find_unused_parameters=True unless needed, "
            "static_graph=True; avoid synchronising (.item(), torch.cuda.synchronize()) "
            "between backward and the optimizer step; with FSDP, keep forward/backward "
            "prefetch on",
            "a new synchronized capture (p on the rank view) shows the overlap above 50%",
            share=exposed,
            scope=r.label,
        )
    ]


@rule(
    "ranks.busy_but_poor_scaling",
    "comm",
    "bottleneck tables: good GPU utilization but poor scaling (NCCL communication overhead "
    "in distributed training)",
    ("ranks", "gpu"),
    scope="ranks",
    trigger=(
        "ranks: every rank's GPU (>= 3 NVML samples) at >= 80% utilization, and communication "
        ">= 10% of the work per step (median over ranks of the capture's communication kernel "
        "share, else the comm phase's share of the step); always warn"
    ),
)
def poor_scaling(ev: RanksEvidence) -> Iterable[Finding]:
    ready = [r for r in ev.ready if r.job.gpu is not None and r.job.gpu.samples >= MIN_GPU_SAMPLES]
    if len(ready) < 2 or len(ready) < len(ev.ready):
        return []
    utils = [r.job.gpu.util_pct for r in ready if r.job.gpu is not None]
    if any(u is None or u < BUSY_UTIL_PCT for u in utils):
        return []
    # What the GPUs spend on communication: the capture's NCCL kernels where a
    # rank has one, else the comm phase's share of the step.
    shares: list[float] = []
    for r in ready:
        cap = r.job.capture
        if cap is not None and cap.kernel_total_us > 0:
            shares.append(cap.class_share(COMMUNICATION))
        elif r.step_mean_s:
            shares.append(r.comm_mean_s / r.step_mean_s)
    share = _median(shares)
    if share is None or share < COMM_SHARE:
        return []
    util = min(u for u in utils if u is not None)
    return [
        finding(
            ev,
            "ranks.busy_but_poor_scaling",
            "the GPUs are busy, but much of it is communication: more GPUs add less",
            f"GPU utilization is {util:.0f}% or more on every rank, yet {share * 100:.0f}% of "
            "the work per step is gradient communication; each added rank adds that overhead",
            "send less per step and use the fastest links: gradient compression "
            "(bf16_compress_hook, PowerSGD), a larger batch per GPU or gradient accumulation with "
            "no_sync(), check the topology (nvidia-smi topo -m: NVLink between the ranks of a "
            "node, InfiniBand/RoCE between nodes; NCCL_DEBUG=INFO shows what NCCL picked), and "
            "hybrid sharding so that most traffic stays inside a node",
            "throughput per GPU stays close to the single-GPU figure as ranks are added; the comm "
            "share falls",
            share=share,
            severity=WARN,
            scope="job",
        )
    ]
