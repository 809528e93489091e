"""Findings as text: one look for the monitor, the attach screen, the
``--once`` reports and ``gputui analyze``.

:func:`headline` and :func:`block` are Rich text for the screens;
:func:`text_block` and :func:`text_blocks` the same fields as plain lines for the
printed reports, wrapped whole to the report's width, with the advice a screen
gives by a key said the command-line way (:func:`printed`).  Every field of a
finding may quote a kernel or op name the job chose, so every one passes
:func:`gputui.fmt.clean` on its way out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from gputui import fmt
from gputui.analysis.finding import Finding
from gputui.reports import text as layout

if TYPE_CHECKING:  # Rich loads only for the screens: printed reports are plain text
    from rich.text import Text

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
    """'about 52% of the step time (3.10 ms per step), in host sync wait', or ''."""
    if f.impact_pct is None:
        return ""
    per_step = "" if f.impact_ms is None else f" ({f.impact_ms:.2f} ms per step)"
    where = ""
    if f.bucket:  # a job's finding (the monitor's device findings have none)
        from gputui.analysis.ledger import CLAIM_LABELS, OUTSIDE

        part = CLAIM_LABELS.get(f.bucket)
        where = f", in {part}" if part and f.bucket != OUTSIDE else ""
    overlap = ""
    if f.overlap_pct is not None:
        # an honest zero beside evidence of real time: the larger fixes recover it
        own = f.impact_pct + f.overlap_pct
        overlap = (
            f"; the rest of its {own:.0f}% is time the other findings' fixes already recover"
            if f.impact_pct >= 0.5
            else f"; its own {own:.0f}% is time the other findings' fixes already recover"
        )
    return f"about {f.impact_pct:.0f}% of the step time{per_step}{where}{overlap}"


def related_text(f: Finding) -> str:
    """The symptoms a cause explains, as one line of evidence ('' without)."""
    return "; ".join(f"{r.title} ({r.evidence})" for r in f.related)


def fields(f: Finding) -> tuple[tuple[str, str], ...]:
    """A finding's labelled fields, in the order every view shows them."""
    return (
        ("seen", f.evidence),
        ("also", related_text(f)),
        ("cost", cost_text(f)),
        ("fix", f.fix),
        ("then", f.confirm),
        ("from", f.source),
    )


def headline(f: Finding, width: int) -> Text:
    """One finding on one line: severity, what it costs, title, evidence."""
    from rich.text import Text

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
    from rich.text import Text

    text = Text()
    text.append(f" {f.severity.upper()} ", style=SEVERITY_STYLE[f.severity])
    text.append(f" {fmt.clean(f.title, 200)}", style="bold")
    where = [fmt.clean(f.scope, 80)] + ([fmt.clean(f.rule, 80)] if with_rule else [])
    text.append(f"   {' · '.join(w for w in where if w)}", style="dim")
    gap = "\n\n" if spaced else "\n"
    for label, value in fields(f):
        if value:
            text.append(f"{gap}   {label:<5}", style="bold" if spaced else "dim")
            text.append(fmt.clean(value), style="dim" if label == "from" else "")
    return text


def blocks(findings: Sequence[Finding]) -> Text:
    """Several findings in full, a blank line between them."""
    from rich.text import Text

    return Text("\n\n").join(block(f) for f in findings)


#: advice that names a key of a screen, and how a printed report says it
PRINTED_WORDS = (
    ("press p (or attach --capture 5)", "capture 5 steps (gputui attach PID --once --capture 5)"),
    (
        "(m on the attach screen, or gputui attach PID --memory-snapshot N)",
        "(gputui attach PID --memory-snapshot N)",
    ),
    ("(p on the rank view)", "(gputui attach PID --once --capture N)"),
    (
        "(attach screen: l, then p; or attach --capture N --flops)",
        "(gputui attach PID --once --capture N --flops)",
    ),
    ("capture (p)", "capture (gputui attach PID --once --capture N)"),
)

#: the label column of a printed finding's fields
_INDENT = "   "
_LABEL = 6


def printed(value: str) -> str:
    """``value`` with a screen's keys replaced by the command line that does the same."""
    for screen, command in PRINTED_WORDS:
        value = value.replace(screen, command)
    return value


def text_block(f: Finding, width: int, with_rule: bool = True) -> list[str]:
    """A finding in full as plain lines of at most ``width`` characters: its
    severity and title (then where it applies), and one labelled field per line,
    each wrapped whole under itself."""
    lines = layout.wrap(fmt.clean(f.title, 200), width, f"{f.severity.upper():<5} ", " " * 6)
    where = [fmt.clean(f.scope, 80)] + ([fmt.clean(f.rule, 80)] if with_rule else [])
    said = " · ".join(w for w in where if w)
    if said and len(lines[-1]) + 3 + len(said) <= width:
        lines[-1] += "   " + said
    elif said:
        lines.extend(layout.wrap(said, width, " " * 6))
    for label, value in fields(f):
        if value:
            lines.extend(layout.labelled(label, printed(fmt.clean(value)), width, _INDENT, _LABEL))
    return lines


def text_blocks(findings: Sequence[Finding], width: int, with_rule: bool = True) -> list[str]:
    """Several findings in full, a blank line between them."""
    out: list[str] = []
    for f in findings:
        if out:
            out.append("")
        out.extend(text_block(f, width, with_rule))
    return out
