"""Rules over the step records: the balance of forward, backward and optimizer,
slow steps and slow epoch starts, and the warm-up (the data wait's own rule is
in :mod:`gputui.analysis.rules.data`)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from gputui import fmt
from gputui.analysis import thresholds
from gputui.analysis.evidence import MIN_STEPS, JobEvidence, ordinary
from gputui.analysis.finding import Finding
from gputui.analysis.frameworks import PERSISTENT_WORKERS, TRANSFORMERS, fused_optimizer, spell
from gputui.analysis.ledger import ISSUE
from gputui.analysis.live_account import REST
from gputui.analysis.medians import median, median_low
from gputui.analysis.optimizer import FUSED, MULTI, optimizer_impl
from gputui.analysis.registry import Minimum, finding, rule
from gputui.analysis.severity import INFO
from gputui.analysis.steps import SLOW_FACTOR, is_slow, is_warmup
from gputui.protocol.messages import BACKWARD, COMM, DATA, FORWARD, OPTIMIZER, OTHER, StepFlag
from gputui.protocol.steps import StepRecord

LOADER_START = int(StepFlag.LOADER_START)

#: the thresholds (gputui.analysis.thresholds): forward over backward (a sync in
#: forward), backward over forward (checkpointing), the optimizer's and the
#: unphased time's share, the time slow steps add, a warm-up step over the median
FORWARD_OVER_BACKWARD = thresholds.value("steps.forward_over_backward")
BACKWARD_OVER_FORWARD = thresholds.value("steps.backward_over_forward")
OPTIMIZER_SHARE = thresholds.value("steps.optimizer_share")
OTHER_SHARE = thresholds.value("steps.other_share")
OUTLIER_SHARE = thresholds.value("steps.outlier_share")
WARMUP_FACTOR = thresholds.value("steps.warmup_factor")
#: the share of the gaps between slow steps that must be one period for them to be
#: "every Nth step"
PERIODIC_SHARE = 0.8


@rule(
    "steps.forward_slower_than_backward",
    "sync",
    "profiler observations: forward time much above backward time points at a "
    "synchronisation (.item(), print(tensor), .cpu()) in the forward pass",
    ("steps",),
    trigger=(
        "a CUDA job: forward >= {steps.forward_over_backward} backward on the CPU clock while "
        "the GPU's own forward is not (a sync in the forward)"
    ),
    bucket="sync",
    symptom=True,
)
def forward_slower(ev: JobEvidence) -> Iterable[Finding]:
    forward, backward = ev.phase_mean(FORWARD), ev.phase_mean(BACKWARD)
    if not ev.cuda or ev.phases_coarse or not forward or not backward:
        return []  # a CPU job has no GPU to synchronise with
    if forward < FORWARD_OVER_BACKWARD * backward:
        return []
    gpu_forward, gpu_backward = ev.phase_mean(FORWARD, gpu=True), ev.phase_mean(BACKWARD, gpu=True)
    if gpu_forward and gpu_backward and gpu_forward >= FORWARD_OVER_BACKWARD * gpu_backward:
        return []  # the GPU work itself is forward-heavy: not a synchronisation
    # Backward usually takes about twice the forward; the excess over that is the
    # most a synchronisation in the forward can be costing.
    share = max(0.0, forward - backward / 2.0) / ev.step_s if ev.step_s else None
    return [
        finding(
            ev,
            "steps.forward_slower_than_backward",
            "forward is slower than backward",
            f"forward {fmt.ms(forward)} against backward {fmt.ms(backward)} per step "
            "(backward usually takes about twice as long as forward)",
            "look for host synchronisation in forward: .item(), .cpu(), .tolist(), "
            "print(tensor), data-dependent shapes (nonzero, masked_select); keep values on "
            "the GPU and read them every N steps",
            "forward drops below backward; a capture (p) shows fewer cudaStreamSynchronize calls",
            share=share,
        )
    ]


@rule(
    "steps.backward_heavy",
    "steps",
    "profiler observations: backward over twice the forward means activation "
    "checkpointing (expected) or an inefficient backward",
    ("steps",),
    trigger="backward >= {steps.backward_over_forward} forward (info: checkpointing, or a slow "
    "backward)",
)
def backward_heavy(ev: JobEvidence) -> Iterable[Finding]:
    gpu = bool(ev.stats.gpu_phases)  # wall times mislead on a GPU-bound job (see above)
    forward, backward = ev.phase_mean(FORWARD, gpu=gpu), ev.phase_mean(BACKWARD, gpu=gpu)
    if ev.phases_coarse or not forward or not backward:
        return []
    if backward < BACKWARD_OVER_FORWARD * forward:
        return []
    return [
        finding(
            ev,
            "steps.backward_heavy",
            "backward takes much longer than forward",
            f"backward {fmt.ms(backward)} is {backward / forward:.1f}x forward "
            f"({fmt.ms(forward)}); about 2x is usual",
            "expected with activation checkpointing (recomputation); otherwise capture (p) and "
            "look for slow backward kernels or a gradient all-reduce that is not overlapped",
            "the top kernels of a capture in backward are the model's own GEMMs and attention",
            severity=INFO,
        )
    ]


@rule(
    "steps.optimizer_heavy",
    "launch",
    "TorchTidy: a single-tensor optimizer where foreach or fused kernels exist",
    ("steps",),
    trigger=(
        "the optimizer >= {steps.optimizer_share} of the step, and its implementation not "
        "the fused one; cost: 66% of it with per-parameter kernels or when unknown, 40% "
        "with the multi-tensor ones"
    ),
    bucket=ISSUE,
)
def optimizer_heavy(ev: JobEvidence) -> Iterable[Finding]:
    # GPU time when the steps have it: on a GPU-bound job the CPU blocks wherever the
    # launch queue is full, often inside optimizer.step(), which inflates its wall time.
    gpu = bool(ev.stats.gpu_phases)
    share = ev.phase_share(OPTIMIZER, gpu=gpu)
    if share < OPTIMIZER_SHARE:
        return []
    impl = optimizer_impl(ev)
    if impl is not None and impl[0] == FUSED:
        return []  # the fastest kernels torch has: this finding's fix does not apply
    detail = "" if impl is None else f"; {impl[0]} implementation ({impl[1]})"
    fw = ev.context.framework
    fused = fused_optimizer(fw, ev.context.optimizer_class)
    foreach = "" if fw == TRANSFORMERS else " (or foreach=True)"
    if impl is not None and impl[0] == MULTI:
        # From foreach to fused, about 40% of the phase.
        saved = 0.4
        fix = (
            "switch to the fused implementation where the optimizer has one (Adam, AdamW, "
            f"SGD, Adagrad): {fused}; with many small parameters, also consider "
            "torch.compile on the optimizer step"
        )
    else:
        # From per-parameter kernels, foreach/fused implementations cut the time to a
        # third or less.
        saved = 0.66
        fix = (
            f"use the multi-tensor or fused implementation: {fused}{foreach}; "
            "with many small parameters, also consider torch.compile on the optimizer step"
        )
    return [
        finding(
            ev,
            "steps.optimizer_heavy",
            "the optimizer step takes a large share of the step",
            f"optimizer {share * 100:.0f}% of the step's {'GPU' if gpu else 'wall'} time "
            f"({fmt.ms(ev.phase_mean(OPTIMIZER, gpu=gpu))} mean)" + detail,
            fix,
            "the optimizer phase shrinks on the attach screen",
            share=share * saved,
        )
    ]


@rule(
    "steps.outside_phases",
    "steps",
    "gputui: time outside data, forward, backward and optimizer is work the loop "
    "does between steps (logging, metrics, checkpoints)",
    ("steps",),
    trigger=(
        "time outside data, forward, backward and optimizer >= {steps.other_share} of the "
        "step (info)"
    ),
    bucket="python",
    symptom=True,
)
def outside_phases(ev: JobEvidence) -> Iterable[Finding]:
    share = ev.phase_share(OTHER)
    if ev.phases_coarse or share < OTHER_SHARE:
        return []
    # Informational: the time may be GPU work issued outside a module's forward
    # (it then costs nothing) or host work that the GPU waits for (then the
    # capture's and the GPU's rules measure its cost).
    return [
        finding(
            ev,
            "steps.outside_phases",
            "much of the step is outside the known phases",
            f"{share * 100:.0f}% of the step ({fmt.ms(ev.phase_p50(OTHER))} p50) is spent "
            "outside data loading, forward, backward and optimizer",
            "find out what runs there (logging, metrics, evaluation, Python between steps): "
            "wrap it in gputui.hook.phase('name') to see it as its own phase; log every N "
            "steps instead of every step",
            "the named phases show where the time goes; 'other' shrinks",
            severity=INFO,
        )
    ]


@rule(
    "steps.slow_outliers",
    "steps",
    "bottleneck tables: one step much slower than others; SageMaker Debugger: step outliers",
    ("steps",),
    trigger=(
        "ordinary steps over {steps.slow_factor} the median adding >= {steps.outlier_share} "
        "of the time; periodic ones are named (checkpoints, evaluation)"
    ),
    symptom_of=("data.epoch_start",),
    minimum=Minimum(steps=MIN_STEPS, trace=False),
    symptom=True,
)
def slow_outliers(ev: JobEvidence) -> Iterable[Finding]:
    p50 = ev.step_s
    if not p50:
        return []
    usual = ordinary(ev.steps)
    slow = [s for s in usual if is_slow(s.wall, p50)]
    total = sum(s.wall for s in usual)
    if not slow or not total:
        return []
    excess = sum(s.wall - p50 for s in slow)
    share = excess / total
    if share < OUTLIER_SHARE:
        return []
    worst = max(slow, key=lambda s: s.wall)
    factor = sum(s.wall for s in slow) / len(slow) / p50
    period = _period(slow)
    when = (
        f"every {_ordinal(period)} step ({len(slow)} of {len(usual)} steps), "
        f"{factor:.1f}x the median {fmt.ms(p50)}"
        if period
        else f"{len(slow)} of {len(usual)} steps took over {SLOW_FACTOR:g}x the median "
        f"{fmt.ms(p50)}, {factor:.1f}x on average"
    )
    phase, phase_share = _where_slow(usual, slow)
    where = (
        f"; {phase_share * 100:.0f}% of their extra time is {_PHASE_WORDS.get(phase, phase)}"
        if phase is not None
        else ""
    )
    return [
        finding(
            ev,
            "steps.slow_outliers",
            "some steps are much slower than the rest",
            f"{when} (slowest: step {worst.index}, {fmt.ms(worst.wall)}){where}",
            _restart_hint(ev, period)
            + "find what runs on those steps: checkpoint saving (save asynchronously or less "
            "often), evaluation, logging flushes, Python garbage collection (gc.freeze() after "
            "start-up), dataloader worker restarts (persistent_workers=True)",
            "the outliers list on the attach screen empties or the slow steps get shorter",
            share=share,
            bucket=_PHASE_BUCKETS.get(phase) if phase is not None else None,
        )
    ]


def _restart_hint(ev: JobEvidence, period: int | None) -> str:
    """Periodic slow steps, a DataLoader whose workers stop at each epoch's end,
    and steps that do not say where epochs begin (a hook that predates
    ``LOADER_START``): the restart first, as a question."""
    loader = ev.loader
    if period is None or loader is None or not loader.num_workers or loader.persistent_workers:
        return ""
    if any(s.flags & LOADER_START for s in ev.steps):
        return ""  # the hook flags epochs: data.epoch_start speaks where they are slow
    return (
        f"if every {_ordinal(period)} step begins an epoch, the DataLoader starts its "
        f"{loader.num_workers} worker(s) anew there: "
        f"{spell(PERSISTENT_WORKERS, ev.context.framework)} keeps them; else "
    )


def _epoch_bucket(ev: JobEvidence, phase: str | None) -> str | None:
    """The account bucket slow epoch starts draw on: their phase's, except that
    time outside the phases is the account's Python only where a capture split
    the step.  Without one, the live account's Python is what the sampler found
    in code outside torch, and stopping and starting workers is torch's own
    DataLoader code: the time, measured on every step, stands on its own."""
    bucket = _PHASE_BUCKETS.get(phase) if phase is not None else None
    if bucket == "python" and REST in ev.ledger.shares:
        return None
    return bucket


#: the account bucket a slow step's extra time lies in, by the phase that holds it
_PHASE_BUCKETS = {DATA: "data", COMM: "comm", OTHER: "python"}
_PHASE_WORDS = {DATA: "waiting for data", COMM: "in communication", OTHER: "outside the phases"}


def _period(slow: list[StepRecord]) -> int | None:
    """N when the slow steps come every Nth step: at least three of them, and
    all but a few of the gaps between them N (give or take a tenth), so that a
    stray slow step between two periodic ones does not hide the period."""
    if len(slow) < 3:
        return None
    gaps = [b.index - a.index for a, b in itertools.pairwise(slow)]
    common = median_low(gaps)
    near = sum(1 for g in gaps if abs(g - common) <= max(1, common // 10))
    return common if common > 1 and near >= PERIODIC_SHARE * len(gaps) else None


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _where_slow(usual: list[StepRecord], slow: list[StepRecord]) -> tuple[str | None, float]:
    """The phase that holds most of the slow steps' extra time over the median
    step's phases, and its share of that extra time (None: no phase stands out)."""
    names = {name for s in usual for name in s.phases}
    typical = {name: median(s.phases.get(name, 0.0) for s in usual) for name in names}
    extra = {
        name: sum(max(0.0, s.phases.get(name, 0.0) - typical[name]) for s in slow) for name in names
    }
    total = sum(extra.values())
    if total <= 0:
        return None, 0.0
    phase = max(extra, key=lambda n: extra[n])
    share = extra[phase] / total
    return (phase, share) if share >= 0.5 else (None, 0.0)


