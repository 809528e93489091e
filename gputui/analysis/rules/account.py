"""Rules that follow the step's time account (DESIGN §10): the diagnosis goes to
the bucket that holds most of the step, and each rule claims only time from its
own bucket.

- ``cpu.python``: the step's largest share is CPU time outside torch ops (Python
  on the training thread: preprocessing, augmentation, logging, a Python loop
  over tensors), and the GPU -- when there is one -- waits for it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from gputui import fmt
from gputui.analysis import thresholds
from gputui.analysis.evidence import JobEvidence
from gputui.analysis.finding import Finding
from gputui.analysis.registry import finding, rule
from gputui.protocol.trace_metrics import StepAccount, account_label

if TYPE_CHECKING:
    from gputui.protocol.profile import ProfileFunction

#: Python outside torch from this share of the step is worth a finding ...
PYTHON_SHARE = thresholds.value("cpu.python_share")
#: ... when the GPU (if any) idles at least this share of the step meanwhile
GPU_IDLE_SHARE = thresholds.value("cpu.gpu_idle_share")
#: launch + dispatch from this share of the step make a step launch-bound
LAUNCH_SHARE = thresholds.value("launch.issue_share")


def _where(f: ProfileFunction) -> str:
    """``data.py:12``: the file's name and the function's hottest line."""
    name = f.file.replace("\\", "/").rsplit("/", 1)[-1]
    return f"{fmt.clean(name, 120)}:{f.line}"


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


def cpu_side_largest(acct: StepAccount) -> str:
    """Which CPU-side cause holds most of the step: "python", "launch" (launch
    and dispatch together: the cost of issuing ops), "sync", "data" or "comm"."""
    groups = {
        "python": acct.share("python"),
        "launch": acct.share("launch") + acct.share("dispatch"),
        "sync": acct.share("sync"),
        "data": acct.share("data"),
        "comm": acct.share("comm"),
        "phase": acct.share("phase"),
    }
    return max(groups, key=lambda k: groups[k])


@rule(
    "cpu.python",
    "cpu",
    "gputui's step account: CPU time outside torch ops (numpy/PIL preprocessing, "
    "logging, Python loops) on the training thread; bottleneck tables: low GPU "
    "utilization with the CPU busy",
    ("capture",),
    trigger=(
        "capture or trace: Python outside torch >= {cpu.python_share} of the step and the "
        "largest CPU-side share (ahead of launch + dispatch, sync, data, communication), "
        "with the GPU idle >= {cpu.gpu_idle_share} of the step (or no GPU); cost: that "
        "share (with a GPU: at most its idle share)"
    ),
    bucket="python",
)
def python_outside_torch(ev: JobEvidence) -> Iterable[Finding]:
    acct = account_of(ev)
    if acct is None:
        return []
    share = acct.share("python")
    if share < PYTHON_SHARE or cpu_side_largest(acct) != "python":
        return []
    busy = acct.gpu_busy_share if ev.cuda or acct.gpu_busy_us is not None else None
    if busy is not None and 1.0 - busy < GPU_IDLE_SHARE:
        return []  # the GPU is kept busy: the Python time is hidden behind it
    recoverable = share if busy is None else min(share, 1.0 - busy)
    step_ms = acct.step_us / 1000.0
    evidence = (
        f"{share * 100:.0f}% of the step ({fmt.ms(share * step_ms / 1000.0)} of "
        f"{fmt.ms(step_ms / 1000.0)}) is CPU time outside torch ops; "
        + shares_text(acct, "dispatch", "launch", "sync", "data", cuda=ev.cuda)
        + (f"; the GPU is busy {busy * 100:.0f}% of the step" if busy is not None else "")
        + f" ({acct.steps} profiled steps)"
    )
    profile = ev.python_profile
    named = [f for f in profile.top_site(3) if profile.share(f.site_s) >= 0.05] if profile else []
    if profile is not None and named:
        evidence += "; the Python sampler names " + ", ".join(
            f"{fmt.clean(f.function, 80)} ({_where(f)}) {profile.share(f.site_s) * 100:.0f}%"
            for f in named
        )
    where = "the trace" if ev.from_trace else "the job"
    return [
        finding(
            ev,
            "cpu.python",
            "Python outside torch holds the step",
            evidence,
            "move the host-side work out of the training loop: data preprocessing and "
            "augmentation into DataLoader workers (num_workers > 0) or onto the GPU as torch "
            "ops; vectorise Python loops over tensors; log and checkpoint every N steps"
            + (
                ""
                if named
                else f". A Python profiler names the function ({where}'s stack: gputui's "
                "sampler in a hooked job, py-spy dump, or torch.profiler with with_stack=True)"
            ),
            "a new capture shows the Python share of the step fall and the GPU busy share rise",
            share=recoverable,
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
#: their share of the step, and their time per call, from which they are a finding
CREATION_SHARE = thresholds.value("cpu.creation_share")
CREATION_CALL_US = thresholds.value("cpu.creation_call_us")


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
    acct = account_of(ev)
    if cap is None or acct is None:
        return []
    rows = [o for o in cap.cpu_ops if o.name in RANDOM_OPS and o.calls]
    us = sum(o.self_us for o in rows)
    calls = sum(o.calls for o in rows)
    if not calls or us / calls < CREATION_CALL_US:
        return []
    share = us / (acct.step_us * max(1, acct.steps))
    if share < CREATION_SHARE:
        return []
    listed = ", ".join(
        f"{o.name} x{o.calls} ({fmt.us(o.self_us / o.calls)} each)"
        for o in sorted(rows, key=lambda o: -o.self_us)[:3]
    )
    return [
        finding(
            ev,
            "cpu.tensor_creation",
            "tensors are made on the CPU inside the step",
            f"random-number ops take {share * 100:.0f}% of the step on the CPU: {listed}",
            "make them where they are used: torch.randn(..., device='cuda') (or "
            "torch.randn_like(x) of a GPU tensor), or once before the loop if they do not "
            "change; a tensor made on the CPU also costs a host-device copy every step",
            "a new capture shows the random ops as short launches (a few microseconds each)",
            share=share,
        )
    ]
