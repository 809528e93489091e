"""The attach screen's findings: the ranked list at the bottom of the screen, and
the screen that opens a finding's evidence, cost, fix, how to confirm it and
where the rule comes from (key f)."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, OptionList
from textual.widgets.option_list import Option

from gputui import fmt
from gputui.analysis.evidence import MIN_STEPS
from gputui.analysis.finding import Finding
from gputui.tui.attach.model import AttachView
from gputui.tui.render import SEVERITY_STYLE
from gputui.tui.widgets.text_panel import TextPanel


def impact_text(f: Finding) -> str:
    """'52%' of the step the fix could recover, or '' when the rule cannot say."""
    return "" if f.impact_pct is None else f"{f.impact_pct:.0f}%"


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


class FindingsPanel(TextPanel):
    """The top findings, ranked by the step time their fix could recover."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.view: AttachView | None = None
        self.rows = 3

    def build(self, width: int) -> Text:
        v = self.view
        title = Text()
        title.append(" Findings ", style="bold reverse")
        items = v.findings if v else ()
        if v is None or v.stats.count < MIN_STEPS:
            seen = 0 if v is None else v.stats.count
            title.append(
                f"  the analyzer waits for {MIN_STEPS} ordinary steps ({seen} so far; warm-up "
                "and profiled steps do not count)",
                style="dim",
            )
            return title
        if not items:
            title.append("  nothing found that costs this job time", style="dim green")
            hint = " p: capture for kernel-level rules" if v.capture is None else ""
            title.append(hint, style="dim")
            return title
        more = len(items) - self.rows
        title.append(
            f"  {len(items)} ranked by the step time a fix could recover"
            + (f" (+{more} more)" if more > 0 else "")
            + "   f: details",
            style="dim",
        )
        lines = [title] + [headline(f, width) for f in items[: self.rows]]
        return Text("\n").join(lines)


def detail(f: Finding) -> Text:
    """A finding in full: every field, labelled."""
    text = Text()
    text.append(f" {f.severity.upper()} ", style=SEVERITY_STYLE[f.severity])
    text.append(f"  {fmt.clean(f.title, 200)}", style="bold")
    text.append(f"   {fmt.clean(f.scope, 80)} · {fmt.clean(f.rule, 80)}", style="dim")
    for label, value in (
        ("seen", f.evidence),
        (
            "cost",
            ""
            if f.impact_pct is None
            else f"about {f.impact_pct:.0f}% of the step time"
            + ("" if f.impact_ms is None else f" ({f.impact_ms:.2f} ms per step)"),
        ),
        ("fix", f.fix),
        ("then", f.confirm),
        ("from", f.source),
    ):
        if value:
            text.append(f"\n\n {label:<5} ", style="bold")
            text.append(fmt.clean(value))
    return text


class FindingDetail(TextPanel):
    WRAP = True
    SELECTABLE = True  # users copy the fix from here

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.finding: Finding | None = None

    def build(self, width: int) -> Text:
        if self.finding is None:
            return Text("no finding selected", style="dim")
        return detail(self.finding)


class FindingsScreen(Screen[object]):
    """Every finding of the attached job; the highlighted one in full below."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,f,q", "close", "Close")]
    DEFAULT_CSS = """
    FindingsScreen OptionList { height: auto; max-height: 45%; }
    FindingsScreen #finding-detail { padding: 1 1; }
    """

    def __init__(self, findings: tuple[Finding, ...]) -> None:
        super().__init__()
        self.findings = findings

    def compose(self) -> ComposeResult:
        options = [Option(headline(f, 200), id=str(i)) for i, f in enumerate(self.findings)] or [
            Option(Text("no findings", style="dim"), disabled=True)
        ]
        yield OptionList(*options, id="finding-list")
        with VerticalScroll():
            yield FindingDetail(id="finding-detail")
        yield Footer()

    def on_mount(self) -> None:
        self._show(0)

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        self._show(int(event.option.id or 0))

    def _show(self, index: int) -> None:
        panel = self.query_one(FindingDetail)
        panel.finding = self.findings[index] if 0 <= index < len(self.findings) else None
        panel.redraw()

    def action_close(self) -> None:
        self.app.pop_screen()
