"""Every key of an app, in one place: ``?`` shows the keys of the screen on top
(the monitor's, attach's, the rank view's or the cluster view's)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer

from gputui.tui.render import hanging
from gputui.tui.widgets.panels import BannerPanel
from gputui.tui.widgets.text_panel import TextPanel

Section = tuple[str, list[tuple[str, str]]]

#: what every app shares (BaseApp)
QUIT = ("q / ctrl+c", "quit (ctrl+c from any screen; q on a sub-screen: back)")
HELP = ("? / F1", "this help (esc, q or ? closes it)")
THEME = ("d", "dark / light theme")
PALETTE = ("ctrl+p", "command palette")

# Kept by hand so that they read well; tests check that they cover every binding
# of each app and its screens.
MONITOR: list[Section] = [
    (
        "Everywhere",
        [
            QUIT,
            HELP,
            ("p", "pause / resume sampling"),
            ("+ / -", "sample less / more often (0.1 s to 30 s)"),
            ("f", "all findings, with evidence and fix"),
            THEME,
            PALETTE,
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
            ("up / down", "move the cursor (it stays on its process)"),
            ("pgup / pgdn", "move a page; home / end: first / last"),
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
            ("esc / n / q", "cancel"),
        ],
    ),
]

MONITOR_NOTES = [
    "TENSOR is the fraction of time the tensor cores were busy (GPM, Hopper and newer): "
    "100% GPU util with a few % tensor activity means the GPU is busy but not on the "
    "tensor cores (an FP32 path, or elementwise work).  GPU util only says a kernel ran.",
    "--readonly disables signals.  A recording (--demo, --replay) is never this machine: "
    "signals are refused there, and a banner says so.",
]

ATTACH: list[Section] = [
    (
        "Attach screen",
        [
            ("p", "profile the next 5 steps: kernels, ops, FLOPs, trace file"),
            ("a", "the automatic capture once the job is steady: off / on"),
            ("g", "step times: wall clock / GPU time"),
            ("o", "the table: GPU kernels / CPU ops"),
            ("up / down", "move in the table (the line under it shows the full name)"),
            ("f", "findings, each with its evidence and fix"),
            ("m", "memory snapshot: the CUDA allocation history of the next 5 steps"),
            ("l", "roofline: the top ops against the GPU's ceilings (CUDA jobs)"),
            ("y", "Python: the functions that hold the step, and their call paths"),
            ("r", "reconnect (a replay: play it again)"),
            ("q / esc", "back to the monitor or the rank view, when opened from one"),
        ],
    ),
    ("Everywhere", [QUIT, HELP, THEME, PALETTE]),
    (
        "Memory snapshot (m)",
        [("s", "snapshot the next 5 steps (again)"), ("esc / m / q", "back")],
    ),
    (
        "Roofline (l)",
        [("p", "capture 5 steps with FLOPs and shapes (again)"), ("esc / l / q", "back")],
    ),
    (
        "Python (y)",
        [
            ("up / down", "pick a function: its call path shows below"),
            ("tab", "the training thread's functions / the DataLoader workers'"),
            ("esc / y / q", "back"),
        ],
    ),
    (
        "Findings (f)",
        [
            ("up / down", "pick a finding: its evidence, cost and fix show below"),
            ("esc / f / q", "close"),
        ],
    ),
]

ATTACH_NOTES = [
    "Step marks under the bars: P profiled, w warm-up, ! slower than 3x the median step (p50).",
    "A recording (--demo, --replay) is never this machine: captures and memory "
    "snapshots need a live job.",
    "A live job with no capture in the last 10 minutes is captured once, with FLOPs, "
    "when steady (--no-capture or a: none); p waits for it while it runs.",
]

RANKS: list[Section] = [
    (
        "Rank view",
        [
            ("enter / click", "open the rank under the cursor (its attach screen)"),
            ("up / down", "move the cursor; pgup / pgdn: a page"),
            ("s / S", "sort by the next column / reverse the sort"),
            ("p", "profile the same 5 steps on every rank"),
            ("a", "the automatic capture of every rank: off / on"),
            ("f", "findings across ranks, each with its evidence and fix"),
            ("r", "reconnect the ranks that were lost (a replay: play it again)"),
        ],
    ),
    *[
        (f"{title} of a rank" if title == "Attach screen" else title, rows)
        for title, rows in ATTACH
    ],
]

CLUSTER: list[Section] = [
    (
        "Cluster view",
        [
            ("r", "read Prometheus now"),
            ("tab", "the next table: nodes, GPUs, jobs"),
            ("up / down", "move the cursor (the GPUs table follows the node under it)"),
            ("pgup / pgdn", "move a page; home / end: first / last"),
        ],
    ),
    ("Everywhere", [QUIT, HELP, THEME, PALETTE]),
]

#: topic -> (title, sections, notes)
TOPICS: dict[str, tuple[str, list[Section], list[str]]] = {
    "monitor": ("gputui keys", MONITOR, MONITOR_NOTES),
    "attach": ("gputui attach keys", ATTACH, ATTACH_NOTES),
    "ranks": ("gputui attach keys: the rank view", RANKS, ATTACH_NOTES),
    "cluster": ("gputui cluster keys", CLUSTER, []),
}


def help_text(topic: str = "monitor", width: int = 100) -> Text:
    """The keys of ``topic`` laid out for ``width`` cells: each description
    wrapped between words under its own column, the notes under their start."""
    title, sections, notes = TOPICS[topic]
    keys_w = min(24, max(len(keys) for _, rows in sections for keys, _ in rows)) + 2
    text = Text()
    text.append(f" {title} ", style="bold reverse")
    text.append("\n")
    for section, rows in sections:
        text.append(f"\n{section}\n", style="bold underline")
        for keys, what in rows:
            line = Text()
            line.append(f"  {keys:<{keys_w}}", style="bold cyan")
            line.append(what)
            text.append_text(hanging(line, width, 2 + keys_w))
            text.append("\n")
    for note in notes:
        text.append("\n")
        text.append_text(hanging(Text(note, style="dim"), width, 0))
        text.append("\n")
    return text


class HelpPanel(TextPanel):
    def __init__(self, topic: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.topic = topic

    def build(self, width: int) -> Text:
        return help_text(self.topic, width)


class HelpScreen(Screen[object]):
    BINDINGS = [
        Binding("escape,q,question_mark,f1", "close", "Close"),
    ]

    def __init__(self, topic: str = "monitor") -> None:
        super().__init__()
        self.topic = topic

    def compose(self) -> ComposeResult:
        yield BannerPanel(id="banner")
        with VerticalScroll():
            yield HelpPanel(self.topic, id="help")
        yield Footer()

    def action_close(self) -> None:
        self.app.pop_screen()
