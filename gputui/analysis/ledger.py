"""The analyzer's ledger (DESIGN §12): one window, one time account, every cost.

The engine, not the rules, owns the arithmetic of what a finding costs.  A
:class:`Ledger` is made once per analysis from the evidence:

- **the window**: a live job's ordinary steps (warm-up, profiled and compiling
  steps left out), a trace's ``ProfilerStep`` spans, or, in a trace without
  steps, the span of its GPU activity (never the set-up before the first
  kernel);
- **one time account over it**: the mean step's wall time and its exclusive
  buckets (data wait, user phases, communication, host sync wait, kernel
  launch, torch dispatch, Python outside torch; a live job between captures has
  its unmeasured rest as one part, less the Python outside torch its sampler saw
  in the loop before any capture), the GPU's busy share, and the launch and
  sync calls per step;
- **every cost**: a rule says which part of the step it explains (a *claim*: a
  bucket, the GPU's idle time or its busy time) and how much of the step it
  thinks its fix recovers; :func:`gputui.analysis.settle.settle` caps that at
  what the ledger has in the claim's part (claims on one part never add up past
  it, and the CPU side's claims never past the GPU's idle time where the job has
  a GPU), and turns the share into milliseconds of the same mean step.

Pure: evidence in, values out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import field

from gputui.analysis import thresholds
from gputui.analysis.live_account import REST, live_account
from gputui.protocol.trace_metrics import ACCOUNT_BUCKETS, ACCOUNT_LABELS, StepAccount
from gputui.protocol.value import ValueBase, value_class

#: claims on the GPU's side of the step: its busy time (kernel efficiency,
#: precision, attention, copies on the GPU) and its idle time (what the CPU side
#: leaves it waiting for; a symptom until a CPU-side bucket names the cause)
GPU_BUSY = "gpu_busy"
GPU_IDLE = "gpu_idle"
#: claims on communication kernels and copies where no compute runs (exposed)
GPU_COMM = "gpu_comm"
GPU_COPY = "gpu_copy"
#: issuing work: kernel launch and torch dispatch together
ISSUE = "issue"
#: the model's own Python around the ops it issues (a trace recorded with Python
#: stacks: the time inside its module calls that no other bucket claims), carved
#: out of Python outside torch; issuing work together with launch and dispatch
MODEL_PYTHON = "model_python"
ISSUE_MODEL = "issue_model"
#: a cost outside the window's steps (compiling steps), on its own base
OUTSIDE = "outside"
#: the job's own code and its libraries on the host: Python outside torch, and
#: the user phases where the Python sampler found such code
HOST_CODE = "host_code"

#: each claim and the account buckets it draws on
CLAIM_BUCKETS: Mapping[str, tuple[str, ...]] = {
    **{b: (b,) for b in ACCOUNT_BUCKETS},
    ISSUE: ("launch", "dispatch"),
    MODEL_PYTHON: (MODEL_PYTHON,),
    ISSUE_MODEL: ("launch", "dispatch", MODEL_PYTHON),
    HOST_CODE: ("python", "phase"),
    REST: (REST,),
}
#: synchronizations per step from which the host cannot run ahead of the GPU
SERIALIZING_SYNCS = thresholds.value("sync.per_step")
#: what each claim is called where a cost is explained
CLAIM_LABELS: Mapping[str, str] = {
    **ACCOUNT_LABELS,
    ISSUE: "kernel launch + torch dispatch",
    MODEL_PYTHON: "the model's Python in its module calls",
    ISSUE_MODEL: "kernel launch, torch dispatch and the model's Python",
    HOST_CODE: "Python outside torch and user phases",
    REST: "the step outside data, phases and communication",
    GPU_BUSY: "the GPU's compute time",
    GPU_IDLE: "the GPU's idle time",
    GPU_COMM: "communication kernels with no compute beside them",
    GPU_COPY: "copies with no compute beside them",
    OUTSIDE: "time outside the window's steps",
}
#: the claims on the step's host side (they recover GPU idle time on a GPU job)
HOST_CLAIMS = frozenset(CLAIM_BUCKETS)


@value_class
class Window(ValueBase):
    """What the ledger's numbers are over, in words a report prints."""

    #: "ordinary steps", "profiled steps" or "GPU activity"
    kind: str
    steps: int
    #: how the window was chosen, for the reports ("warm-up, profiled and
    #: compiling steps left out")
    note: str = ""

    @property
    def words(self) -> str:
        """``20 ordinary steps``, ``3 profiled steps``, ``the GPU's activity``."""
        if self.kind == "GPU activity":
            return "the span of GPU activity (the trace has no steps)"
        unit = "step" if self.steps == 1 else "steps"
        kind = self.kind.removesuffix(" steps")
        return f"{self.steps:,} {kind} {unit}"


