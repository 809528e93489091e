"""The step's time account as text: one line per bucket with its share of the
step, time per step and a bar, and the GPU's busy share beside it."""

from __future__ import annotations

from gputui import fmt
from gputui.analysis.live_account import LABELS, MEASURED, LiveAccount
from gputui.protocol.trace_metrics import ACCOUNT_BUCKETS, StepAccount, account_label
from gputui.reports.text import plural, wrap

#: columns of the bar
BAR = 30


def label(bucket: str, cuda: bool = True) -> str:
    """A bucket's name in the account (``cuda``: the job runs on a GPU; without
    one, torch's ops are the step's compute)."""
    return LABELS[bucket] if bucket not in ACCOUNT_BUCKETS else account_label(bucket, cuda)


#: the GPU's busy share of the step from which it, not the host, sets the pace
GPU_PACE = 0.95


def lines(
    acct: StepAccount,
    where: str = "profiled",
    ascii_only: bool = False,
    width: int = 80,
    cuda: bool = True,
) -> list[str]:
    """The account's block: a heading, then the buckets, largest first (empty
    buckets left out); ``where`` says what the steps were (``profiled``,
    ``captured at step 120``); ``cuda``: the job runs on a GPU (without one,
    torch's ops are its compute)."""
    step_s = acct.step_us / 1e6
    head = f"Step time account ({plural(acct.steps, f'{where} step')}, {fmt.ms(step_s)} each)"
    out = wrap(head, width, "", "  ")
    bar = max(0, min(BAR, width - 44))
    ordered = sorted(ACCOUNT_BUCKETS, key=lambda b: -acct.bucket_us(b))
    for b in ordered:
        us = acct.bucket_us(b)
        if us > 0:
            out.append(_row(label(b, cuda), acct.share(b), us / 1e6, bar, ascii_only))
        model = acct.model_python_share
        if b == "python" and model > 0:
            out.extend(
                wrap(
                    f"of it, {model * 100:.1f}% of the step ({fmt.ms(model * step_s)}) is "
                    "the model's own Python in its module calls (the trace's Python stack)",
                    width,
                    "    ",
                    "      ",
                )
            )
    busy = acct.gpu_busy_share
    gpu_us = acct.gpu_busy_us
    if busy is not None and gpu_us is not None and gpu_us > acct.step_us * 1.05:
        out.extend(
            wrap(
                f"the GPU works {fmt.ms(gpu_us / 1e6)} per step, {gpu_us / acct.step_us:.1f}x "
                "the CPU's: the GPU sets the pace",
                width,
                "  ",
                "    ",
            )
        )
    elif busy is not None:
        said = f"GPU busy {busy * 100:.0f}% of the step (kernels, copies and sets)"
        if busy >= GPU_PACE:
            # the buckets above are the host's: beside a GPU this busy they cost nothing
            said += ": the GPU sets the pace, the host's time above runs beside it"
        out.extend(wrap(said, width, "  ", "    "))
    return out


def _row(label: str, share: float, seconds: float, bar: int, ascii_only: bool) -> str:
    """One bucket: its name, share of the step, seconds per step and a bar."""
    return (
        f"  {label:<21}{share * 100:6.1f}%  {fmt.ms(seconds):>8}  "
        + fmt.bar(share, bar, ascii_only)
    ).rstrip()


def live_lines(
    live: LiveAccount,
    ascii_only: bool = False,
    width: int = 80,
    cuda: bool = True,
    recorded: bool = False,
) -> list[str]:
    """The account between captures: the buckets the hook times on every step
    marked ``*``, the Python sampler's ``+``, the others labelled with the
    capture they come from (``recorded``: a recording's, which no capture can
    be asked of)."""
    head = f"Step time account (last {plural(live.steps, 'step')}, {fmt.ms(live.step_s)} each)"
    out = wrap(head, width, "", "  ")
    bar = max(0, min(BAR, width - 46))
    for b in live.ordered:
        mark = "*" if b in MEASURED else ("+" if live.sampled and b == "python" else " ")
        out.append(_row(f"{label(b, cuda)}{mark}", live.share(b), live.seconds[b], bar, ascii_only))
    split = [b for b in live.ordered if b not in MEASURED]
    starred = len(split) < len(live.ordered)  # a row marked * above
    if live.capture_step is not None:
        note = (
            "* measured on every step; the others are the split the capture at step "
            f"{live.capture_step} measured, of the rest of the step"
            if starred
            else f"the split the capture at step {live.capture_step} measured"
        )
        if live.gpu_busy_share is not None:
            note += f" (GPU busy {live.gpu_busy_share * 100:.0f}% of the captured steps)"
    else:
        note = (
            "* measured on every step"
            if starred
            else ("no data wait, user phase or communication (* measured on every step)")
        )
        if live.sampled:
            note += (
                "; + the Python sampler's time in code outside torch in the loop (forward "
                "and backward are in the rest)"
            )
        if split and not recorded:
            note += "; a capture with the step account (--capture N) splits the rest"
    out.extend(wrap(note, width, "  ", "    "))
    return out
