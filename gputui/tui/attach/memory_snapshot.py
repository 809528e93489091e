"""The attach screen's memory snapshot view (key m): a snapshot's progress, then
what the job's allocator held and where it came from.

Live, ``m`` asks the hook to record CUDA allocation history for the next
:data:`SNAPSHOT_STEPS` steps (``s`` asks again); in a replay it shows the snapshot
the recording holds.  The view is built from plain values (the protocol's frozen
result) by :func:`memory_text`; every file and function name in it comes from
the job and is cleaned before display.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Footer

from gputui import fmt
from gputui.analysis.rules.memory import site_label
from gputui.protocol import memsnap as ms
from gputui.protocol.memsnap import AllocSite, MemorySnapshotResult
from gputui.reports.memory import MEMORY_VIZ, NO_FRAME
from gputui.session.attach import StateSnapshot
from gputui.tui.attach.subscreen import (
    PanelScreen,
    StatePanel,
    cpu_job,
    request_refusal,
    send_request,
)
from gputui.tui.render import bar, hanging, lead_width, sparkline
from gputui.tui.widgets.panels import BannerPanel

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


def _site(site: AllocSite | None, width: int) -> str:
    return fmt.middle(NO_FRAME if site is None else fmt.clean(site_label(site)), max(8, width))


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
    window = f"steps {r.first_step}..{r.last_step}"
    text.append("\n ")
    text.append(f"{window} ({r.steps} steps) on device {r.device}", style="bold")
    text.append(f", {r.alloc_count:,} allocations, {r.trace_entries:,} allocator events")
    if r.replay:
        text.append(" (taken before this viewer attached)", style="dim")
    if r.truncated:
        text.append("\n ring full: the oldest events were overwritten", style="yellow")
    stop, summary, dump = (
        fmt.ms(None if v is None else v / 1000, decimals=1, space=True)
        for v in (r.stop_ms, r.summary_ms, r.dump_ms)
    )
    text.append(
        f"\n cost: {stop} at the last step boundary; summary {summary} "
        f"and file {dump} off the training thread",
        style="dim",
    )
    if r.error:
        text.append(f"\n failed: {fmt.clean(r.error)}", style="red")
    frag = r.fragmentation
    if frag is not None:
        _section(text, "Allocator", f"{frag.segments} segments")
        bar_w = max(10, min(40, width - 50))
        used = frag.allocated_bytes / frag.reserved_bytes if frag.reserved_bytes else None
        text.append("\n reserved ")
        text.append_text(
            bar(
                used,
                bar_w,
                ascii_only,
                style="cyan",
                label=fmt.pct(None if used is None else used * 100),
            )
        )
        text.append(
            f" {fmt.size(frag.allocated_bytes)} allocated of {fmt.size(frag.reserved_bytes)}"
        )
        text.append(
            f"\n free blocks in split segments: {frag.inactive_split_blocks} "
            f"({fmt.size(frag.inactive_split_bytes)}), largest free block "
            f"{fmt.size(frag.largest_inactive_bytes)}"
            f"\n allocated before the window: {fmt.size(frag.before_window_bytes)}"
        )
    site_w = max(20, width - 46)
    if not r.growth_checked:
        _section(text, "Growing allocations")
        text.append(
            f"\n not judged: {r.boundaries} step boundaries found, "
            f"{ms.MIN_GROWTH_BOUNDARIES + 1} needed",
            style="yellow",
        )
    elif not r.growing:
        _section(text, "Growing allocations")
        text.append("\n none: no allocation site grew across the steps", style="green")
    else:
        _section(text, "Growing allocations", "alive at every step boundary, and growing")
        text.append(f"\n {'site':<{site_w}} {'per step':>9} {'at boundaries':<16} {'kept':>5}")
        for g in r.growing:
            kept = g.live_count[-1] if g.live_count else 0
            text.append("\n ")
            text.append(f"{_site(g.site, site_w):<{site_w}}", style="bold red")
            text.append(f" {'+' + fmt.size(g.per_step_bytes):>9} ")
            spark = sparkline(
                [float(v) for v in g.live_bytes],
                16,
                maximum=None,
                ascii_only=ascii_only,
                style="red",
            )
            text.append_text(spark)
            text.append(f" {kept:>5}")
        top = r.growing[0].site
        if top is not None:
            for frame in top.frames:
                where = fmt.middle(fmt.clean(f"{frame.file}:{frame.line}"), max(20, width - 30))
                text.append(f"\n   at {where} in {fmt.clean(frame.function, 60)}", style="dim")
    if r.sites:
        _section(text, "Top allocation sites", f"during the window, {r.site_count} sites")
        text.append(f"\n {'site':<{site_w}} {'allocated':>10} {'count':>7} {'alive at end':>14}")
        for s in r.sites[:10]:
            alive = f"{fmt.size(s.live_bytes)} ({s.live_count})" if s.live_count else "-"
            text.append(f"\n {_site(s.site, site_w):<{site_w}}")
            text.append(f" {fmt.size(s.bytes):>10} {s.count:>7,} {alive:>14}")
    if r.largest_blocks:
        _section(text, "Largest live blocks")
        for b in r.largest_blocks:
            text.append(f"\n {fmt.size(b.bytes):>9} {fmt.clean(b.segment_type, 6):<6} ")
            if b.in_window or b.site is not None:
                text.append(_site(b.site, site_w))
            else:
                text.append("allocated before the window", style="dim")
    for note in r.notes:
        text.append(f"\n note: {fmt.clean(note)}", style="yellow")
    text.append("\n\n file: ", style="bold")
    if r.snapshot_path:
        text.append(fmt.clean(r.snapshot_path))
        text.append(f"\n       open it at {MEMORY_VIZ}", style="dim")
    else:
        text.append(fmt.clean(r.snapshot_error or "not written"), style="yellow")


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
    REQUEST_ACTION = "snapshot"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("s", "snapshot", "Snapshot"),
        Binding("escape,m,q", "close", "Back"),
    ]
    DEFAULT_CSS = """
    MemorySnapshotScreen #mem-scroll { height: 1fr; }
    MemorySnapshotScreen #mem-panel { padding: 0 1; }
    """

    def compose(self) -> ComposeResult:
        yield BannerPanel(id="mem-banner")  # a replay says so on every screen
        with VerticalScroll(id="mem-scroll"):
            yield MemorySnapshotPanel(self.state, id="mem-panel")
        yield Footer()

    def wants_request(self, snap: StateSnapshot) -> bool:
        return snap.memsnap is None and not cpu_job(snap)

    def action_snapshot(self) -> None:
        refusal = request_refusal(
            self.feed, self.state.snapshot(), "memory snapshots", memsnap_busy
        )
        if refusal is not None:
            self.notify(refusal, severity="warning")
            return
        self._request_worker()

    @work(thread=True, exclusive=True, group="attach-memsnap")
    def _request_worker(self) -> None:
        send_request(
            self,
            lambda: self.feed.request_memory_snapshot(SNAPSHOT_STEPS),
            self.state.set_memsnap_wanted,
        )
