"""The attach screen's memory snapshot view (key m): a snapshot's progress, then
what the job's allocator held and where it came from.

Live, ``m`` asks the hook to record CUDA allocation history for the next
:data:`SNAPSHOT_STEPS` steps (``s`` asks again); in a replay it shows the snapshot
the recording holds.  The summary draws the sentences and rows of
:mod:`gputui.reports.memsnap_view`, which ``attach --memory-snapshot`` prints
too (every file and function name in them comes from the job, cleaned there).
"""

from __future__ import annotations

from rich.text import Text
from textual.binding import Binding

from gputui import fmt
from gputui.protocol import memsnap as ms
from gputui.protocol.memsnap import MemorySnapshotResult
from gputui.reports import memsnap_view as mv
from gputui.session.attach import StateSnapshot
from gputui.tui.attach.subscreen import (
    PanelScreen,
    StatePanel,
    ask_hook,
    cpu_job,
)
from gputui.tui.render import bar, hanging, lead_width, sparkline

SNAPSHOT_STEPS = 5


def memsnap_busy(snap: StateSnapshot) -> bool:
    """A snapshot asked for by this viewer, or under way for anyone, has no result yet."""
    status = snap.memsnap_status
    done = snap.memsnap is not None and status is not None and snap.memsnap.id == status.id
    return bool(snap.memsnap_wanted) or (status is not None and status.active and not done)


def progress(snap: StateSnapshot) -> tuple[str, str] | None:
    """(style, line) on the snapshot under way, or on the last one that ended
    without a result; None when there is nothing to say."""
    status = snap.memsnap_status
    if status is None or (snap.memsnap is not None and snap.memsnap.id == status.id):
        if snap.memsnap_wanted:
            return "yellow", "memory snapshot requested, waiting for the hook"
        return None
    state = status.state
    if state == ms.ARMED:
        return "yellow", "memory snapshot armed: the history starts at the next step boundary"
    if state == ms.RECORDING:
        last = snap.steps[-1].index if snap.steps else None
        if status.steps is not None and status.step is not None and last is not None:
            got = max(0, min(status.steps, last - status.step + 1))
            return "yellow", (
                f"recording allocation history: step {got}/{status.steps} (from step {status.step})"
            )
        return "yellow", f"recording allocation history from step {status.step}"
    if state == ms.PROCESSING:
        return "yellow", "processing: summarising the snapshot and writing its file in the job"
    reason = f": {status.reason}" if status.reason else ""
    return "red", f"memory snapshot {state}{reason}"


def _site(site: str, width: int) -> str:
    return fmt.middle(site, max(8, width))


def _section(text: Text, title: str, note: str = "") -> None:
    text.append("\n\n")
    text.append(f" {title} ", style="bold reverse")
    if note:
        text.append(f"  {note}", style="dim")


def memory_text(snap: StateSnapshot, width: int, ascii_only: bool, live: bool) -> Text:
    """The whole view as one text: progress, then the latest snapshot's summary."""
    width = max(40, width)
    text = Text()
    text.append(" Memory snapshot ", style="bold reverse")
    keys = f"  s: snapshot {SNAPSHOT_STEPS} steps   esc: back" if live else "  esc: back"
    text.append(keys, style="dim")
    line = progress(snap)
    if line is not None:
        text.append("\n ")
        text.append(fmt.clean(line[1]), style=line[0])
    result = snap.memsnap
    if result is None and cpu_job(snap):
        text.append("\n ")
        text.append("no memory snapshot for a CPU job: ", style="yellow")
        text.append(
            "it records the CUDA caching allocator's history, and this job uses no "
            "CUDA device.  Its host memory is the process's resident size (RSS in "
            "top or htop)."
        )
        return text
    if result is None:
        text.append("\n ")
        if live:
            text.append(
                f"no memory snapshot yet: s records the allocation history of the next "
                f"{SNAPSHOT_STEPS} steps (CUDA jobs)",
                style="dim",
            )
        else:
            text.append(
                "this recording holds no memory snapshot (record one with --record and m)",
                style="dim",
            )
        return text
    _summary(text, result, width, ascii_only)
    return text


