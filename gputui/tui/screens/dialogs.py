"""The confirmation dialog in front of every signal."""

from __future__ import annotations

import signal

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label

from gputui import fmt
from gputui.session.process_view import display_command
from gputui.snapshot.model import ProcessSnapshot

#: button id -> signal
CHOICES = {
    "term": signal.SIGTERM,
    "int": signal.SIGINT,
    "kill": signal.SIGKILL,
}


class SignalDialog(ModalScreen[int | None]):
    """Asks which signal to send to one process; dismisses with the signal or None."""

    BINDINGS = [
        Binding("escape,n,q", "cancel", "Cancel"),
        Binding("t", "choose('term')", "SIGTERM"),
        Binding("i", "choose('int')", "SIGINT"),
        Binding("9", "choose('kill')", "SIGKILL"),
        # a modal screen keeps the app's keys from it: Ctrl-C quits here too
        Binding("ctrl+c", "app.quit", "Quit", show=False),
    ]

    def __init__(self, proc: ProcessSnapshot) -> None:
        super().__init__()
        self.proc = proc

    def compose(self) -> ComposeResult:
        proc = self.proc
        with Vertical(id="dialog"):
            # Text, not a string: Label would read markup in another user's command.
            user = fmt.clean(proc.user, 64)
            yield Label(Text(f"Send a signal to pid {proc.pid} ({user})?"), id="question")
            yield Label(Text(fmt.truncate(display_command(proc), 200)), id="command")
            yield Label(
                Text(f"GPU {proc.gpu_index}  {fmt.size(proc.gpu_mem_bytes)} GPU memory"),
                id="facts",
            )
            with Horizontal(id="buttons"):
                yield Button("TERM (t)", id="term", variant="warning")
                yield Button("INT (i)", id="int", variant="primary")
                yield Button("KILL (9)", id="kill", variant="error")
                yield Button("Cancel (esc)", id="cancel")

    def on_mount(self) -> None:
        if getattr(self.app, "ascii_only", False):
            self.add_class("-ascii")
        # Enter confirms the gentle choice; KILL needs a deliberate key or click.
        self.query_one("#term", Button).focus()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        choice = event.button.id or "cancel"
        self.dismiss(CHOICES.get(choice))

    def action_choose(self, choice: str) -> None:
        self.dismiss(CHOICES[choice])

    def action_cancel(self) -> None:
        self.dismiss(None)
