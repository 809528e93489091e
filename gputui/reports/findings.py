"""Findings as Rich text: one look for the monitor, the attach screen, the
``--once`` reports and ``gputui analyze``.

Rich only (no Textual), so the printed reports use it too.  Every field of a
finding may quote a kernel or op name the job chose, so every one passes
:func:`gputui.fmt.clean` on its way to the screen.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from gputui import fmt
from gputui.analysis.finding import Finding

#: how a finding's or a throttle's severity is coloured, everywhere; explicit
#: colours, not "reverse", so a light theme reads them as well as a dark one
SEVERITY_STYLE = {
    "crit": "bold white on red",
    "warn": "bold black on yellow",
    "info": "bold black on cyan",
}


def impact_text(f: Finding) -> str:
    """'52%' of the step the fix could recover, or '' when the rule cannot say."""
    return "" if f.impact_pct is None else f"{f.impact_pct:.0f}%"


def cost_text(f: Finding) -> str:
    """'about 52% of the step time (3.10 ms per step)', or ''."""
    if f.impact_pct is None:
        return ""
    per_step = "" if f.impact_ms is None else f" ({f.impact_ms:.2f} ms per step)"
    return f"about {f.impact_pct:.0f}% of the step time{per_step}"


def headline(f: Finding, width: int) -> Text:
    """One finding on one line: severity, what it costs, title, evidence."""
    text = Text()
    text.append(f" {f.severity.upper():4} ", style=SEVERITY_STYLE[f.severity])
    cost = impact_text(f)
    text.append(f" {cost:>4} " if cost else "      ", style="bold")
    text.append(fmt.clean(f.title, 200), style="bold")
    text.append(f"  {fmt.clean(f.evidence)}", style="dim")
    text.truncate(max(1, width))
    return text


def block(f: Finding, spaced: bool = False, with_rule: bool = True) -> Text:
    """A finding in full: its title line, then one labelled line per field.

    ``spaced`` puts a blank line between fields (a detail pane); printed
    reports keep them together.
    """
    text = Text()
    text.append(f" {f.severity.upper()} ", style=SEVERITY_STYLE[f.severity])
    text.append(f" {fmt.clean(f.title, 200)}", style="bold")
    where = [fmt.clean(f.scope, 80)] + ([fmt.clean(f.rule, 80)] if with_rule else [])
    text.append(f"   {' · '.join(w for w in where if w)}", style="dim")
    gap = "\n\n" if spaced else "\n"
    for label, value in (
        ("seen", f.evidence),
        ("cost", cost_text(f)),
        ("fix", f.fix),
        ("then", f.confirm),
        ("from", f.source),
    ):
        if value:
            text.append(f"{gap}   {label:<5}", style="bold" if spaced else "dim")
            text.append(fmt.clean(value), style="dim" if label == "from" else "")
    return text


def blocks(findings: Sequence[Finding]) -> Text:
    """Several findings in full, a blank line between them."""
    return Text("\n\n").join(block(f) for f in findings)