@value_class
class Ledger(ValueBase):
    """One window's time account: every share is of :attr:`step_s`."""

    window: Window
    #: the mean wall time of a step in the window (seconds); None without steps
    step_s: float | None
    #: bucket -> share of the step (0..1); they add up to the step where the
    #: window has an account (empty where it has none)
    shares: Mapping[str, float] = field(default_factory=dict)
    #: where the buckets that are not measured on every step come from
    #: ("capture at step 120", "the trace", "the Python sampler"), '' when all are
    source: str = ""
    #: the GPU's busy share of the step as measured (a trace's or a capture's
    #: account: profiled), None where unknown or no GPU
    gpu_busy: float | None = None
    #: the share of the step in which the GPU runs no compute kernel, at the job's
    #: own, unprofiled speed (NVML while attached, else the profiled account with
    #: the profiler's own CPU cost taken out): what host-side fixes can recover
    #: at most
    gpu_idle: float | None = None
    #: communication kernels and copies where no compute runs (exposed), shares
    #: of the step; None where unknown
    gpu_comm: float | None = None
    gpu_copy: float | None = None
    #: runtime calls per step that launch work, and that synchronize
    launches_per_step: float | None = None
    syncs_per_step: float | None = None
    #: the GPU's idle share of the step by what the host did meanwhile (host
    #: buckets; "sync" holds the gaps a synchronization left), at the job's own
    #: speed (adding up to :attr:`gpu_idle`); empty where the account did not split it
    idle_shares: Mapping[str, float] = field(default_factory=dict)
    #: how much slower kernel launch and torch dispatch ran in :attr:`shares`
    #: than in the job itself (a profiled account; 1 for a live job's)
    slowdown: float = 1.0

    @property
    def host_need(self) -> float | None:
        """The share of the step the host spends waiting for something other than
        the GPU, however fast the GPU: the data loader, user phases, its peers
        (communication).  A fix on the GPU's side shortens the step by at most
        the rest.  (Launch, dispatch and Python are the host's own work, which
        runs alongside the GPU's where the host can run ahead, and between its
        kernels where synchronizations stop it: how much of it the GPU hides
        is not known, so it does not count here.)  None without an account."""
        if not self.shares:
            return None
        return min(1.0, sum(self.shares.get(b, 0.0) for b in ("data", "phase", "comm")))

    @property
    def gpu_slack(self) -> float | None:
        """What fixes on the GPU's side can recover at most (None where the GPU's
        time is unknown).  Where synchronizations in every step keep the host
        from running ahead, the GPU's speed holds the step only while the host
        waits for it (host sync wait, the CPU ahead): that time.  Otherwise its
        compute time, less what the host waits for anyway (:attr:`host_need`).
        (In a profiled account, at least the GPU's busy time beyond the host's
        own work once the profiler's part of launch and dispatch,
        :attr:`slowdown`, is taken out.)"""
        if self.gpu_idle is None:
            return None
        busy = 1.0 - self.gpu_idle
        if (self.syncs_per_step or 0.0) >= SERIALIZING_SYNCS and self.shares:
            waits = self.shares.get("sync", 0.0) + self.shares.get("ahead", 0.0)
            if self.slowdown > 1.0 and self.gpu_busy is not None:
                # a profiled account: at the job's own speed the host issues its
                # ops that much sooner; where the GPU's compute (as measured,
                # a share of the same profiled step) then outlasts the host's
                # own work, the host waits at least for the rest
                issue = self.shares.get("launch", 0.0) + self.shares.get("dispatch", 0.0)
                own_work = 1.0 - waits - issue * (1.0 - 1.0 / self.slowdown)
                compute = self.gpu_busy - (self.gpu_comm or 0.0) - (self.gpu_copy or 0.0)
                waits = max(waits, compute - own_work)
            return min(busy, waits)
        need = self.host_need
        return busy if need is None else max(0.0, min(busy, 1.0 - need))

    @property
    def has_account(self) -> bool:
        return bool(self.shares)

    def share(self, claim: str) -> float | None:
        """The share of the step in a claim's part (None where the ledger cannot
        say: no account for a bucket, no GPU time for the GPU's side)."""
        if claim == GPU_IDLE:
            return self.gpu_idle
        if claim == GPU_BUSY:
            return None if self.gpu_idle is None else 1.0 - self.gpu_idle
        buckets = CLAIM_BUCKETS.get(claim)
        if buckets is None or not self.shares:
            return None
        return sum(self.shares.get(b, 0.0) for b in buckets)

    def idle_share(self, claim: str) -> float | None:
        """The GPU's idle share of the step while the host was in a claim's
        buckets (None where the account did not split the idle time)."""
        buckets = CLAIM_BUCKETS.get(claim)
        if buckets is None or not self.idle_shares:
            return None
        return sum(self.idle_shares.get(b, 0.0) for b in buckets)

    def ms(self, share: float | None) -> float | None:
        """``share`` of the mean step in milliseconds."""
        if share is None or not self.step_s:
            return None
        return round(share * self.step_s * 1000.0, 2)

    def largest_host_bucket(self) -> str | None:
        """The account bucket that holds most of the step (None without one)."""
        if not self.shares:
            return None
        return max(self.shares, key=lambda b: self.shares[b])

    def to_json(self) -> dict[str, object]:
        """``ledger`` in ``--json`` outputs (docs/json.md)."""
        return {
            "window": {"kind": self.window.kind, "steps": self.window.steps},
            "window_note": self.window.note,
            "step_s": self.step_s,
            "shares": dict(self.shares),
            "source": self.source,
            "gpu_busy_share": self.gpu_busy,
            "gpu_idle_share_unprofiled": self.gpu_idle,
            "launches_per_step": self.launches_per_step,
            "syncs_per_step": self.syncs_per_step,
            "gpu_idle_shares": dict(self.idle_shares),
        }


