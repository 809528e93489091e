"""Long lines on screen wrap between words, each continuation under the start of
its own text (a hanging indent): the ``?`` help, the findings, notices."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from gputui.recording.replay import ReplaySource
from gputui.tui.app import make_app
from gputui.tui.attach import ReplayFeed, make_attach_app
from gputui.tui.attach.findings import JobFindingsScreen
from gputui.tui.render import hanging, line_spans
from gputui.tui.screens.findings import FindingsScreen
from gputui.tui.screens.help import HelpScreen
from tests.helpers.synthetic import wait_for


def rows(app: Any, selector: str) -> list[str]:
    """The rows a widget covers, as drawn."""
    widget = app.screen.query_one(selector)
    region = widget.region
    lines = [strip.text for strip in app.screen._compositor.render_strips()]
    return [line[region.x : region.right].rstrip() for line in lines[region.y : region.bottom]]


def starts(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def continuation_of(lines: list[str], needle: str) -> tuple[str, str]:
    """The line holding ``needle`` and the line after it."""
    i = next(i for i, line in enumerate(lines) if needle in line)
    return lines[i], lines[i + 1]


def test_hanging_indent_under_the_label() -> None:
    text = Text("   fix  expected near the power limit under full load; lower power use")
    text.stylize("bold", 3, 6)
    lines = hanging(text, 40).split("\n")
    assert [line.plain for line in lines] == [
        "   fix  expected near the power limit",
        "        under full load; lower power use",
    ]
    assert lines[0].spans and lines[0].spans[0].style == "bold"  # styles kept


def test_whole_words_and_an_explicit_indent() -> None:
    plain = "  q / ctrl+c      quit (ctrl+c from any screen; q on a sub-screen: back)"
    lines = hanging(Text(plain), 50, 18).plain.split("\n")
    assert all(len(line) <= 50 for line in lines)
    assert lines[1].startswith(" " * 18) and not lines[1][18].isspace()
    words = plain.split()
    assert " ".join(" ".join(lines).split()) == " ".join(words)  # no word cut


def test_a_word_longer_than_the_line_is_folded_not_left_alone() -> None:
    plain = " REPLAY: " + "very-long-directory-name/" * 4 + "r.jsonl.gz, not this machine"
    spans = line_spans(plain, 40, 1)
    assert spans[0] == (0, 40)  # "REPLAY:" is not left alone on the first line
    assert "".join(plain[a:b] for a, b in spans).replace(" ", "") == plain.replace(" ", "")


async def test_monitor_help_wraps_under_its_column_at_80() -> None:
    app = make_app(ReplaySource.demo(), 3600.0, autostart=False)
    async with app.run_test(size=(80, 24)) as pilot:
        app.advance(3)
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        await pilot.pause()
        first, second = continuation_of(rows(app, "#help"), "graph metric")
        assert starts(second) == first.index("graph metric"), (first, second)
        assert second.split()[0] != "" and len(second.split()) > 1


async def test_monitor_findings_wrap_under_their_field_at_80() -> None:
    app = make_app(ReplaySource.demo(), 3600.0, autostart=False)
    async with app.run_test(size=(80, 24)) as pilot:
        app.advance(121)  # the power cap finding
        await pilot.press("f")
        await wait_for(pilot, lambda: isinstance(app.screen, FindingsScreen))
        await pilot.pause()
        lines = rows(app, "#findings-list")
        for label in ("seen", "fix"):
            first, second = continuation_of(lines, f" {label} ")
            value = first.index(label) + 5
            assert starts(second) == value, (first, second)


async def test_attach_finding_detail_wraps_under_its_field_at_80() -> None:
    app = make_attach_app(ReplayFeed.demo(), autostart=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        app.attach_screen.replay_to(31.5)
        await pilot.press("f")
        await wait_for(pilot, lambda: isinstance(app.screen, JobFindingsScreen))
        await pilot.pause()
        first, second = continuation_of(rows(app, "#finding-detail"), " fix ")
        assert starts(second) == first.index("fix") + 5, (first, second)
        # the list: each finding on its own line(s), titles whole
        listed = rows(app, "#finding-list")
        assert any("the optimizer step takes a large share of the step" in r for r in listed)