def _summary(text: Text, r: MemorySnapshotResult, width: int, ascii_only: bool) -> None:
    v = mv.memsnap_view(r)
    text.append("\n ")
    text.append(v.window, style="bold")
    text.append(f", {v.counts}")
    if v.replayed:
        text.append(f" ({mv.REPLAYED})", style="dim")
    if v.truncated:
        text.append(f"\n {mv.RING_FULL}", style="yellow")
    text.append(f"\n {v.cost}", style="dim")
    if v.error:
        text.append(f"\n {v.error}", style="red")
    alloc = v.allocator
    if alloc is not None:
        _section(text, mv.ALLOCATOR, alloc.note)
        used = alloc.used_share
        label = fmt.pct(None if used is None else used * 100)
        text.append("\n reserved ")
        text.append_text(bar(used, max(10, min(40, width - 50)), ascii_only, "cyan", label))
        text.append(f" {alloc.used}")
        text.append("".join(f"\n {line}" for line in alloc.lines))
    site_w = max(20, width - 46)
    _growing(text, v, width, site_w, ascii_only)
    if v.sites:
        _section(text, mv.TOP_SITES, v.sites_note)
        site, allocated, count, alive = mv.SITE_COLUMNS
        text.append(f"\n {site:<{site_w}} {allocated:>10} {count:>7} {alive:>14}")
        for s in v.sites:
            text.append(f"\n {_site(s.site, site_w):<{site_w}}")
            text.append(f" {s.allocated:>10} {s.count:>7,} {s.alive:>14}")
    if v.blocks:
        _section(text, mv.LARGEST)
        for b in v.blocks:
            text.append(f"\n {b.size:>9} {fmt.truncate(b.pool, 6):<6} ")
            if b.site is not None:
                text.append(_site(b.site, site_w))
            else:
                text.append(mv.BEFORE_WINDOW, style="dim")
    for note in v.notes:
        text.append(f"\n {note}", style="yellow")
    text.append("\n\n file: ", style="bold")
    if v.file_written:
        text.append(v.file)
        text.append(f"\n       {mv.OPEN_AT}", style="dim")
    else:
        text.append(v.file, style="yellow")


def _growing(
    text: Text, v: mv.MemorySnapshotView, width: int, site_w: int, ascii_only: bool
) -> None:
    if v.growing_verdict is not None:
        _section(text, mv.GROWING)
        style = "green" if v.growth_checked else "yellow"
        text.append(f"\n {v.growing_verdict}", style=style)
        return
    _section(text, mv.GROWING, mv.GROWING_NOTE)
    site, per_step, at, kept = mv.GROWING_COLUMNS
    text.append(f"\n {site:<{site_w}} {per_step:>9} {at:<16} {kept:>5}")
    for g in v.growing:
        text.append("\n ")
        text.append(f"{_site(g.site, site_w):<{site_w}}", style="bold red")
        text.append(f" {g.per_step:>9} ")
        values = [float(b) for b in g.live_bytes]
        text.append_text(sparkline(values, 16, maximum=None, ascii_only=ascii_only, style="red"))
        text.append(f" {g.kept:>5}")
    for frame in v.top_frames:
        where = fmt.middle(frame.where, max(20, width - 30))
        text.append(f"\n   at {where} in {fmt.truncate(frame.function, 60)}", style="dim")


class MemorySnapshotPanel(StatePanel):
    SELECTABLE = True  # users copy the snapshot's path from here

    def build(self, width: int) -> Text:
        # Every redraw (a refresh, a resize) draws the state as it is now; a line
        # longer than the panel goes on under its own start.
        text = memory_text(self.state.snapshot(), width, self.ascii_only, self.live)
        return hanging(text, width, lead_width)


class MemorySnapshotScreen(PanelScreen):
    """A memory snapshot: asked for on open when the job has none (live), and
    shown as it progresses."""

    PANEL = MemorySnapshotPanel
    ID = "mem"
    KEY = "m"
    REQUEST = Binding("s", "snapshot", "Snapshot")

    def wants_request(self, snap: StateSnapshot) -> bool:
        return snap.memsnap is None and not cpu_job(snap)

    def action_snapshot(self) -> None:
        ask_hook(
            self,
            self.feed,
            self.state.snapshot(),
            "memory snapshots",
            memsnap_busy,
            lambda: self.feed.request_memory_snapshot(SNAPSHOT_STEPS),
            self.state.set_memsnap_wanted,
        )