def unprofiled_split(
    measured: Mapping[str, float], idle: float | None, slowdown: float, cpu_work: float = 0.0
) -> dict[str, float]:
    """A profiled account's GPU idle split at the job's own speed: kernel launch
    and torch dispatch shrink by the profiler's ``slowdown`` first (less
    ``cpu_work``, the share of the step torch's ops computed on the CPU: the
    profiler does not slow that down), then every part in proportion, so that
    they add up to ``idle`` (never up)."""
    out = {b: v / slowdown if b in ("launch", "dispatch") else v for b, v in measured.items()}
    if "dispatch" in measured:
        work = min(cpu_work, measured["dispatch"])
        out["dispatch"] = (measured["dispatch"] - work) / slowdown + work
    total = sum(out.values())
    if idle is not None and total > idle and total > 0:
        out = {b: v * idle / total for b, v in out.items()}
    return {b: v for b, v in out.items() if v > 0}


def from_account(
    acct: StepAccount,
    window: Window,
    *,
    gpu_idle: float | None = None,
    source: str = "",
    slowdown: float = 1.0,
    cpu_work: float = 0.0,
) -> Ledger:
    """The ledger of a measured account (a trace's or a capture's steps);
    ``gpu_idle``: the GPU's idle share at the job's own speed where known, and
    ``slowdown`` the profiler's on launch and dispatch (its idle split is
    scaled down to that), less ``cpu_work`` (:func:`unprofiled_split`)."""
    step_s = acct.step_us / 1e6 if acct.step_us > 0 else None
    shares = {b: acct.share(b) for b in ACCOUNT_BUCKETS} if step_s else {}
    model = acct.model_python_share
    if model > 0 and shares:  # the model's Python, out of Python outside torch
        shares["python"] -= model
        shares[MODEL_PYTHON] = model
    busy = acct.gpu_busy_share
    compute = acct.gpu_part_share("compute")
    if compute is None:  # an older account: all GPU activity as compute
        compute = busy
    idle = gpu_idle if gpu_idle is not None else (None if compute is None else 1.0 - compute)
    measured = (
        {b: v / acct.step_us for b, v in acct.gpu_idle_us.items()}
        if acct.gpu_idle_us is not None and acct.step_us > 0
        else {}
    )
    python = acct.share("python")
    if model > 0 and measured.get("python", 0.0) > 0 and python > 0:
        # the GPU's idle time while the host ran Python, split as the Python is
        idle_python = measured["python"]
        measured["python"] = idle_python * (1.0 - model / python)
        measured[MODEL_PYTHON] = idle_python * model / python
    return Ledger(
        window=window,
        step_s=step_s,
        shares=shares,
        source=source,
        gpu_busy=busy,
        gpu_idle=idle,
        gpu_comm=acct.gpu_part_share("comm"),
        gpu_copy=acct.gpu_part_share("copy"),
        launches_per_step=acct.launch_calls_per_step,
        syncs_per_step=acct.sync_calls_per_step,
        idle_shares=unprofiled_split(measured, idle, slowdown, cpu_work) if measured else {},
        slowdown=slowdown,
    )


