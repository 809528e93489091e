"""What every gputui app shares (the monitor, attach, the rank view, the cluster
view): q and Ctrl-C quit, as in htop and nvitop; ``?`` opens the keys of the
screen on top; d switches the theme; ``--ascii`` covers the footer's key names
and the notices too."""

from __future__ import annotations

from typing import ClassVar

from textual.app import App
from textual.binding import Binding, BindingType
from textual.driver import Driver
from textual.filter import Monochrome, NoColor
from textual.notifications import SeverityLevel

from gputui.reports.text import to_ascii
from gputui.tui import ascii, key_names

#: the footer's names of keys that are not ASCII
_ASCII_KEYS = {"⏎": "enter", "↑": "up", "↓": "down", "←": "left", "→": "right", "⇥": "tab"}


#: every key of the footer fits in 80 columns: the command palette's key (ctrl+p)
#: is in the ``?`` help instead
FOOTER_CSS = """
FooterKey.-command-palette {
    display: none;
}
"""


#: the cursor of the tables under ``NO_COLOR``: reverse video (focused) and
#: underlined (not focused), where a colour theme gives them a background
NO_COLOR_CURSOR = {
    "block-cursor-text-style": "reverse",
    "block-cursor-blurred-text-style": "underline",
}


def no_colour(app: App[None]) -> None:
    """``NO_COLOR``: no colour at all.  Textual's own answer to it (outside its
    ANSI-colour mode) turns every colour into a grey, which a terminal still
    gets as 256-colour or true-colour codes; the terminal's default colours
    instead, with bold, reverse and underline kept (no-color.org)."""
    app._filters = [NoColor() if isinstance(f, Monochrome) else f for f in app._filters]


class BaseApp(App[None]):
    CSS = ascii.CSS + FOOTER_CSS
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        # Textual's own Ctrl-C only says "press ctrl+q": here it quits (in a text
        # field with a selection it still copies: the field sees the key first).
        Binding("ctrl+c", "quit", "Quit", show=False),
        Binding("question_mark,f1", "help", "Help"),
        Binding("d", "toggle_theme", "Theme", show=False),
    ]
    #: the keys ``?`` shows when no screen on the stack names its own
    #: (``HELP_TOPIC``: the findings screen over attach shows attach's keys)
    HELP_TOPIC = "monitor"

    ascii_only = False

    def __init__(self, *, ascii_only: bool = False, autostart: bool = True) -> None:
        # the footer's and the bindings' key names, without Unicode's names table
        key_names.install()
        super().__init__()
        if self.no_color:
            no_colour(self)
        #: ASCII drawing (--ascii): the panels, Textual's scrollbars, the footer's
        #: key names and the notices
        self.ascii_only = ascii_only
        #: False: the data comes only as a test or a screenshot feeds it
        self.autostart = autostart
        if ascii_only:
            ascii.use_ascii(self)

    def get_css_variables(self) -> dict[str, str]:
        variables = super().get_css_variables()
        if self.no_color:
            # without colour, a cursor's background is gone: reverse video marks it
            variables = {**variables, **NO_COLOR_CURSOR}
        return variables

    def get_driver_class(self) -> type[Driver]:
        # Textual's Linux driver with an input thread that sleeps while no key comes
        from gputui.tui.driver import driver_class

        return driver_class(super().get_driver_class())

    def get_key_display(self, binding: Binding) -> str:
        shown = super().get_key_display(binding)
        if self.ascii_only and not shown.isascii():
            return to_ascii("".join(_ASCII_KEYS.get(c, c) for c in shown))
        return shown

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None:
        # Notices quote paths, commands and errors: plain text, never markup (a
        # "[" in a path is not a style).
        if self.ascii_only:
            message, title = to_ascii(message), to_ascii(title)
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=False)

    def action_help(self) -> None:
        from gputui.tui.screens.help import HelpScreen

        if isinstance(self.screen, HelpScreen):
            return
        topics = (getattr(screen, "HELP_TOPIC", None) for screen in reversed(self.screen_stack))
        self.push_screen(HelpScreen(next((t for t in topics if t), self.HELP_TOPIC)))

    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.theme == "textual-dark" else "textual-dark"