@rule(
    "data.epoch_start",
    "data",
    "PyTorch DataLoader docs: without persistent_workers=True the worker processes are "
    "shut down at each epoch's end and started anew for the next; bottleneck tables: one "
    "step much slower than others",
    ("steps",),
    trigger=(
        "the steps in which a DataLoader iterator gave its first batch (an epoch began; "
        "flagged by the hook) take over {steps.slow_factor} the median, at least two of "
        "them and most of the epoch starts, and add >= {steps.outlier_share} of the time; "
        "cost: their time over the median"
    ),
    minimum=Minimum(steps=MIN_STEPS, trace=False),
)
def epoch_start(ev: JobEvidence) -> Iterable[Finding]:
    p50 = ev.step_s
    if not p50:
        return []
    usual = ordinary(ev.steps)
    starts = [s for s in usual if s.flags & LOADER_START]
    slow = [s for s in starts if is_slow(s.wall, p50)]
    if len(slow) < 2 or 2 * len(slow) <= len(starts):
        return []
    total = sum(s.wall for s in usual)
    share = sum(s.wall - p50 for s in slow) / total if total else 0.0
    if share < OUTLIER_SHARE:
        return []
    factor = sum(s.wall for s in slow) / len(slow) / p50
    gaps = [b.index - a.index for a, b in itertools.pairwise(starts)]
    every = f", every {median_low(gaps)} steps" if gaps else ""
    evidence = (
        f"{len(slow)} of the {len(starts)} epoch starts in the last {len(usual)} steps (a "
        f"new DataLoader iterator{every}) took {factor:.1f}x the median {fmt.ms(p50)} step"
    )
    phase, phase_share = _where_slow(usual, slow)
    if phase is not None:
        evidence += (
            f"; {phase_share * 100:.0f}% of their extra time is {_PHASE_WORDS.get(phase, phase)}"
        )
    loader, fw = ev.loader, ev.context.framework
    restarts = loader is not None and loader.num_workers > 0 and not loader.persistent_workers
    if loader is not None:
        evidence += (
            f"; DataLoader(num_workers={loader.num_workers}, "
            f"persistent_workers={loader.persistent_workers})"
        )
    if restarts:
        assert loader is not None
        title = "each epoch starts the DataLoader's workers anew"
        fix = (
            f"keep the {loader.num_workers} worker(s) alive between epochs: "
            f"{spell(PERSISTENT_WORKERS, fw)}; each epoch otherwise stops them, starts new "
            "processes (each with its own copy of the dataset) and waits for their first "
            "batches"
        )
    else:
        title = "the first step of each epoch is slow"
        fix = (
            "find what runs when an epoch turns: evaluation or a checkpoint at the epoch's "
            "end, the sampler's or the dataset's per-epoch work (shuffling a large index, "
            "set_epoch), logging; "
            + (
                "the first batch of an epoch is loaded in the step (num_workers=0)"
                if loader is not None and loader.num_workers == 0
                else "the workers' first batches of an epoch"
            )
        )
    return [
        finding(
            ev,
            "data.epoch_start",
            title,
            evidence,
            fix,
            "the epochs' first steps fall toward the median: the attach screen's outliers "
            "list empties",
            share=share,
            bucket=_epoch_bucket(ev, phase),
        )
    ]


