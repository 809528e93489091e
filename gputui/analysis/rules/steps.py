"""Rules over the step records: data loading, the balance of forward, backward
and optimizer, slow steps and the warm-up."""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable, Iterable

from gputui import fmt
from gputui.analysis import thresholds
from gputui.analysis.evidence import MIN_STEPS, JobEvidence, ordinary
from gputui.analysis.finding import Finding
from gputui.analysis.frameworks import (
    FUSED_OPTIMIZER,
    LIGHTNING,
    PERSISTENT_WORKERS,
    TRANSFORMERS,
    loader_arg,
    loader_where,
    spell,
)
from gputui.analysis.host_code import (
    InMemoryData,
    LoadingHot,
    WorkersWait,
    in_memory_data,
    loading_hot,
    workers_wait,
)
from gputui.analysis.ledger import ISSUE
from gputui.analysis.live_account import REST
from gputui.analysis.optimizer import FUSED, MULTI, optimizer_impl
from gputui.analysis.registry import Minimum, finding, rule
from gputui.analysis.severity import INFO
from gputui.analysis.steps import SLOW_FACTOR, is_slow, is_warmup
from gputui.protocol.messages import BACKWARD, COMM, DATA, FORWARD, OPTIMIZER, OTHER, StepFlag
from gputui.protocol.steps import StepRecord

LOADER_START = int(StepFlag.LOADER_START)

#: the thresholds (gputui.analysis.thresholds): data loading's share of the step
#: (TensorBoard's advice), forward over backward (a sync in forward), backward over
#: forward (checkpointing), the optimizer's and the unphased time's share, the
#: time slow steps add, a warm-up step over the median
DATA_SHARE = thresholds.value("data.share")
FORWARD_OVER_BACKWARD = thresholds.value("steps.forward_over_backward")
BACKWARD_OVER_FORWARD = thresholds.value("steps.backward_over_forward")
OPTIMIZER_SHARE = thresholds.value("steps.optimizer_share")
OTHER_SHARE = thresholds.value("steps.other_share")
OUTLIER_SHARE = thresholds.value("steps.outlier_share")
WARMUP_FACTOR = thresholds.value("steps.warmup_factor")
#: the share of the gaps between slow steps that must be one period for them to be
#: "every Nth step"
PERIODIC_SHARE = 0.8
#: a function's share of the loading's sampled time from which it is named
HOT_SHARE = thresholds.value("data.hot_share")
#: the workers' share of time waiting for work from which they keep up
WORKERS_IDLE = thresholds.value("data.workers_idle")


@rule(
    "data.loader_wait",
    "data",
    "TensorBoard profiler: DataLoader over 5% of the step; bottleneck tables: GPU idle "
    "while the CPU is busy, GPU utilization under 70-80% with idle gaps",
    ("steps",),
    trigger=(
        "the data phase (waiting in DataLoader.__next__) >= {data.share} of the step "
        "(TensorBoard's threshold); where the Python sampler saw the loading (the workers, "
        "or the training thread with num_workers=0), a function holding >= {data.hot_share} "
        "of its time is named, and the fix points at it; where the hook said the job's CPU "
        "cores, the fix names how many workers keep up (1/(1 - the wait's share) times "
        "as many) and how many the cores allow; a trace's DataLoader range says whether "
        "workers made the batches"
    ),
    bucket="data",
)
def loader_wait(ev: JobEvidence) -> Iterable[Finding]:
    share = ev.phase_share(DATA)
    if share < DATA_SHARE:
        return []
    led = ev.ledger
    waits = led.share("data") if led.has_account and led.step_s else None
    if waits is None:
        p50 = ev.phase_p50(DATA)
        evidence = (
            f"the training loop waits {share * 100:.0f}% of the time for the next batch "
            f"(data p50 {fmt.ms(p50)} of a {fmt.ms(ev.step_s)} step)"
        )
    else:  # the ledger's figures: its window's mean step, as the account shows them
        evidence = (
            f"the training loop waits {waits * 100:.0f}% of the step for the next batch "
            f"({fmt.ms(waits * (led.step_s or 0.0))} of a {fmt.ms(led.step_s)} step)"
        )
        if round(100 * waits) != round(100 * share):
            # a trace: the step breakdown's DataLoader time with nothing else running
            evidence += f"; with the GPU idle, {share * 100:.0f}% of the step"
    gpu = ev.gpu
    if gpu is not None and gpu.util_pct is not None:
        evidence += f"; GPU util {gpu.util_pct:.0f}%"
    loader = ev.loader
    if loader is not None:
        evidence += (
            f"; DataLoader(num_workers={loader.num_workers}, pin_memory={loader.pin_memory})"
        )
    more_evidence, fix = _loader_fix(ev, share)
    evidence += more_evidence
    # A job without a GPU: the data holds the step back, and the step gets shorter.
    return [
        finding(
            ev,
            "data.loader_wait",
            "data loading holds the GPU back" if ev.cuda else "data loading holds the step back",
            evidence,
            fix,
            "the data phase falls under 5% of the step on the attach screen and "
            + ("GPU utilization rises" if ev.cuda else "the step time falls"),
            share=share,
        )
    ]


