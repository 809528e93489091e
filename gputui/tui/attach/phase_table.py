"""The attach screen's phase table: each phase's percentiles and share of the
step, and the step's time account as one stacked bar with its legend."""

from __future__ import annotations

import textwrap

from rich.text import Text

from gputui import fmt
from gputui.analysis.live_account import MEASURED, REST, LiveAccount
from gputui.analysis.steps import Dist
from gputui.protocol.trace_metrics import ACCOUNT_BUCKETS
from gputui.reports.attach import STEP_HINT
from gputui.tui import render
from gputui.tui.attach.phases import phase_letter, phase_style
from gputui.tui.attach.view_panel import ViewPanel


class PhaseTable(ViewPanel):
    """p50 / p90 / p99 and the share of each phase, plus the whole step, and the
    step's time account as a stacked bar (its legend too, unless ``compact``)."""

    def build(self, width: int) -> Text:
        v = self.view
        head = Text()
        mode = "GPU" if v is not None and v.gpu_mode else "wall"
        count = v.stats.count if v else 0
        head.append(f"{mode + ' (ms)':<12}", style="bold")
        head.append(f"{'p50':>7}{'p90':>7}{'p99':>7}  share", style="bold")
        if v is None or not count:
            hint = textwrap.wrap(f"no steps yet: {STEP_HINT}", max(20, width))
            return Text("\n").join([head, *(Text(line, style="dim") for line in hint)])
        stats = v.stats
        phases = stats.gpu_phases if v.gpu_mode else stats.phases
        total = stats.gpu if v.gpu_mode else stats.wall
        lines = [head]
        bar_w = max(4, width - 41)
        for d in phases:
            style = phase_style(d.name, v.phases)
            line = Text()
            # the legend shows each phase as the chart draws it
            swatch = phase_letter(d.name) if self.ascii_only else "█"
            line.append(swatch + " ", style=style)
            line.append(f"{fmt.truncate(fmt.clean(d.name, 64), 10):<10}")
            line.append(_percentiles(d) + "  ")
            line.append_text(render.bar(d.share, bar_w, self.ascii_only, style=style))
            line.append(f"{d.share * 100:5.1f}%")
            lines.append(line)
        if total is not None:
            line = Text()
            line.append(f"  {'step':<10}", style="bold")
            line.append(_percentiles(total), style="bold")
            line.append(f"  {count} steps", style="dim")
            lines.append(line)
        if v.account is not None and not v.gpu_mode:
            hello = v.snap.hello
            cuda = hello is None or hello.cuda_in_use
            lines.extend(account_lines(v.account, width, self.ascii_only, self.compact, cuda))
        return Text("\n").join(lines)


def _percentiles(d: Dist) -> str:
    """p50, p90 and p99 in milliseconds, seven cells each."""
    return "".join(f"{fmt.ms(x, unit=False):>7}" for x in (d.p50, d.p90, d.p99))


#: how the step account's buckets are drawn: colour, letter in ASCII mode, and
#: name in the legend (in the order of ACCOUNT_BUCKETS, then the unsplit rest)
_BUCKETS = (*ACCOUNT_BUCKETS, REST)
_COLOURS = (
    "yellow",
    "magenta",
    "cyan",
    "red",
    "blue",
    "green",
    "bright_red",
    "bright_black",
    "grey50",
)
_LETTERS = ("d", "u", "c", "s", "l", "t", "p", "a", ".")
_NAMES = ("data", "user", "comm", "sync", "launch", "dispatch", "python", "ahead", "unsplit")
ACCOUNT_STYLE = {
    b: (c, x, n) for b, c, x, n in zip(_BUCKETS, _COLOURS, _LETTERS, _NAMES, strict=True)
}
#: a job without a GPU: torch's ops are its compute (the printed account's
#: "torch ops (compute)")
CPU_JOB_NAMES = {"dispatch": "compute"}


def account_lines(
    acct: LiveAccount,
    width: int,
    ascii_only: bool = False,
    compact: bool = False,
    cuda: bool = True,
) -> list[Text]:
    """The step's account as one stacked bar and (unless ``compact``) its legend:
    each bucket's share, the ones the hook measures on every step marked ``*``,
    the others said to come from the capture they were measured in; ``cuda``:
    the job runs on a GPU (without one, torch's ops are its compute)."""
    bar = Text("acct ", style="bold")
    bar_w = max(8, width - len(bar))
    used = 0
    order = acct.ordered
    for i, b in enumerate(order):
        style, letter, _name = ACCOUNT_STYLE[b]
        cells = bar_w - used if i == len(order) - 1 else round(acct.share(b) * bar_w)
        cells = max(0, min(cells, bar_w - used))
        used += cells
        bar.append((letter if ascii_only else "█") * cells, style=style)
    legend = Text("  ")
    for b in order:
        style, letter, name = ACCOUNT_STYLE[b]
        if not cuda:
            name = CPU_JOB_NAMES.get(b, name)
        mark = "*" if b in MEASURED else ""
        legend.append((letter if ascii_only else "█") + " ", style=style)
        pct = acct.share(b) * 100
        legend.append(f"{name}{mark} " + (f"{pct:.0f}%  " if pct >= 1 else "<1%  "))
    where = (
        f"*every step; others from capture at step {acct.capture_step}"
        if acct.capture_step is not None
        else "*every step" + ("; python from the Python sampler" if acct.sampled else "")
    )
    legend.append(where, style="dim")
    return [bar] if compact else [bar, render.hanging(legend, width, 2)]