def from_steps(
    steps: Sequence[object],
    captured: StepAccount | None = None,
    capture_step: int | None = None,
    *,
    gpu_idle: float | None = None,
    note: str = "",
    slowdown: float = 1.0,
    python_share: float | None = None,
    cpu_work: float = 0.0,
) -> Ledger:
    """The ledger of a live job's ordinary ``steps`` (step records): the measured
    buckets from every step, the rest split as the capture's account says, or,
    without one, the Python sampler's ``python_share`` of the step told apart."""
    acct = live_account(steps, captured, capture_step, python_share)  # type: ignore[arg-type]
    window = Window("ordinary steps", 0 if acct is None else acct.steps, note)
    if acct is None:
        return Ledger(window, None)
    shares = {b: acct.share(b) for b in acct.seconds}
    busy = None if captured is None else captured.gpu_busy_share
    split: dict[str, float] = {}
    if captured is not None and captured.gpu_idle_us is not None and captured.step_us > 0:
        # the data wait is measured on every step; the capture splits the rest
        data = min(shares.get("data", 0.0), 1.0 if gpu_idle is None else gpu_idle)
        others = {b: v / captured.step_us for b, v in captured.gpu_idle_us.items() if b != "data"}
        left = None if gpu_idle is None else max(0.0, gpu_idle - data)
        split = unprofiled_split(others, left, slowdown, cpu_work)
        if data > 0:
            split["data"] = data
    return Ledger(
        window=window,
        step_s=acct.step_s,
        shares=shares,
        source=(
            f"capture at step {capture_step}"
            if capture_step is not None
            else ("the Python sampler" if acct.sampled else "")
        ),
        gpu_busy=busy,
        gpu_idle=gpu_idle,
        launches_per_step=None if captured is None else captured.launch_calls_per_step,
        syncs_per_step=None if captured is None else captured.sync_calls_per_step,
        idle_shares=split,
        gpu_comm=None if captured is None else captured.gpu_part_share("comm"),
        gpu_copy=None if captured is None else captured.gpu_part_share("copy"),
    )