def _hot_words(hot: LoadingHot) -> str:
    """``the 2 workers spend 97% of their time in decode_sample (data.py:12)``."""
    h = hot.hot
    who = (
        f"the {hot.workers} DataLoader workers spend"
        if hot.workers
        else "the training thread spends"
    )
    of = "of their time" if hot.workers else "of its data wait"
    return f"{who} {h.share * 100:.0f}% {of} in {h.label}{h.called_from}"


def _loader_fix(ev: JobEvidence, share: float) -> tuple[str, str]:
    """What the data finding adds to its evidence (where the batches are made,
    the workers' hot function), and its fix: for the loader the hook saw (or
    the one a trace's DataLoader range names), in the job's framework's terms."""
    said = ""
    loader = ev.loader
    fw = ev.context.framework

    def arg(name: str) -> str:
        return loader_arg(name, fw)

    markers = None if ev.capture is None else ev.capture.markers
    where = loader_where(fw)
    if loader is None and markers is not None and markers.loader is not None:
        # a trace: its DataLoader's range names where the batches are made
        said += "; the DataLoader makes them in " + (
            "worker processes" if markers.loader == "workers" else "the training process"
        )
    waiting = workers_wait(ev.python_profile)
    if (
        waiting is not None
        and waiting.idle >= WORKERS_IDLE
        and (loader is None or loader.num_workers > 0)
    ):
        said += _waiting_words(waiting, loader.num_workers if loader else None)
        return said, _handoff_fix(waiting, ev, arg, where)
    memory = in_memory_data(ev.python_profile)
    if memory is not None and (loader is None or loader.num_workers == 0):
        fix = _in_memory_fix(memory, ev)
        if fix is not None:
            share_words = f"{(memory.indexing + memory.collating) * 100:.0f}%"
            said += (
                "; the batches are indexed out of in-memory tensors (torch's dataset "
                f"indexing and collating: {share_words} of the data wait)"
            )
            return said, fix
    hot = loading_hot(ev.python_profile)
    more = _more_workers(ev, share, arg)
    cheaper = "make each sample cheaper (decode and augment once, cache" + (
        ", or on the GPU with e.g. NVIDIA DALI)" if ev.cuda else ")"
    )
    if hot is not None and hot.hot.share >= HOT_SHARE:
        said += "; " + _hot_words(hot)
        fix = _hot_fix(hot, ev.cuda, arg, where, more is None)
        if more is not None:
            fix = f"{more}; {fix}"
    elif more is not None:
        fix = f"{more}; {cheaper}"
    elif loader is None and markers is not None and markers.loader == "workers":
        fix = _unsampled_workers_fix(ev, arg, where, cheaper)
    elif (loader is not None and loader.num_workers == 0) or (
        loader is None and markers is not None and markers.loader == "main"
    ):
        fix = (
            f"the DataLoader loads every batch in the training process (num_workers=0): "
            f"set {arg('num_workers')}=N (N up to the free CPU cores"
            + (
                f", e.g. 4-8 per GPU), {arg('persistent_workers')}=True and "
                f"{arg('pin_memory')}=True"
                if ev.cuda
                else f"), {arg('persistent_workers')}=True"
            )
            + f"{where} so batches are ready before the step asks"
        )
    elif loader is not None:
        fix = _unsampled_workers_fix(ev, arg, where, cheaper)
    elif fw is not None:
        fix = (
            f"load batches ahead in worker processes: {arg('num_workers')}=N (N up to the "
            "free CPU cores), "
            + (f"{arg('pin_memory')}=True, " if ev.cuda else "")
            + f"{arg('persistent_workers')}=True, {arg('prefetch_factor')}=4{where}; "
            "move decoding and augmentation into the workers"
            + (" or onto the GPU (e.g. NVIDIA DALI)" if ev.cuda else "")
        )
    else:
        fix = (
            "load batches ahead in worker processes: DataLoader(num_workers=N with N up to the "
            "free CPU cores, "
            + ("pin_memory=True, " if ev.cuda else "")
            + "persistent_workers=True, prefetch_factor=4); move "
            "decoding and augmentation into the workers"
            + (" or onto the GPU (e.g. NVIDIA DALI)" if ev.cuda else "")
        )
    return said, fix


