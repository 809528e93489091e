"""``gputui attach PID`` for a multi-rank job: every local rank at once.

PID may be any rank's or the launcher's (the torchrun agent).  ``--once``
reads each rank's history over its own connection (in parallel), optionally
profiles the same steps on every rank (``--capture N``), and prints the ranks
side by side with the rank rules' findings; ``--json`` adds ``job`` and
``ranks`` to the named rank's report (docs/json.md).  Without ``--once`` the
rank view opens.  Ranks on other nodes are beyond local sockets: the report
says how many, and where to see them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gputui.commands.tty import need_terminal, run_screen

if TYPE_CHECKING:
    from gputui.client.job_group import JobGroup
    from gputui.recording.attach import AttachRecording
    from gputui.session.oneshot import OnceOptions


def once(job: JobGroup, pid: int, options: OnceOptions, as_json: bool, ascii_only: bool) -> int:
    """The ranks side by side (``--once``)."""
    from gputui.reports import ranks as ranks_report
    from gputui.session.oneshot import OneShot

    ranks_report.output(OneShot(options).ranks(job, pid), as_json, ascii_only)
    return 0


def run_live(
    job: JobGroup, pid: int, record: str | None, ascii_only: bool, auto_capture: bool = True
) -> int:
    """The rank view of a running job (``--record FILE`` saves its session;
    ``auto_capture=False``: ``--no-capture``)."""
    # the job was found from its ranks' hellos: only the terminal is left to check
    need_terminal("gputui attach", f"gputui attach {pid} --once")
    from gputui.session.rank_feeds import LiveRanksFeed
    from gputui.tui.attach.rank_screen import RanksApp

    feed = LiveRanksFeed(job, record_path=record)
    app = RanksApp(feed, ascii_only=ascii_only, auto_capture=auto_capture)
    return run_screen(app, feed, record)


def replay(
    recording: AttachRecording, label: str, banner: str, speed: float, ascii_only: bool
) -> int:
    """The rank view of a recorded multi-rank session."""
    from gputui.session.rank_feeds import ReplayRanksFeed
    from gputui.tui.attach.rank_screen import RanksApp

    feed = ReplayRanksFeed(recording, label, speed=speed)
    app = RanksApp(feed, ascii_only=ascii_only, banner=banner, notice=recording.ends_early)
    try:
        app.run()
    finally:
        feed.close()
        said_ends_early(recording)
    return int(app.return_code or 0)


def said_ends_early(recording: AttachRecording) -> None:
    """A recording that ends early, said on stderr once its screen is gone."""
    if recording.ends_early is not None:
        from gputui.reports.text import say

        say(f"gputui attach: {recording.ends_early}")
