"""The data-loading rule: the training loop waits for its next batch
(``data.loader_wait``), and the fix follows where the batches are made and what
holds them: the DataLoader's workers falling behind (how many would keep up,
against the job's cores), workers that keep up while each batch's hand-off to
the training process costs, batches indexed out of in-memory tensors, or the
function the loading spends its time in; in the job's framework's terms.

Slow epoch starts (``data.epoch_start``) are steps' outliers, in
:mod:`gputui.analysis.rules.steps`."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable

from gputui import fmt
from gputui.analysis import host_code, thresholds
from gputui.analysis.evidence import JobEvidence
from gputui.analysis.finding import Finding
from gputui.analysis.frameworks import LIGHTNING, TRANSFORMERS, loader_arg, loader_where
from gputui.analysis.registry import finding, rule
from gputui.protocol.messages import DATA

#: the thresholds (gputui.analysis.thresholds): data loading's share of the step
#: (TensorBoard's advice); a function's share of the loading's sampled time from
#: which it is named; the workers' share of time waiting for work from which they
#: keep up
DATA_SHARE = thresholds.value("data.share")
HOT_SHARE = thresholds.value("data.hot_share")
WORKERS_IDLE = thresholds.value("data.workers_idle")
#: a host-to-device copy by where its source lies ("Memcpy HtoD (Pinned -> Device)")
_HTOD_FROM = re.compile(r"^Memcpy HtoD \((\w+)")


def _main_process(ev: JobEvidence) -> str:
    """The process that runs the loop: an inference job has no training one."""
    return "the main process" if ev.context.inference else "the training process"


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
        "of its time is named, and the fix points at it; workers waiting for work >= "
        "{data.workers_idle} of their time keep up: the fix is the batches' hand-off (a batch "
        "indexed at once, pinned memory), not more workers; a data wait mostly in torch's "
        "indexing of in-memory tensors is told to index on the GPU with a tensor; where the "
        "hook said the job's CPU cores, the fix names how many workers keep up (1/(1 - the "
        "wait's share) times as many) and how many the cores allow; a trace's DataLoader range "
        "says whether workers made the batches; pin_memory=True is asked only where the batches "
        "are not known to be pinned (the hook's DataLoader, or a trace's host-to-device copies "
        "all from pinned memory)"
    ),
    bucket="data",
)
def loader_wait(ev: JobEvidence) -> Iterable[Finding]:
    share = ev.phase_share(DATA)
    if share < DATA_SHARE:
        return []
    led = ev.ledger
    waits = led.share("data") if led.has_account and led.step_s else None
    # a job that runs no backward (an inference pipeline) has no training loop
    loop = "the inference loop" if ev.context.inference else "the training loop"
    if waits is None:
        p50 = ev.phase_p50(DATA)
        evidence = (
            f"{loop} waits {share * 100:.0f}% of the time for the next batch "
            f"(data p50 {fmt.ms(p50)} of a {fmt.ms(ev.step_s)} step)"
        )
    else:  # the ledger's figures: its window's mean step, as the account shows them
        evidence = (
            f"{loop} waits {waits * 100:.0f}% of the step for the next batch "
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


def _hot_words(hot: host_code.LoadingHot) -> str:
    """``the DataLoader workers (2 processes sampled) spend 97% of their time in
    decode_sample (data.py:12)``: processes, not num_workers (a DataLoader
    iterator made anew each epoch, its workers too, shows more of them)."""
    h = hot.hot
    who = (
        f"the DataLoader workers ({hot.workers} process{'' if hot.workers == 1 else 'es'} "
        "sampled) spend"
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
            "worker processes" if markers.loader == "workers" else _main_process(ev)
        )
    waiting = host_code.workers_wait(ev.python_profile)
    if (
        waiting is not None
        and waiting.idle >= WORKERS_IDLE
        and (loader is None or loader.num_workers > 0)
    ):
        said += _waiting_words(waiting, loader.num_workers if loader else None)
        return said, _handoff_fix(waiting, ev, arg, where)
    memory = host_code.in_memory_data(ev.python_profile)
    if memory is not None and (loader is None or loader.num_workers == 0):
        fix = _in_memory_fix(memory, ev)
        if fix is not None:
            share_words = f"{(memory.indexing + memory.collating) * 100:.0f}%"
            said += (
                "; the batches are indexed out of in-memory tensors (torch's dataset "
                f"indexing and collating: {share_words} of the data wait)"
            )
            return said, fix
    hot = host_code.loading_hot(ev.python_profile)
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
            f"the DataLoader loads every batch in {_main_process(ev)} (num_workers=0): "
            f"set {arg('num_workers')}=N (N up to the free CPU cores"
            + (", e.g. 4-8 per GPU" if ev.cuda else "")
            + f"), {arg('persistent_workers')}=True"
            + (f" and {arg('pin_memory')}=True" if ev.cuda and not _pinned(ev) else "")
            + f"{where} so batches are ready before the step asks"
        )
    elif loader is not None:
        fix = _unsampled_workers_fix(ev, arg, where, cheaper)
    elif fw is not None:
        fix = (
            f"load batches ahead in worker processes: {arg('num_workers')}=N (N up to the "
            "free CPU cores), "
            + (f"{arg('pin_memory')}=True, " if ev.cuda and not _pinned(ev) else "")
            + f"{arg('persistent_workers')}=True, {arg('prefetch_factor')}=4{where}; "
            "move decoding and augmentation into the workers"
            + (" or onto the GPU (e.g. NVIDIA DALI)" if ev.cuda else "")
        )
    else:
        fix = (
            "load batches ahead in worker processes: DataLoader(num_workers=N with N up to the "
            "free CPU cores, "
            + ("pin_memory=True, " if ev.cuda and not _pinned(ev) else "")
            + "persistent_workers=True, prefetch_factor=4); move "
            "decoding and augmentation into the workers"
            + (" or onto the GPU (e.g. NVIDIA DALI)" if ev.cuda else "")
        )
    return said, fix


def _pinned(ev: JobEvidence) -> bool:
    """Whether the batches already come from pinned memory, so that
    ``pin_memory=True`` is no advice: the DataLoader the hook saw says; in a
    trace, its host-to-device copies do (some from pinned memory and none from
    pageable memory among the GPU activities' rows)."""
    if ev.loader is not None:
        return ev.loader.pin_memory
    if ev.capture is None:
        return False
    sources = {m.group(1) for k in ev.capture.kernels if (m := _HTOD_FROM.match(k.name))}
    return "Pinned" in sources and "Pageable" not in sources


def _unsampled_workers_fix(
    ev: JobEvidence, arg: Callable[[str], str], where: str, cheaper: str
) -> str:
    """The fix where the loop waits for its workers' batches and nothing
    sampled the workers (a trace, a hook without the sampler): whether they
    fall behind or keep up is not known, so both ways out are named."""
    pinned = _pinned(ev)
    handoff = "index whole batches at once" + (
        f", {arg('pin_memory')}=True" if ev.cuda and not pinned else ""
    )
    return (
        f"{_main_process(ev)} waits for its workers' batches: if they fall behind, raise "
        f"{arg('num_workers')} (up to the free CPU cores) and {arg('prefetch_factor')}{where}, "
        f"{cheaper}; if they keep up (gputui attach samples them), handing each batch over is "
        f"the cost: {handoff}"
    )


def _waiting_words(waiting: host_code.WorkersWait, workers: int | None) -> str:
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
    waiting: host_code.WorkersWait, ev: JobEvidence, arg: Callable[[str], str], where: str
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
            + (f", or {_ON_GPU}" if ev.cuda else "")
        )
        where = ""
    if ev.cuda and (loader is None or not loader.pin_memory):
        fix += f"; set {arg('pin_memory')}=True{where}"
    return fix


#: a batch drawn on the GPU: the dataset's tensors there, one index tensor a batch
_ON_GPU = (
    "index each batch with one tensor of indices made on the GPU (a slice of "
    "torch.randperm(n, device='cuda')) rather than a Python list, out of the dataset's "
    "tensors in GPU memory (moved there once, where they fit)"
)


def _batch_call(fw: str | None) -> str:
    """The DataLoader that indexes a whole batch at once, where the job makes it."""
    call = (
        "DataLoader(dataset, sampler=BatchSampler(RandomSampler(dataset), batch_size, "
        "drop_last=False), batch_size=None)"
    )
    return f"return {call} from train_dataloader()" if fw == LIGHTNING else call


def _in_memory_fix(memory: host_code.InMemoryData, ev: JobEvidence) -> str | None:
    """The fix for batches indexed out of host memory on the training thread:
    the data on the GPU (a GPU job), a batch indexed at once where samples are
    collated one by one; workers would only add a hand-off for each batch.
    None where neither applies (a CPU job that indexes whole batches)."""
    fw = ev.context.framework
    ways = []
    if ev.cuda:
        ways.append(_ON_GPU)
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
    hot: host_code.LoadingHot, cuda: bool, arg: Callable[[str], str], where: str, more: bool = True
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