def _unsampled_workers_fix(
    ev: JobEvidence, arg: Callable[[str], str], where: str, cheaper: str
) -> str:
    """The fix where the loop waits for its workers' batches and nothing
    sampled the workers (a trace, a hook without the sampler): whether they
    fall behind or keep up is not known, so both ways out are named."""
    pinned = ev.loader is not None and ev.loader.pin_memory
    handoff = "index whole batches at once" + (
        f", {arg('pin_memory')}=True" if ev.cuda and not pinned else ""
    )
    return (
        f"the training process waits for its workers' batches: if they fall behind, raise "
        f"{arg('num_workers')} (up to the free CPU cores) and {arg('prefetch_factor')}{where}, "
        f"{cheaper}; if they keep up (gputui attach samples them), handing each batch over is "
        f"the cost: {handoff}"
    )


def _waiting_words(waiting: WorkersWait, workers: int | None) -> str:
    """``; the 2 DataLoader workers wait for work 58% of their time, and ...``:
    as many workers as the DataLoader has, where the hook said (the sampler
    counts every process it saw, and workers that restart each epoch are new
    processes each time)."""
    said = (
        f"; the {workers or waiting.workers} DataLoader workers wait for work "
        f"{waiting.idle * 100:.0f}% of their time"
    )
    if waiting.receive is not None and waiting.receive >= 0.1:
        said += (
            f", and the training thread spends {waiting.receive * 100:.0f}% of its data wait "
            "receiving their batches"
        )
    return said


def _handoff_fix(
    waiting: WorkersWait, ev: JobEvidence, arg: Callable[[str], str], where: str
) -> str:
    """The fix where the workers keep up: the wait is each batch's hand-off (a
    worker collates it into shared memory, the training process receives it),
    so more workers would only wait too.  Samples made by torch's own indexing
    and collating (little of the workers' busy time in the job's code) are
    cheap: a whole batch indexed at once, in the training process, skips the
    per-sample calls and the hand-off (the HF Trainer builds its DataLoader
    itself, so it is told only what its arguments can do)."""
    fw = ev.context.framework
    loader = ev.loader
    fix = (
        "the workers keep up (more would wait too); the time goes to handing each batch "
        "over: a worker collates it into shared memory and the training process receives it"
    )
    if waiting.own < 0.5 and fw != TRANSFORMERS:
        call = _batch_call(fw)
        fix += (
            ". The samples are cheap to make (torch's own indexing and collating): index a "
            f"whole batch at once in the training process, {call}, for a dataset whose "
            "__getitem__ takes a list of indices, as a TensorDataset's does"
            + (
                ", or keep a dataset that fits in GPU memory there and index it there"
                if ev.cuda
                else ""
            )
        )
        where = ""
    if ev.cuda and (loader is None or not loader.pin_memory):
        fix += f"; set {arg('pin_memory')}=True{where}"
    return fix


def _batch_call(fw: str | None) -> str:
    """The DataLoader that indexes a whole batch at once, where the job makes it."""
    call = (
        "DataLoader(dataset, sampler=BatchSampler(RandomSampler(dataset), batch_size, "
        "drop_last=False), batch_size=None)"
    )
    return f"return {call} from train_dataloader()" if fw == LIGHTNING else call


def _in_memory_fix(memory: InMemoryData, ev: JobEvidence) -> str | None:
    """The fix for batches indexed out of host memory on the training thread:
    the data on the GPU (a GPU job), a batch indexed at once where samples are
    collated one by one; workers would only add a hand-off for each batch.
    None where neither applies (a CPU job that indexes whole batches)."""
    fw = ev.context.framework
    ways = []
    if ev.cuda:
        ways.append(
            "index each batch with one tensor of indices made on the GPU (a slice of "
            "torch.randperm(n, device='cuda')) rather than a Python list, out of the dataset's "
            "tensors in GPU memory (moved there once, where they fit)"
        )
    if memory.collating >= 0.1 and fw != TRANSFORMERS:
        ways.append(f"{'at least ' if ways else ''}index a whole batch at once, {_batch_call(fw)}")
    if not ways:
        return None
    return (
        "making a batch is indexing: "
        + "; or ".join(ways)
        + ". DataLoader workers would add a hand-off to the training process for each batch"
    )


