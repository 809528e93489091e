"""The step's time account as text: one line per bucket with its share of the
step, time per step and a bar, and the GPU's busy share beside it."""

from __future__ import annotations

from gputui import fmt
from gputui.protocol.trace_metrics import ACCOUNT_BUCKETS, ACCOUNT_LABELS, StepAccount
from gputui.reports.text import plural, wrap

#: columns of the bar
BAR = 30


def lines(
    acct: StepAccount, where: str = "profiled", ascii_only: bool = False, width: int = 80
) -> list[str]:
    """The account's block: a heading, then the buckets, largest first (empty
    buckets left out); ``where`` says what the steps were (``profiled``,
    ``captured at step 120``)."""
    step_s = acct.step_us / 1e6
    head = f"Step time account ({plural(acct.steps, f'{where} step')}, {fmt.ms(step_s)} each)"
    out = wrap(head, width, "", "  ")
    bar = max(0, min(BAR, width - 44))
    ordered = sorted(ACCOUNT_BUCKETS, key=lambda b: -acct.bucket_us(b))
    for b in ordered:
        us = acct.bucket_us(b)
        if us <= 0:
            continue
        share = acct.share(b)
        out.append(
            (
                f"  {ACCOUNT_LABELS[b]:<21}{share * 100:6.1f}%  {fmt.ms(us / 1e6):>8}  "
                + fmt.bar(share, bar, ascii_only)
            ).rstrip()
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
        out.extend(
            wrap(f"GPU busy {busy * 100:.0f}% of the step (kernels, copies and sets)", width, "  ")
        )
    return out
