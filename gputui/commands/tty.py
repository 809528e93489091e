"""The full-screen views need a terminal on both ends.

Without one (a cron job, ``ssh host gputui``, output piped to a file) Textual
would draw into a pipe or wait on input that never comes; each screen refuses at
once instead, with one line that names the printed form of the same view.
"""

from __future__ import annotations

import sys
from typing import Any

from gputui.errors import GputuiError


def has_terminal() -> bool:
    """Standard input and output are both terminals."""
    return _isatty(sys.stdin) and _isatty(sys.stdout)


def need_terminal(prog: str, instead: str) -> None:
    """Raise (exit status 2) unless standard input and output are terminals.

    Called last, once what the screen would show has been found (the recording
    read, the job connected to): a missing file or job is said first, so that
    the printed form this names works when it is tried."""
    if not has_terminal():
        raise GputuiError(
            f"{prog}: the live screen needs a terminal; for a printed report use '{instead}'"
        )


def _isatty(stream: object) -> bool:
    try:
        return bool(stream is not None and stream.isatty())  # type: ignore[attr-defined]
    except (ValueError, OSError):  # a closed stream
        return False


def run_screen(app: Any, feed: Any, record_path: object = None) -> int:
    """Run a live screen until it quits; close its feed whatever happens; say
    where the session was recorded.  Returns the app's exit status."""
    try:
        app.run()
    finally:
        feed.close()
    recorder = getattr(feed, "recorder", None)
    if recorder is not None:
        from gputui.reports.text import plural

        print(f"saved {plural(recorder.count, 'message')} to {record_path}", file=sys.stderr)
    return int(app.return_code or 0)
