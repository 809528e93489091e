"""The full-screen views need a terminal on both ends.

Without one (a cron job, ``ssh host gputui``, output piped to a file) Textual
would draw into a pipe or wait on input that never comes; each screen refuses at
once instead, with one line that names the printed form of the same view.
"""

from __future__ import annotations

import sys

from gputui.errors import GputuiError


def need_terminal(prog: str, instead: str) -> None:
    """Raise (exit status 2) unless standard input and output are terminals."""
    if not (_isatty(sys.stdin) and _isatty(sys.stdout)):
        raise GputuiError(
            f"{prog}: the live screen needs a terminal; for a printed report use '{instead}'"
        )


def _isatty(stream: object) -> bool:
    try:
        return bool(stream is not None and stream.isatty())  # type: ignore[attr-defined]
    except (ValueError, OSError):  # a closed stream
        return False
