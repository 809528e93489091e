"""Rules that follow the step's time account (DESIGN §10): the diagnosis goes to
the bucket that holds most of the step, and each rule claims only time from its
own bucket.

- ``cpu.logging``: Lightning's logging (``self.log``, the progress bar reading
  logged tensors back with ``.item()``) holds a share of the training thread's
  time, by the Python sampler.
- ``cpu.python``: the step's largest share is the job's own code or a library's
  on the training thread, outside torch (preprocessing, augmentation, logging, a
  Python loop over tensors), and the GPU -- when there is one -- waits for it.
  A capture's account says how much of the step is host time outside torch ops;
  the hook's Python sampler says whose code that is (torch's own Python -- the
  autograd engine, optimizers, module calls -- is torch's).  With both, the
  finding takes the smaller; with the sampler alone, it reads the sampler
  (gputui.analysis.host_code), which needs no capture.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from gputui import fmt
from gputui.analysis import thresholds
from gputui.analysis.evidence import CPU_OP_US, JobEvidence
from gputui.analysis.finding import Finding
from gputui.analysis.frameworks import BIGGER_BATCH, larger_batch, lightning_logging, spell
from gputui.analysis.host_code import HostCode, host_code, where
from gputui.analysis.ledger import HOST_CODE
from gputui.analysis.registry import Minimum, finding, rule
from gputui.analysis.severity import INFO
from gputui.protocol.capture import CpuOpRow
from gputui.protocol.trace_metrics import StepAccount, account_label

#: Python outside torch from this share of the step is worth a finding ...
PYTHON_SHARE = thresholds.value("cpu.python_share")
#: ... when the GPU (if any) idles at least this share of the step meanwhile
GPU_IDLE_SHARE = thresholds.value("cpu.gpu_idle_share")
#: a framework's logging from this share of the training thread's time
LOGGING_SHARE = thresholds.value("cpu.logging_share")
#: launch + dispatch from this share of the step make a step launch-bound
LAUNCH_SHARE = thresholds.value("launch.issue_share")
#: random tensors made on the CPU: their share of the step, and their time per
#: call, from which they are a finding
CREATION_SHARE = thresholds.value("cpu.creation_share")
CREATION_CALL_US = thresholds.value("cpu.creation_call_us")
#: torch ops on the CPU: from this share of a GPU job's step they are a finding
HOST_OPS_SHARE = thresholds.value("cpu.host_ops_share")


def account_of(ev: JobEvidence) -> StepAccount | None:
    cap = ev.capture
    acct = None if cap is None else cap.account
    return acct if acct is not None and acct.step_us > 0 and acct.steps > 0 else None


def shares_text(acct: StepAccount, *buckets: str, cuda: bool = True) -> str:
    """``python 71%, torch dispatch 12%`` for the named buckets (``cuda``: the
    job runs on a GPU; without one, torch's ops are its compute)."""
    return ", ".join(
        f"{account_label(b, cuda)} {acct.share(b) * 100:.0f}%" for b in buckets if acct.share(b) > 0
    )


def _groups(acct: StepAccount, cpu_work: float = 0.0) -> dict[str, float]:
    # the model's own Python around its ops (a trace with Python stacks) is the
    # cost of issuing them: what torch.compile and CUDA graphs take away
    model = acct.model_python_share
    return {
        "python": acct.share("python") - model,
        "launch": acct.share("launch") + max(0.0, acct.share("dispatch") - cpu_work) + model,
        "sync": acct.share("sync"),
        "data": acct.share("data"),
        "comm": acct.share("comm"),
        "phase": acct.share("phase"),
    }


def cpu_side_largest(acct: StepAccount, cpu_work: float = 0.0) -> str:
    """Which CPU-side cause holds most of the step: "python", "launch" (launch
    and dispatch together: the cost of issuing ops, less ``cpu_work``, the share
    of the step torch's ops spent computing on the CPU, plus the model's own Python
    where a trace's Python stack tells it), "sync", "data" or "comm"."""
    groups = _groups(acct, cpu_work)
    return max(groups, key=lambda k: groups[k])


#: where host-side work goes instead
_WHERE_TO = (
    "data preprocessing and augmentation into DataLoader workers (num_workers > 0) or onto "
    "the GPU as torch ops; vectorise Python loops over tensors; log and checkpoint every N "
    "steps"
)
#: the same for a job that runs no backward (inference): no checkpoints, no
#: training loop's logging
_WHERE_TO_INFERENCE = (
    "prepare the inputs ahead (a DataLoader with workers, or a thread that fills a queue) "
    "or as torch ops on the device; vectorise Python loops over tensors; keep per-call "
    "bookkeeping (.item(), .tolist(), Python branches on tensor values) out of the forward"
)


#: a function the training thread spends this share of its time in off the CPU
#: waits there (a sleep, blocking I/O, a lock): faster Python is not its fix
OFF_CPU_SHARE = 0.5


def _off_cpu_words(host: HostCode | None) -> str:
    """``; the training thread was off the CPU 85% of that time ...`` where the
    sampler's CPU clock says the time outside torch was mostly waiting."""
    if host is None or host.off_cpu is None or host.off_cpu < OFF_CPU_SHARE / 2:
        return ""
    return (
        f"; the training thread was off the CPU {host.off_cpu * 100:.0f}% of that time "
        "(sleeping, blocked in I/O or on a lock: by its own CPU clock), waiting rather "
        "than computing"
    )


def _fix(host: HostCode | None, model: bool, where: str, inference: bool = False) -> str:
    """The fix, pointed at the function the sampler names first (for an
    inference job, without the training loop's advice)."""
    rows = () if host is None else (host.all_functions if model else host.functions)
    loop, where_to = (
        ("the inference loop", _WHERE_TO_INFERENCE)
        if inference
        else ("the training loop", _WHERE_TO)
    )
    if not rows:
        return (
            f"move the host-side work out of {loop}: {where_to}. A Python "
            f"profiler names the function ({where}'s stack: gputui's sampler in a hooked "
            "job, py-spy dump, or torch.profiler with with_stack=True)"
        )
    top = rows[0]
    if top.off_cpu >= OFF_CPU_SHARE:
        return (
            f"start with {top.label}{top.called_from}: the training thread waits there off "
            f"the CPU {top.off_cpu * 100:.0f}% of its time (a sleep, blocking file or network "
            "I/O, a lock, a subprocess), which faster Python does not shorten: drop the wait, "
            f"or take it off {loop} (a background thread or process, asynchronous I/O, "
            "prefetching, writing logs and checkpoints in the background)"
        )
    return (
        f"start with {top.label}{top.called_from}: make it cheaper, or move it out of "
        f"{loop}: {where_to}"
    )


#: a Python frame of the trace's stack: ``file.py(LINE): function``, and a C
#: function or method: ``<built-in method NAME of TYPE object at 0x...>``
_FRAME = re.compile(r"(?P<file>[^()]+)\((?P<line>\d+)\): (?P<fn>.+)\Z")
_BUILTIN = re.compile(
    r"<built-in (?:method (?P<m>\S+) of (?P<type>\S+) object|function (?P<f>[^\s>]+))"
)
#: frames named where a trace's stack says whose the Python outside torch is
NAMED_FRAMES = 3
#: a frame is named from this share of the step
NAMED_FRAME_SHARE = 0.01


def frame_label(name: str) -> str:
    """A frame of a trace's Python stack in a reader's words:
    ``normalize (transformers/image_transforms.py:390)``, ``numpy.ndarray.astype``,
    ``array (built-in)``; sanitized (the trace's text is the job's)."""
    m = _FRAME.match(name)
    if m:
        label = f"{m['fn']} ({m['file']}:{m['line']})"
    else:
        b = _BUILTIN.match(name)
        if b and b["m"]:
            label = f"{b['type']}.{b['m']}"
        elif b:
            label = f"{b['f']} (built-in)"
        else:
            label = name
    return fmt.clean(label, 100)


#: a C function that waits (a lock, a queue, a pipe, a socket, a sleep): its self
#: time is a wait (the DataLoader's queue, another thread), not Python's work
_WAITS = re.compile(
    r"<built-in (?:method|function) (?:acquire|wait|poll|select|epoll|sleep|read|readinto|"
    r"recv|recv_into|recv_bytes|get|join)[ >]"
)
#: the first frame named must hold this share of the Python it speaks for
NAMED_FIRST_SHARE = 0.25


def _unnamed_frame(name: str) -> bool:
    """A frame of torch's own Python (module calls, the optimizers, the
    DataLoader, the profiler's step), a C method of its tensors, or a wait."""
    return (
        name.startswith("torch/")
        or " of Tensor object" in name
        or " of torch." in name
        or _WAITS.match(name) is not None
    )


def stack_frames(ev: JobEvidence, share: float) -> list[tuple[str, float]]:
    """The frames a trace's Python stack names for ``share`` of the step in Python
    outside torch: outside torch's own files and waits, from
    :data:`NAMED_FRAME_SHARE` of the step, the most first (:data:`NAMED_FRAMES`
    of them); none where the largest holds under :data:`NAMED_FIRST_SHARE` of
    ``share`` (the stack does not say whose most of it is)."""
    frames = [
        (frame_label(name), got)
        for name, got in ev.python_frames
        if got >= NAMED_FRAME_SHARE and not _unnamed_frame(name)
    ][:NAMED_FRAMES]
    return frames if frames and frames[0][1] >= NAMED_FIRST_SHARE * share else []


#: packages whose frames wait (on the DataLoader's workers, a queue, a thread) or
#: are torch's own: never named as whose the Python is
_WAITING_PACKAGES = frozenset(
    {"torch", "multiprocessing", "threading.py", "queue.py", "selectors.py", "concurrent"}
)
#: packages whose Python is a training framework's own loop, hooks and logging
_FRAMEWORKS = frozenset({"lightning", "pytorch_lightning", "transformers", "accelerate"})
_LIGHTNING_HOOKS = (
    "; log less often (Trainer(log_every_n_steps=...), self.log(..., on_step=False)) and "
    "refresh the progress bar less (TQDMProgressBar(refresh_rate=...))"
)


def _from_stack(
    ev: JobEvidence, share: float, step_s: float, evidence: str, fix: str
) -> tuple[str, str]:
    """cpu.python's evidence and fix where a trace's Python stack says whose the
    Python is (the sampler's stand-in): a function that holds a good part of it,
    else a package whose code does (a framework's own per-step work)."""
    loop = "the inference loop" if ev.context.inference else "the training loop"
    where_to = _WHERE_TO_INFERENCE if ev.context.inference else _WHERE_TO
    frames = stack_frames(ev, share)
    if frames:
        evidence += "; by the trace's Python stack, its largest self times: " + ", ".join(
            f"{label} {got * 100:.0f}%" for label, got in frames
        )
        return evidence, (
            f"start with {frames[0][0]}: make it cheaper, or move it out of {loop}: {where_to}"
        )
    packages = [
        (name, got)
        for name, got in ev.python_packages
        if name not in _WAITING_PACKAGES and got >= NAMED_FIRST_SHARE * share
    ]
    if not packages:
        return evidence, fix
    name, got = packages[0]
    own = (name + "/", name + "(")
    top = max((g for n, g in ev.python_frames if n.startswith(own)), default=0.0)
    label = fmt.clean(name, 60)
    evidence += (
        f"; by the trace's Python stack, the largest part is {label}'s code "
        f"({got * 100:.0f}% of the step), spread over its functions (none over "
        f"{max(top, 0.01) * 100:.0f}%)"
    )
    if name not in _FRAMEWORKS:
        return evidence, (
            f"start with {label}'s code: make it cheaper, or move it out of {loop}: {where_to}"
        )
    return evidence, (
        f"the time is {label}'s own per-step work (its loop, hooks and logging), large "
        f"beside a step this short ({fmt.ms(step_s)}): do more work per step, "
        + (
            larger_batch(ev.context.framework, ev.micro_batches)
            if ev.micro_batches >= 2
            else f"a larger batch ({spell(BIGGER_BATCH, ev.context.framework)})"
        )
        + (_LIGHTNING_HOOKS if name in ("lightning", "pytorch_lightning") else "")
    )


def _gpu_busy(ev: JobEvidence, acct: StepAccount | None) -> float | None:
    """The GPU's busy share of the step where known: the account's, else (no
    capture) NVML's while attached, as the ledger has it."""
    if acct is not None:
        return acct.gpu_busy_share if ev.cuda or acct.gpu_busy_us is not None else None
    idle = ev.ledger.gpu_idle
    return None if idle is None else 1.0 - idle


@rule(
    "cpu.python",
    "cpu",
    "gputui's step account: CPU time outside torch ops (numpy/PIL preprocessing, "
    "logging, Python loops) on the training thread; the Python sampler: whose code it is; "
    "bottleneck tables: low GPU utilization with the CPU busy",
    ("capture", "profile"),
    trigger=(
        "capture or trace: Python outside torch (less a trace's time in torch.compile's "
        "compiling ranges, and its model Python: the time inside the model's module calls "
        "of its Python stack, which launch.overhead counts) >= {cpu.python_share} of the "
        "step and the largest CPU-side "
        "share (ahead of launch + dispatch, sync, data, communication), "
        "with the GPU idle >= {cpu.gpu_idle_share} of the step (or no GPU); where the "
        "Python sampler saw the job, at most the time it found in code outside torch (torch's "
        "own autograd, optimizers and module calls are torch's); without a capture, the "
        "sampler alone (from {min.profile_samples} samples and {min.steps} ordinary steps): "
        "code outside torch in the loop and user phases >= {cpu.python_share} of the "
        "training thread's time and ahead of data and communication, with the GPU idle >= "
        "{cpu.gpu_idle_share} (or no GPU); cost: that share (with a GPU: at most its idle "
        "share)"
    ),
    minimum=Minimum(),
    bucket="python",
)
def python_outside_torch(ev: JobEvidence) -> Iterable[Finding]:
    acct = account_of(ev)
    host = host_code(ev.python_profile)
    if acct is not None:
        return _from_account(ev, acct, host)
    if host is not None and not ev.from_trace and ev.enough_steps:
        return _from_sampler(ev, host)
    return []


def _from_account(ev: JobEvidence, acct: StepAccount, host: HostCode | None) -> list[Finding]:
    """A capture's or a trace's account, bounded by the sampler where it saw
    the job: the account's host time outside torch ops that is in torch's own
    code is not Python outside torch."""
    # torch.compile's compiling (a trace that holds it) is Python no change to
    # the job's own code recovers; the model's own Python in its module calls (a
    # trace's Python stack) is the cost of issuing its ops (launch.overhead's)
    model = acct.model_python_share
    python = max(0.0, acct.share("python") - ev.compile_share - model)
    phase = 0.0
    if host is not None:
        python = min(python, host.loop + host.model)
        phase = min(acct.share("phase"), host.user_phases)
    share = python + phase
    groups = _groups(acct)
    groups["phase"] -= phase
    if share < PYTHON_SHARE or any(v > share for k, v in groups.items() if k != "python"):
        return []
    busy = _gpu_busy(ev, acct)
    if busy is not None and 1.0 - busy < GPU_IDLE_SHARE:
        return []  # the GPU is kept busy: the Python time is hidden behind it
    recoverable = share if busy is None else min(share, 1.0 - busy)
    step_s = acct.step_us / 1e6  # the account's and the ledger's mean step, as they print it
    outside_ops = acct.share("python")
    waiting = bool(_off_cpu_words(host))  # the sampler's CPU clock: mostly off the CPU
    evidence = (
        f"{outside_ops * 100:.0f}% of the step ({fmt.ms(outside_ops * step_s)} of "
        f"{fmt.ms(step_s)}) is {'host' if waiting else 'CPU'} time outside torch ops; "
        + shares_text(acct, "dispatch", "launch", "sync", "data", cuda=ev.cuda)
        + (f"; the GPU is busy {busy * 100:.0f}% of the step" if busy is not None else "")
        + f" ({acct.steps} profiled steps)"
        + (
            f"; of the CPU time outside torch ops, {model * 100:.0f}% of the step is the "
            "model's own Python in its module calls (the trace's Python stack): a cost of "
            "issuing its ops, not counted here"
            if model >= 0.01
            else ""
        )
    )
    if host is not None:
        evidence += (
            f"; the Python sampler finds {(host.loop + host.model + host.user_phases) * 100:.0f}% "
            f"of the training thread's time in code outside torch ({host.where_words(model=True)})"
        )
        if host.all_functions:
            evidence += ": " + host.named(model=True)
        evidence += _off_cpu_words(host)
    where = "the trace" if ev.from_trace else "the job"
    confirm = "a new capture shows the Python share of the step fall and " + (
        "the GPU busy share rise" if ev.cuda else "the step get shorter"
    )
    fix = _fix(host, True, where, ev.context.inference)
    if host is None and ev.python_frames:  # the trace's Python stack says whose it is
        evidence, fix = _from_stack(ev, share, step_s, evidence, fix)

    return _python(ev, evidence, fix, confirm, recoverable, phase > 0)


def _from_sampler(ev: JobEvidence, host: HostCode) -> list[Finding]:
    """No capture: the sampler's time in code outside torch, in the loop and
    the user phases (forward and backward wait for a capture)."""
    share = host.counted
    led = ev.ledger
    waits = max(led.shares.get("data", 0.0), led.shares.get("comm", 0.0))
    if share < PYTHON_SHARE or share < waits:
        return []
    busy = _gpu_busy(ev, None)
    if ev.cuda and (busy is None or 1.0 - busy < GPU_IDLE_SHARE):
        return []  # the GPU's idle time unknown, or too short to wait for the host
    evidence = (
        f"the Python sampler finds {share * 100:.0f}% of the training thread's time in "
        f"code outside torch ({host.where_words()})"
    )
    if host.functions:
        evidence += ": " + host.named()
    evidence += _off_cpu_words(host)
    evidence += (
        f" ({host.samples:,} samples over the last {host.window_s:.0f} s"
        + ("" if host.exact else "; estimated from the profile's functions")
        + ")"
        + (f"; the GPU idles {(1.0 - busy) * 100:.0f}% of the time" if busy is not None else "")
        + "; without a capture, forward and backward are left out: the sampler cannot tell "
        "the model's Python from the torch ops its lines run"
    )
    confirm = "the functions named fall in the Python view (y) and the steps get shorter"
    return _python(
        ev,
        evidence,
        _fix(host, False, "the job", ev.context.inference),
        confirm,
        share,
        host.user_phases > 0.005,
    )


def _python(
    ev: JobEvidence, evidence: str, fix: str, confirm: str, share: float, in_phases: bool
) -> list[Finding]:
    """The finding, from the account or the sampler: its cost is in the user
    phases' part of the step where ``in_phases``."""
    title = "Python outside torch holds the step"
    bucket = HOST_CODE if in_phases else None
    return [finding(ev, "cpu.python", title, evidence, fix, confirm, share=share, bucket=bucket)]


@rule(
    "cpu.logging",
    "cpu",
    "Lightning docs (logging, advanced): logging a metric on every batch can slow down "
    "training; the progress bar's refresh_rate; bottleneck tables: training slower after "
    "adding logging (.item() reads)",
    ("steps", "profile"),
    trigger=(
        "the Python sampler finds >= {cpu.logging_share} of the training thread's time in "
        "Lightning's logging (self.log's metric updates, the logger connector, the progress "
        "bar and the .item() that reads a logged tensor for it), with the GPU idle >= "
        "{cpu.gpu_idle_share} (known from NVML or a capture) or no GPU; cost: that share "
        "(with a GPU: at most its idle share)"
    ),
    bucket="python",
)
def framework_logging(ev: JobEvidence) -> Iterable[Finding]:
    if ev.from_trace:
        return []
    share, rows = lightning_logging(ev.python_profile)
    if share < LOGGING_SHARE:
        return []
    busy = _gpu_busy(ev, account_of(ev))
    if ev.cuda and (busy is None or 1.0 - busy < GPU_IDLE_SHARE):
        return []  # the GPU's idle time unknown, or too short for the host to hold it
    recoverable = share if busy is None else min(share, 1.0 - busy)
    profile = ev.python_profile
    assert profile is not None  # lightning_logging found time in it
    named = "; ".join(
        f"{fmt.clean(f.function, 80)} ({where(f)}) {f.self_s / profile.sampled_s * 100:.0f}%"
        for f in rows[:3]
    )
    evidence = (
        f"the Python sampler finds {share * 100:.0f}% of the training thread's time in "
        f"Lightning's logging: {named} ({profile.samples:,} samples over the last "
        f"{profile.window_s:.0f} s)"
    )
    fix = (
        "call self.log less often: every N steps (if self.global_step % N == 0: "
        "self.log(...)) rather than at every batch; each call updates Lightning's metric "
        "objects, and the progress bar reads every metric logged with prog_bar=True back "
        "from the GPU (.item()) at each refresh: raise its refresh_rate "
        "(TQDMProgressBar(refresh_rate=N) or RichProgressBar(refresh_rate=N) in "
        "Trainer(callbacks=...)), or Trainer(enable_progress_bar=False)"
    )
    confirm = "Lightning's functions fall in the Python view (y) and the steps get shorter"
    return [
        finding(
            ev, "cpu.logging", "logging holds the step", evidence, fix, confirm, share=recoverable
        )
    ]


#: the ops that fill a tensor with random numbers (randn, rand, randint, randperm,
#: dropout's bernoulli, the in-place samplers): on a GPU a launch of a few
#: microseconds, on the CPU the whole work
RANDOM_OPS = (
    "aten::normal_",
    "aten::uniform_",
    "aten::random_",
    "aten::randperm",
    "aten::bernoulli_",
    "aten::exponential_",
)


@rule(
    "cpu.tensor_creation",
    "cpu",
    "gputui: random tensors made on the CPU inside the step (torch.randn without a "
    "device) cost CPU time and a host-device copy every step; TorchTidy: CPU-initialised "
    "tensors copied to the GPU",
    ("capture",),
    trigger=(
        "capture or trace: random-number ops (aten::normal_, uniform_, random_, randperm, "
        "bernoulli_) averaging >= {cpu.creation_call_us} a call (on the CPU: a GPU launch "
        "takes microseconds) take >= {cpu.creation_share} of the step; cost: their time"
    ),
    bucket="dispatch",
)
def tensor_creation(ev: JobEvidence) -> Iterable[Finding]:
    cap = ev.capture
    if cap is None:
        return []
    rows = [o for o in cap.cpu_ops if o.name in RANDOM_OPS and o.calls]
    calls = sum(o.calls for o in rows)
    if not calls or sum(o.self_us for o in rows) / calls < CREATION_CALL_US:
        return []
    return _ops_finding(
        ev,
        "cpu.tensor_creation",
        rows,
        CREATION_SHARE,
        ("tensors are made on the CPU inside the step", "random-number ops"),
        "make them where they are used: torch.randn(..., device='cuda') (or "
        "torch.randn_like(x) of a GPU tensor), or once before the loop if they do not "
        "change; a tensor made on the CPU also costs a host-device copy every step",
        "a new capture shows the random ops as short launches (a few microseconds each)",
    )


def _ops_finding(
    ev: JobEvidence,
    rule_id: str,
    rows: list[CpuOpRow],
    least: float,
    words: tuple[str, str],
    fix: str,
    confirm: str,
) -> list[Finding]:
    """The finding of ops that compute on the CPU (``rows``) where their self time
    takes ``least`` of the step or more; ``words``: the title and what the ops
    are.  Their time is the cost.  Nothing without a step account."""
    acct = account_of(ev)
    if acct is None or not rows:
        return []
    # ops on several threads can add up past the wall time: at most the step
    share = min(1.0, sum(o.self_us for o in rows) / (acct.step_us * max(1, acct.steps)))
    if share < least:
        return []
    listed = ", ".join(
        f"{fmt.clean(o.name)} x{o.calls} ({fmt.us(o.self_us / o.calls)} each)"
        for o in sorted(rows, key=lambda o: -o.self_us)[:3]
    )
    title, what = words
    evidence = f"{what} take {share * 100:.0f}% of the step on the CPU: {listed}"
    return [finding(ev, rule_id, title, evidence, fix, confirm, share=share)]


@rule(
    "cpu.host_ops",
    "cpu",
    "gputui: a GPU job's torch ops on host tensors (a tensor left on the CPU, a "
    "preprocessing op in the loop) run on the training thread while the GPU waits",
    ("capture",),
    trigger=(
        "capture or trace of a job with a GPU: torch ops other than the random ones "
        "averaging >= {launch.cpu_op_us} a call (on the GPU, issuing an op takes "
        "microseconds) take >= {cpu.host_ops_share} of the step; cost: their time"
    ),
    bucket="dispatch",
)
def host_ops(ev: JobEvidence) -> Iterable[Finding]:
    cap = ev.capture
    if cap is None or not ev.cuda:
        return []
    rows = [
        o
        for o in cap.cpu_work(CPU_OP_US)
        if o.name not in RANDOM_OPS and o.name not in ev.launching_ops
    ]
    return _ops_finding(
        ev,
        "cpu.host_ops",
        rows,
        HOST_OPS_SHARE,
        ("torch ops compute on the CPU inside the step", "torch ops on host tensors"),
        "run them on the GPU: move their inputs there first (.to('cuda'), or make them "
        "with device='cuda'); work that belongs on the host (decoding, augmentation) goes "
        "into DataLoader workers (num_workers > 0), where it overlaps with the GPU's step; "
        "where the host's work is by design (an optimizer offloaded to the CPU), overlap "
        "it with the GPU's",
        "a new capture shows these ops as launches of microseconds and the GPU's busy share rises",
    )


NO_GPU_SHARE = thresholds.value("cpu.no_gpu_share")
#: ops only a GPU runs: in a trace without GPU work, they say the profiler left
#: CUDA out, not that the job ran on the CPU
_GPU_OP_WORDS = ("cudnn", "cuda", "flash_attention", "efficient_attention", "nccl")


@rule(
    "cpu.no_gpu",
    "cpu",
    "gputui: a trace that records no GPU work while torch's ops compute: the job ran on "
    "the CPU (the model or its batches never moved to a GPU), or its profiler left CUDA "
    "out of its activities",
    ("capture",),
    trigger=(
        "trace without GPU activity or kernel launches: torch's ops take >= "
        "{cpu.no_gpu_share} of the step (info: what ran, and the GPU its header lists)"
    ),
    bucket="dispatch",
)
def no_gpu(ev: JobEvidence) -> Iterable[Finding]:
    cap = ev.capture
    acct = account_of(ev)
    if cap is None or acct is None or ev.cuda or not ev.from_trace or acct.step_us <= 0:
        return []
    share = acct.share("dispatch")
    if share < NO_GPU_SHARE:
        return []
    ops = sorted((o for o in cap.cpu_ops if "::" in o.name and o.calls), key=lambda o: -o.self_us)
    total = sum(o.self_us for o in ops)
    named = ", ".join(
        f"{fmt.clean(o.name, 60)} {o.self_us / total * 100:.0f}%" for o in ops[:3] if total
    )
    gpu_ops = [o.name for o in ops if any(w in o.name.lower() for w in _GPU_OP_WORDS)]
    device = fmt.clean(ev.device_name, 60) if ev.device_name else None
    evidence = (
        "no kernel, copy or launch in the trace; torch's ops take "
        f"{share * 100:.0f}% of the step" + (f" (of their self time: {named})" if named else "")
    )
    if gpu_ops:
        evidence += (
            f"; {fmt.clean(gpu_ops[0], 60)} runs only on a GPU: the profiler recorded the "
            "host alone"
        )
        fix = (
            "profile with the GPU: torch.profiler.profile(activities=[ProfilerActivity.CPU, "
            "ProfilerActivity.CUDA], ...): without CUDA the kernels, copies and launches "
            "are not recorded, and the GPU's time is unknown"
        )
        confirm = "the next trace records kernels and their launches"
    elif ops and ops[0].self_us / ops[0].calls < CPU_OP_US:
        # a GPU job profiled without CUDA: its ops only launch, a few microseconds each
        top = ops[0]
        evidence += (
            f"; the largest, {fmt.clean(top.name, 60)}, takes {fmt.us(top.self_us / top.calls)} "
            "a call, as an op that launches GPU work does: the profiler may have recorded the "
            "host alone"
        )
        fix = (
            "if the job runs on a GPU, profile with it: torch.profiler.profile(activities="
            "[ProfilerActivity.CPU, ProfilerActivity.CUDA], ...), else the kernels, copies and "
            "launches are not recorded; if it runs on the CPU, its ops are small: more work "
            "per op (larger batches), and torch.compile to fuse them"
        )
        confirm = "the next trace records kernels and their launches, or the ops grow"
    else:
        evidence += ": the job ran on the CPU" + (
            f", though the trace's header lists the GPU {device}" if device else ""
        )
        fix = (
            "if it should run on the GPU: move the model and each batch there "
            "(model.to('cuda'); x = x.to('cuda', non_blocking=True)), after checking that "
            "torch.cuda.is_available() is True in the job (a CPU-only torch build, or "
            "CUDA_VISIBLE_DEVICES set empty, makes it False); if the CPU is its device by "
            "design, these ops are its time: check the threads they run on "
            "(torch.get_num_threads(), OMP_NUM_THREADS, against the cores the job may use); "
            "channels_last for convolutions and torch.compile can cut their time on a CPU too"
        )
        confirm = "the next trace records kernels on the GPU, or the CPU ops above take less"
    title = "the trace records no GPU work"
    return [finding(ev, "cpu.no_gpu", title, evidence, fix, confirm, severity=INFO)]