@rule(
    "steps.warmup",
    "steps",
    "bottleneck tables: first iterations much slower (JIT, cudnn autotuning, first "
    "allocations); benchmarks exclude warm-up",
    ("steps",),
    trigger="one of the first 3 steps over {steps.warmup_factor} the median (info)",
    minimum=Minimum(steps=MIN_STEPS, trace=False),
)
def warmup(ev: JobEvidence) -> Iterable[Finding]:
    p50 = ev.step_s
    if not p50:
        return []
    early = [s for s in ev.steps if is_warmup(s.index)]
    slow = [s for s in early if s.wall > WARMUP_FACTOR * p50]
    if not slow:
        return []
    total = sum(s.wall for s in early)
    return [
        finding(
            ev,
            "steps.warmup",
            "the first steps were slow (warm-up)",
            f"the first {len(early)} steps took {fmt.ms(total)} in all, against a median "
            f"step of {fmt.ms(p50)}; they are left out of the statistics",
            "expected once per run (CUDA context, cuDNN autotuning, torch.compile, first "
            "allocations); exclude them from benchmarks, or run a dummy step before timing",
            "only the first steps are marked as warm-up on the step bars",
            severity=INFO,
        )
    ]


@rule(
    "steps.coarse_phases",
    "steps",
    "gputui: with torch.compile or CUDA graphs the hook cannot see inside compiled code",
    ("steps",),
    trigger="torch.compile or CUDA graphs hide the phases inside compiled code (info)",
)
def coarse(ev: JobEvidence) -> Iterable[Finding]:
    if not ev.phases_coarse:
        return []
    return [
        finding(
            ev,
            "steps.coarse_phases",
            "phase times are coarse (compiled code)",
            "torch.compile or CUDA graphs run code the hook cannot see into: their time lands "
            "in the enclosing phase",
            "use a capture (p) for the GPU-side breakdown; phases of eager code stay exact",
            "the capture's kernel table shows the compiled work",
            severity=INFO,
        )
    ]
