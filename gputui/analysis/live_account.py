"""The step's time account between captures (DESIGN §10).

A capture measures every bucket of the account; between captures the hook
still times three of them on every step -- data wait (the loader's
``__next__``), user phases (``hook.phase(...)``) and communication (the
collectives) -- and the rest of each step (forward, backward, optimizer and the
time outside every phase) is split among host sync wait, kernel launch, torch
dispatch and Python outside torch in the proportions the last capture measured,
labelled as coming from that capture.  Without a capture the Python sampler
names one part of the rest: the training thread's time in code outside torch in
the loop (the optimizer phase and the time outside every phase; not forward and
backward, where the sampler cannot tell the model's Python from the torch ops it
runs: gputui.analysis.host_code), labelled as the sampler's; the remainder stays
one part, "not split yet".  Pure: steps, the capture's account and the
sampler's share in, a value out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import TYPE_CHECKING, Any

from gputui.analysis.host_code import host_code
from gputui.protocol.messages import BUILTIN_PHASES, COMM, DATA, OTHER
from gputui.protocol.steps import StepRecord
from gputui.protocol.trace_metrics import ACCOUNT_BUCKETS, ACCOUNT_LABELS, StepAccount
from gputui.protocol.value import ValueBase, value_class

if TYPE_CHECKING:
    from gputui.protocol.capture import CaptureResult
    from gputui.protocol.profile import PythonProfile

#: the buckets the hook times on every step, in their order of precedence
MEASURED = ("data", "phase", "comm")
#: the buckets only a capture measures
CARRIED = tuple(b for b in ACCOUNT_BUCKETS if b not in MEASURED)
#: the rest of the step before any capture split it
REST = "rest"
LABELS = {**ACCOUNT_LABELS, REST: "not split yet"}
#: the phases that are none of the measured buckets: their time is the rest
_REST_PHASES = frozenset(BUILTIN_PHASES) - {DATA, COMM} | {OTHER}


def measured_seconds(phases: Mapping[str, float]) -> dict[str, float]:
    """One step's (or a total's) seconds per measured bucket from its phase
    times: data, the user phases together, communication."""
    user = sum(
        s for name, s in phases.items() if name not in _REST_PHASES and name not in (DATA, COMM)
    )
    return {"data": phases.get(DATA, 0.0), "phase": user, "comm": phases.get(COMM, 0.0)}


@value_class
class LiveAccount(ValueBase):
    """Mean seconds per step of each bucket over ``steps`` ordinary steps: the
    measured ones from every step, the others from the capture at
    ``capture_step`` (None: no capture yet, and the rest is one part, less the
    Python outside torch the sampler saw in the loop where ``sampled``)."""

    steps: int
    step_s: float
    seconds: Mapping[str, float] = field(default_factory=dict)
    capture_step: int | None = None
    #: the GPU's busy share of the captured steps
    gpu_busy_share: float | None = None
    #: "python" is the Python sampler's share, not a capture's
    sampled: bool = False

    def share(self, bucket: str) -> float:
        return self.seconds.get(bucket, 0.0) / self.step_s if self.step_s > 0 else 0.0

    def source(self, bucket: str) -> str:
        """Where a bucket's time comes from, in words."""
        if bucket in MEASURED:
            return "every step"
        if bucket == REST:
            return "no capture yet"
        if self.sampled and bucket == "python":
            return "the Python sampler"
        return f"from capture at step {self.capture_step}"

    @property
    def ordered(self) -> list[str]:
        """The buckets with time, largest first."""
        return sorted((b for b, s in self.seconds.items() if s > 0), key=lambda b: -self.seconds[b])

    def to_json(self) -> dict[str, Any]:
        """``live_account`` in ``attach --once --json`` (docs/json.md)."""
        return {
            "steps": self.steps,
            "step_s": self.step_s,
            "capture_step": self.capture_step,
            "gpu_busy_share": self.gpu_busy_share,
            "buckets": [
                {
                    "bucket": b,
                    "seconds": self.seconds[b],
                    "share": self.share(b),
                    "measured": b in MEASURED,
                    "source": self.source(b),
                }
                for b in self.ordered
            ],
        }


def live_account(
    steps: Sequence[StepRecord],
    captured: StepAccount | None = None,
    capture_step: int | None = None,
    python_share: float | None = None,
) -> LiveAccount | None:
    """The account over ``steps`` (ordinary ones: the caller leaves out warm-up
    and profiled steps), the rest split as the capture's ``captured`` account
    says; without one, ``python_share`` of the step (the sampler's Python
    outside torch in the loop), at most the rest, is told apart from the rest.
    None without steps."""
    # Phase totals first, then the buckets once: this runs over a thousand steps
    # once a second on the attach screen.
    n = 0
    wall = 0.0
    by_phase: dict[str, float] = {}
    get = by_phase.get
    for s in steps:
        if s.wall > 0:
            n += 1
            wall += s.wall
            for name, sec in s.phases.items():
                by_phase[name] = get(name, 0.0) + sec
    if not n:
        return None
    step_s = wall / n
    seconds = {b: v / n for b, v in measured_seconds(by_phase).items()}
    rest = max(0.0, step_s - sum(seconds.values()))
    parts = {b: captured.bucket_us(b) for b in CARRIED} if captured is not None else {}
    whole = sum(parts.values())
    if captured is None or whole <= 0:
        python = 0.0 if python_share is None else min(rest, max(0.0, python_share) * step_s)
        if python > 0:
            seconds["python"] = python
        seconds[REST] = rest - python
        return LiveAccount(n, step_s, seconds, sampled=python > 0)
    for b, us in parts.items():
        seconds[b] = rest * us / whole
    return LiveAccount(n, step_s, seconds, capture_step, captured.gpu_busy_share)


def sampled_python(profile: PythonProfile | None) -> float | None:
    """The sampler's share of the training thread's time in code outside torch
    in the loop (None without a profile of enough samples)."""
    host = host_code(profile)
    return None if host is None else host.loop


def since_capture(
    steps: Sequence[StepRecord],
    capture: CaptureResult | None,
    profile: PythonProfile | None = None,
) -> LiveAccount | None:
    """The account over ``steps`` (ordinary ones), the rest split by ``capture``'s
    step account where it has one (an older hook's capture has none), else the
    sampler's ``profile`` tells Python outside torch apart from the rest."""
    metrics = None if capture is None else capture.trace_metrics
    captured = None if metrics is None else metrics.account
    return live_account(
        steps, captured, None if capture is None else capture.last_step, sampled_python(profile)
    )