def _more_workers(ev: JobEvidence, share: float, arg: Callable[[str], str]) -> str | None:
    """Where the hook said how many CPU cores the job may use and its DataLoader
    has workers: how many workers would keep up with the step (the workers make
    batches at a steady rate, so it takes 1/(1 - wait share) times as many), and
    whether the cores allow them.  None where either is unknown."""
    loader, cpus = ev.loader, ev.cpus
    if loader is None or not loader.num_workers or cpus is None or share >= 1.0:
        return None
    workers, where = loader.num_workers, loader_where(ev.context.framework)
    needed = math.ceil(workers / (1.0 - share))
    free = max(1, cpus - 1)  # a core for the training process
    if workers >= free:
        return (
            f"its {workers} workers already have the job's {cpus} CPU cores: more workers "
            "cannot help"
        )
    if needed <= free:
        return (
            f"raise {arg('num_workers')} from {workers} to about {needed}{where}: "
            f"at this wait, that many keep up with the step, and the job may use {cpus} CPU cores"
        )
    return (
        f"raise {arg('num_workers')} from {workers} to {free}{where} "
        f"(the job may use {cpus} CPU cores; about {needed} would keep up)"
    )


def _hot_fix(
    hot: LoadingHot, cuda: bool, arg: Callable[[str], str], where: str, more: bool = True
) -> str:
    """The fix, pointed at the function the loading spends its time in (with
    ``more``: and more workers, where how many is not known), in the job's
    framework's arguments (``arg``, ``where``); a job without a GPU is not
    told to decode on one or to pin memory for it."""
    h = hot.hot
    cheaper = f"make {h.label}{h.called_from} cheaper: decode and augment once and cache, " + (
        "vectorise it, or move it onto the GPU (e.g. NVIDIA DALI)" if cuda else "vectorise it"
    )
    if hot.workers and not more:
        return f"the workers are busy in one function: {cheaper}"
    if hot.workers:
        return (
            f"the workers are busy in one function: {cheaper}; or raise {arg('num_workers')} "
            f"(up to the free CPU cores) and {arg('prefetch_factor')}{where}"
        )
    pin = f" and {arg('pin_memory')}=True" if cuda else ""
    return (
        f"the DataLoader loads every batch in the training process (num_workers=0): {cheaper}; "
        f"and set {arg('num_workers')}=N (N up to the free CPU cores), "
        f"{arg('persistent_workers')}=True{pin}{where} so batches are ready before the step asks"
    )


@rule(
    "steps.forward_slower_than_backward",
    "sync",
    "profiler observations: forward time much above backward time points at a "
    "synchronisation (.item(), print(tensor), .cpu()) in the forward pass",
    ("steps",),
    trigger=(
        "forward >= {steps.forward_over_backward} backward on the CPU clock while the GPU's "
        "own forward is not (a sync in the forward)"
    ),
    bucket="sync",
    symptom=True,
)
def forward_slower(ev: JobEvidence) -> Iterable[Finding]:
    forward, backward = ev.phase_mean(FORWARD), ev.phase_mean(BACKWARD)
    if ev.phases_coarse or not forward or not backward:
        return []
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
    fused = spell(FUSED_OPTIMIZER, fw)
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
    common = statistics.median_low(gaps)
    near = sum(1 for g in gaps if abs(g - common) <= max(1, common // 10))
    return common if common > 1 and near >= PERIODIC_SHARE * len(gaps) else None


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _where_slow(usual: list[StepRecord], slow: list[StepRecord]) -> tuple[str | None, float]:
    """The phase that holds most of the slow steps' extra time over the median
    step's phases, and its share of that extra time (None: no phase stands out)."""
    names = {name for s in usual for name in s.phases}
    median = {name: statistics.median(s.phases.get(name, 0.0) for s in usual) for name in names}
    extra = {
        name: sum(max(0.0, s.phases.get(name, 0.0) - median[name]) for s in slow) for name in names
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
    every = f", every {statistics.median_low(gaps)} steps" if gaps else ""
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
