"""The base of the attach screen's panels: each draws the screen's
:class:`AttachView` (plain values) as Rich Text through :class:`TextPanel`, so
an unchanged panel is not repainted."""

from __future__ import annotations

from gputui.session.attach import AttachView
from gputui.tui.widgets.text_panel import TextPanel


class ViewPanel(TextPanel):
    """A panel of the attach screen: the view it draws (None before the first),
    ASCII mode, and the compact form a short terminal gets."""

    def __init__(self, *, id: str | None = None, ascii_only: bool = False) -> None:
        super().__init__(id=id)
        self.view: AttachView | None = None
        self.ascii_only = ascii_only
        self.compact = False
