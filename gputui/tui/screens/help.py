"""Every key, in one place."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from gputui.tui.widgets.panels import BannerPanel

#: (section, [(keys, what)]): kept by hand so it reads well; tests check it covers
#: every binding of the app and its screens.
KEYS: list[tuple[str, list[tuple[str, str]]]] = [
    (
        "Everywhere",
        [
            ("q", "quit (on a sub-screen: back)"),
            ("? / F1", "this help"),
            ("p", "pause / resume sampling"),
            ("+ / -", "sample less / more often (0.1 s to 30 s)"),
            ("f", "all findings, with evidence and fix"),
            ("d", "dark / light theme"),
            ("ctrl+p", "command palette"),
        ],
    ),
    (
        "Devices and graphs",
        [
            ("c", "compact device view (one line per GPU) on / off"),
            ("g", "history graphs on / off"),
            ("m", "graph metric: GPU util, memory, power, tensor activity, SM activity"),
        ],
    ),
    (
        "Processes",
        [
            ("up / down / pgup / pgdn", "move the cursor (it stays on its process)"),
            ("enter / click", "process detail (click the row under the cursor)"),
            ("s / S", "sort by the next / previous column (or click a header)"),
            ("r", "reverse the sort"),
            ("/", "filter: words, user:NAME, gpu:N, type:compute|graphics"),
            ("esc", "clear the filter"),
            ("u", "only this process's user (again: everyone)"),
            ("x", "type: all, compute, graphics"),
            ("t", "tree view: processes under their parents"),
            ("k", "send a signal (TERM / INT / KILL), after a confirmation"),
            ("a", "attach to a process with the gputui hook (marked with a diamond or @)"),
        ],
    ),
    (
        "Process detail",
        [
            ("esc / backspace / q", "back"),
            ("k", "send a signal"),
            ("a", "attach"),
        ],
    ),
    (
        "Signal dialog",
        [
            ("t / enter", "SIGTERM"),
            ("i", "SIGINT"),
            ("9", "SIGKILL"),
            ("esc / n", "cancel"),
        ],
    ),
]

NOTES = [
    "TENSOR is the fraction of time the tensor cores were busy (GPM, Hopper and newer):",
    "100% GPU util with a few % tensor activity means the GPU is busy but not on the",
    "tensor cores (an FP32 path, or elementwise work).  GPU util only says a kernel ran.",
    "--readonly disables signals.  A recording (--demo, --replay) is never this machine:",
    "signals are refused there, and a banner says so.",
]


def help_text() -> Text:
    text = Text()
    text.append(" gputui keys ", style="bold reverse")
    text.append("\n")
    for section, rows in KEYS:
        text.append(f"\n{section}\n", style="bold underline")
        for keys, what in rows:
            text.append(f"  {keys:<24}", style="bold cyan")
            text.append(f"{what}\n")
    text.append("\n")
    for line in NOTES:
        text.append(line + "\n", style="dim")
    return text


class HelpScreen(Screen[object]):
    BINDINGS = [
        Binding("escape,q,question_mark,f1", "close", "Close"),
    ]

    def compose(self) -> ComposeResult:
        yield BannerPanel(id="banner")
        with VerticalScroll():
            yield Static(help_text(), id="help")
        yield Footer()

    def action_close(self) -> None:
        self.app.pop_screen()
