"""The attach screen: a hooked PyTorch job's steps, memory and kernels, live.

``make_attach_app(client_or_feed)`` is the ``gputui attach PID`` app;
``AttachScreen(feed)`` is also pushed over the monitor by its ``a`` key
(``attach_screen_factory``).
"""

from __future__ import annotations

from gputui.session.feeds import AttachFeed, LiveFeed, ReplayFeed
from gputui.tui.attach.screen import (
    AttachApp,
    AttachScreen,
    attach_screen_factory,
    make_attach_app,
)

__all__ = [
    "AttachApp",
    "AttachFeed",
    "AttachScreen",
    "LiveFeed",
    "ReplayFeed",
    "attach_screen_factory",
    "make_attach_app",
]
