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
from gputui.analysis.evidence import MIN_STEPS, findings_waiting
from gputui.analysis.finding import Finding
from gputui.reports import findings as findings_text
from gputui.tui.attach.view_panel import ViewPanel
from gputui.tui.render import ascii_text, finding_line, findings_count, hanging
from gputui.tui.widgets.text_panel import TextPanel


class JobFindingsPanel(ViewPanel):
    """The top findings, ranked by the step time their fix could recover."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows = 3

    def build(self, width: int) -> Text:
        v = self.view
        title = Text()
        title.append(" Findings ", style="bold reverse")
        items = v.findings if v else ()
        hang = len(title) + 2
        if v is None or v.stats.count < MIN_STEPS:
            seen = 0 if v is None else v.stats.count
            title.append("  " + findings_waiting(seen, MIN_STEPS), style="dim")
            return hanging(title, width, hang)
        if not items:
            title.append("  nothing found that costs this job time", style="dim green")
            if v.capture is None:
                title.append("; p: capture for kernel-level rules", style="dim")
            return hanging(title, width, hang)
        more = len(items) - self.rows
        title.append("  " + findings_count(len(items), more, width - hang), style="dim")
        lines = [title] + [finding_line(f, width) for f in items[: self.rows]]
        return Text("\n").join(lines)


def detail(f: Finding, width: int = 10_000) -> Text:
    """A finding in full, every field labelled, each wrapped between words under
    its own start at ``width``."""
    return hanging(findings_text.block(f, spaced=True), width)


def list_entry(f: Finding, width: int) -> Text:
    """A finding in the list: severity, cost and title, wrapped under the title
    (the evidence is in the detail below)."""
    text = Text()
    text.append(f" {f.severity.upper():4} ", style=findings_text.SEVERITY_STYLE[f.severity])
    cost = findings_text.impact_text(f)
    text.append(f" {cost:>4} " if cost else "      ", style="bold")
    text.append(fmt.clean(f.title, 200), style="bold")
    return hanging(text, width, 12)


class FindingDetail(TextPanel):
    WRAP = True  # lines are built to fit: this only catches a width it was not built for
    SELECTABLE = True  # users copy the fix from here

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.finding: Finding | None = None

    def build(self, width: int) -> Text:
        if self.finding is None:
            return Text("no finding selected", style="dim")
        return detail(self.finding, width)


class FindingList(OptionList):
    """The findings by title; laid out again for each width."""

    def __init__(self, findings: tuple[Finding, ...], *, id: str | None = None) -> None:
        self.findings = findings
        options = [
            Option(Text(fmt.clean(f.title, 200)), id=str(i)) for i, f in enumerate(findings)
        ] or [Option(Text("no findings", style="dim"), disabled=True)]
        super().__init__(*options, id=id)
        self._laid_out = 0

    def on_resize(self) -> None:
        # the options' room: the list's less its padding
        width = max(20, self.scrollable_content_region.width - 2)
        if width == self._laid_out or not self.findings:
            return
        self._laid_out = width
        ascii_only = bool(getattr(self.app, "ascii_only", False))
        for i, f in enumerate(self.findings):
            entry = list_entry(f, width)
            self.replace_option_prompt_at_index(i, ascii_text(entry) if ascii_only else entry)


class JobFindingsScreen(Screen[object]):
    """Every finding of the attached job; the highlighted one in full below."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,f,q", "close", "Close")]
    DEFAULT_CSS = """
    JobFindingsScreen OptionList { height: auto; max-height: 45%; }
    JobFindingsScreen #finding-detail { padding: 1 1; }
    """

    def __init__(self, findings: tuple[Finding, ...]) -> None:
        super().__init__()
        self.findings = findings

    def compose(self) -> ComposeResult:
        yield FindingList(self.findings, id="finding-list")
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
