"""Smaller panels: header, recording banner, host, history graphs, findings line."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text

from gputui import fmt
from gputui.analysis.finding import Finding
from gputui.snapshot.history import GPU_METRICS, History, tail
from gputui.snapshot.model import DeviceSnapshot, HostSnapshot, Snapshot
from gputui.tui import render
from gputui.tui.widgets.text_panel import TextPanel

#: the history graphs cover at least this much time
GRAPH_WINDOW_S = 300.0


@dataclass
class HeaderState:
    label: str = ""
    is_recording: bool = False
    banner: str | None = None
    hostname: str = ""
    driver: str | None = None
    cuda: str | None = None
    n_gpus: int = 0
    interval_s: float = 1.0
    #: a replay's speed (1: as recorded), and the interval it was recorded at
    speed: float = 1.0
    recorded_interval_s: float | None = None
    latency_ms: float | None = None
    data_time_s: float | None = None
    paused: bool = False
    readonly: bool = False
    error: str | None = None


class HeaderPanel(TextPanel):
    """Title line with source, host, driver, cadence and the poller's own latency."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.state = HeaderState()

    def build(self, width: int) -> Text:
        s = self.state
        text = Text()
        text.append(" gputui ", style="bold reverse")
        text.append(f" {fmt.clean(s.label, 200)} ", style="bold")
        right = Text()
        if s.readonly:
            right.append(" read-only ", style="bold")
        if s.paused:
            right.append(" PAUSED ", style="bold black on yellow")
        if s.data_time_s is not None:
            right.append(" " + fmt.clock(s.data_time_s, with_date=s.is_recording) + " ")
        # (separator, part, how soon it gives way: the higher, the sooner)
        parts: list[tuple[str, str, int]] = []
        if s.hostname:
            parts.append((" | ", s.hostname, 1))
        if s.driver:
            parts.append((" | ", f"driver {s.driver}", 2))
            if s.cuda:
                parts.append((" ", f"CUDA {s.cuda}", 3))
        parts.append((" | ", f"{s.n_gpus} GPU{'s' if s.n_gpus != 1 else ''}", 0))
        if s.speed != 1.0 and s.recorded_interval_s:
            # a replay sped up: the sampling as recorded, and how much faster it plays
            parts.append((" | ", f"every {s.recorded_interval_s:g}s x{s.speed:g}", 0))
        else:
            parts.append((" | ", f"every {s.interval_s:g}s", 0))
        if s.latency_ms is not None:
            parts.append((" | ", f"sample {s.latency_ms:.1f}ms", 4))
        # The middle gives way first, a whole part at a time: label, pause state and
        # time always show.
        room = width - len(text) - len(right)
        middle = _middle(parts, room)
        text.append(middle.ljust(max(0, room)), style="dim")
        text.append_text(right)
        if s.error:
            error = Text(" ")
            error.append(fmt.clean(s.error), style="bold reverse red")
            text.append("\n")
            text.append_text(render.hanging(error, width, 1))
        return text


def _middle(parts: list[tuple[str, str, int]], room: int) -> str:
    """The header's middle: ``parts`` joined, leaving out the soonest to give way
    until it fits in ``room`` (then, still too long, cut)."""
    shown = list(parts)
    while True:
        middle = "".join(sep + part for sep, part, _ in shown)[3:]
        if len(middle) <= room:
            return middle
        soonest = max((rank for _, _, rank in shown), default=0)
        if not shown or soonest == 0:
            return fmt.truncate(middle, room)
        shown = [part for part in shown if part[2] != soonest]


#: the most lines the banner takes (its CSS's max-height): a longer one ends in "…"
BANNER_LINES = 3
#: where a banner's line would rather end: after a part of its sentence ("...not
#: this machine:", "...(bf16, hooked)"), first choice first
BANNER_BREAKS = (":;", ",)")


def _line_end(words: list[str], start: int, width: int) -> int:
    """Where a greedy line of ``width`` cells from ``words[start]`` ends."""
    used, end = len(words[start]), start + 1
    while end < len(words) and used + 1 + len(words[end]) <= width:
        used += 1 + len(words[end])
        end += 1
    return end


def _fits(words: list[str], start: int, lines: int, width: int, last: int) -> bool:
    """``words[start:]`` fit ``lines`` lines of ``width`` cells, the last of them
    ``last`` cells (greedy filling leaves the least for the last line)."""
    for _ in range(lines - 1):
        if start >= len(words):
            return True
        start = _line_end(words, start, width)
    return start >= len(words) or len(" ".join(words[start:])) <= last


def banner_lines(text: str, width: int, last: int) -> list[str]:
    """``text`` on as few lines of ``width`` cells as it takes with its last line
    at most ``last`` cells (room for what sits at its end), each line ending after
    a part of the sentence where the same number of lines allows it.  The lines
    depend on the widths only."""
    words = text.split()
    width, last = max(1, width), max(1, min(last, width))
    if not words or max(map(len, words)) > last:
        # a word longer than a line (a long file name): folded where it must be
        return [text[a:b] for a, b in render.line_spans(text, last)]
    count = 1
    while not _fits(words, 0, count, width, last):
        count += 1
    out: list[str] = []
    start = 0
    while start < len(words):
        left = count - len(out) - 1  # the lines after this one
        if left == 0:
            out.append(" ".join(words[start:]))
            break
        end = _line_end(words, start, width)
        for marks in BANNER_BREAKS:
            ends = [
                k
                for k in range(end, start, -1)
                if words[k - 1][-1] in marks
                and len(" ".join(words[start:k])) * 2 >= width  # at least half a line
                and _fits(words, k, left, width, last)
            ]
            if ends:
                end = ends[0]
                break
        out.append(" ".join(words[start:end]))
        start = end
    return out


class BannerPanel(TextPanel):
    """Says, at all times, that the data is a recording and not this machine; on
    the right, where a replay is (snapshot/total, the pass after it looped), in a
    column as wide as that ever gets: the text's lines do not move as it counts."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.message = ""
        #: the width kept for the replay's position (it only grows)
        self.status_width = 0

    def on_mount(self) -> None:
        message = getattr(self.app, "recording_banner", lambda: None)()
        self.message = fmt.clean(message or "")
        self.display = bool(message)
        if message and callable(getattr(self.app, "replay_status", None)):
            # The progress moves on under every screen, not only the monitor's.
            self.set_interval(1.0, self.redraw)

    def build(self, width: int) -> Text:
        status = getattr(self.app, "replay_status", lambda: None)()
        if status:
            widest = getattr(self.app, "replay_status_width", lambda: 0)()
            self.status_width = max(self.status_width, widest, len(status))
        right = f" {status:>{self.status_width}} " if status else ""
        # Whole words on as many lines as it takes (a long file name is folded):
        # the banner is what says that none of this is this machine now.  The
        # replay's position ends its last line.
        lines = banner_lines(self.message.strip(), width - 1, width - 1 - len(right))
        if len(lines) > BANNER_LINES:
            lines = lines[:BANNER_LINES]
            lines[-1] = fmt.truncate(lines[-1] + " …", width - 1 - len(right))
        text = Text(style="bold black on yellow")
        for i, line in enumerate(lines):
            if i:
                text.append("\n")
            if i < len(lines) - 1:
                text.append(" " + line.ljust(width - 1))
            else:
                text.append(" " + line.ljust(max(0, width - 1 - len(right))))
                text.append(right[:width])  # in the text's own style, as the message
        return text


class HostPanel(TextPanel):
    """CPU, memory, swap, load and uptime; one line when ``compact``."""

    def __init__(self, *, id: str | None = None, ascii_only: bool = False) -> None:
        super().__init__(id=id)
        self.host = HostSnapshot()
        self.compact = False
        self.ascii_only = ascii_only

    def show(self, host: HostSnapshot) -> None:
        self.host = host
        self.redraw()

    def _mem(self, used: int | None, total: int | None) -> tuple[float | None, str]:
        frac = used / total if used is not None and total else None
        return frac, f"{fmt.size(used)}/{fmt.size(total)}"

    def _compact_bar(self, used: int | None, total: int | None, width: int) -> Text:
        """A memory bar of the one-line panel: used/total over the bar, or where
        that does not fit, the sizes' short form, else the share."""
        frac, label = self._mem(used, total)
        return render.bar(
            frac,
            width,
            self.ascii_only,
            label=label,
            fallback=(
                fmt.size_pair(used, total),
                fmt.pct(None if frac is None else frac * 100, 4),
            ),
        )

    def build(self, width: int) -> Text:
        return Text("\n").join(self.build_lines(width))

    def build_lines(self, width: int) -> list[Text]:
        h = self.host
        mem_frac, mem_label = self._mem(h.mem_used_bytes, h.mem_total_bytes)
        swap_frac, swap_label = self._mem(h.swap_used_bytes, h.swap_total_bytes)
        load = (
            "N/A"
            if h.load_1 is None
            else f"{h.load_1:.1f} {h.load_5 or 0:.1f} {h.load_15 or 0:.1f}"
        )
        cpu_label = fmt.pct(h.cpu_pct, 4)
        if self.compact:
            bar_w = max(6, (width - 53) // 3)
            line = Text()
            line.append("CPU ", style="bold")
            line.append_text(render.bar(_frac(h.cpu_pct), bar_w, self.ascii_only, label=cpu_label))
            line.append(" MEM ", style="bold")
            line.append_text(self._compact_bar(h.mem_used_bytes, h.mem_total_bytes, bar_w))
            # swap as the host panel and --once say it: used/total (0B/0B: none)
            line.append(" SWAP ", style="bold")
            line.append_text(self._compact_bar(h.swap_used_bytes, h.swap_total_bytes, bar_w))
            line.append(f" load {load} up {fmt.duration(h.uptime_s)}")
            return [line]
        bar_w = max(6, width - 6)
        return [
            Text.assemble(
                (fmt.clean(h.hostname or "host", 128), "bold"),
                f"  {h.cpu_count or '?'} CPUs  up {fmt.duration(h.uptime_s)}",
            ),
            Text.assemble(
                ("CPU  ", "bold"),
                render.bar(_frac(h.cpu_pct), bar_w, self.ascii_only, label=cpu_label),
            ),
            Text.assemble(
                ("MEM  ", "bold"), render.bar(mem_frac, bar_w, self.ascii_only, label=mem_label)
            ),
            Text.assemble(
                ("SWAP ", "bold"), render.bar(swap_frac, bar_w, self.ascii_only, label=swap_label)
            ),
            Text(f"load {load}"),
        ]


def _frac(pct: float | None) -> float | None:
    return None if pct is None else pct / 100.0


class HistoryPanel(TextPanel):
    """One sparkline per GPU for the selected metric, plus host CPU and memory."""

    def __init__(self, *, id: str | None = None, ascii_only: bool = False) -> None:
        super().__init__(id=id)
        self.history: History | None = None
        self.devices: tuple[DeviceSnapshot, ...] = ()
        self.metric = "util"
        self.interval_s = 1.0
        self.ascii_only = ascii_only

    def show(
        self, history: History, devices: tuple[DeviceSnapshot, ...], interval_s: float
    ) -> None:
        self.history = history
        self.devices = devices
        self.interval_s = interval_s
        self.redraw()

    def points(self) -> int:
        if self.history is None:
            return 2
        return self.history.window_points(GRAPH_WINDOW_S)

    def build(self, width: int) -> Text:
        return Text("\n").join(self.build_lines(width))

    def build_lines(self, width: int) -> list[Text]:
        label, maximum, unit = GPU_METRICS[self.metric]
        history = self.history
        points = self.points()  # walks the time axis: once per build
        span = history.span_s(points) if history else None
        title = graph_title(label, f"last {fmt.duration(span) if span else '-'}", width)
        if history is None:
            return [title]
        graph_w = max(8, width - 12)
        lines = [title]
        for device in self.devices:
            values = tail(history.gpu_series(device.uuid, self.metric), points)
            top = maximum
            if self.metric == "power" and not device.power_limit_w:
                present = [v for v in values if v is not None]
                top = max(present) if present else None
            elif self.metric == "power":
                top = device.power_limit_w
            current = values[-1] if values else None
            line = Text(f"GPU{device.index:<2} ", style="bold")
            if self.metric in ("tensor", "sm") and not device.gpm_supported:
                line.append("not available on this GPU (no GPM)", style="dim")
                lines.append(line)
                continue
            style = "magenta" if self.metric == "tensor" else "cyan"
            line.append_text(render.sparkline(values, graph_w, top, self.ascii_only, style))
            line.append(_value(current, unit).rjust(6))
            lines.append(line)
        for name, series_name in (("CPU", "cpu"), ("MEM", "mem")):
            series = history.host.get(series_name)
            values = tail(series, points) if series is not None else []
            line = Text(f"{name:<6}", style="bold")
            line.append_text(render.sparkline(values, graph_w, 100.0, self.ascii_only, "green"))
            line.append(_value(values[-1] if values else None, "%").rjust(6))
            lines.append(line)
        return lines


def graph_title(label: str, span: str, width: int) -> Text:
    """The graphs' title in ``width`` cells, whole parts only: the key's hint
    gives way first, then the word "History", then the span; the metric stays."""
    for head, rest in (
        (f"History: {label}", f"  {span}  (m: metric)"),
        (f"History: {label}", f"  {span}"),
        (label, f"  {span}"),
        (label, ""),
    ):
        if len(head) + len(rest) <= width:
            break
    return Text.assemble((head, "bold"), (rest, "dim"))


def _value(value: float | None, unit: str) -> str:
    if value is None:
        return "N/A"
    return f"{value:.0f}{unit}"


class FindingsBar(TextPanel):
    """The most severe finding in one line, with a count of the rest."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.items: list[Finding] = []

    def show(self, items: list[Finding]) -> None:
        if items is self.items:
            return  # the same findings (they are not worked out at every sample)
        self.items = items
        self.redraw()

    def build(self, width: int) -> Text:
        if not self.items:
            return Text(" no findings", style="dim green")
        more = (
            f"  (+{len(self.items) - 1} more, f: all)" if len(self.items) > 1 else "  (f: details)"
        )
        # Whole words: the title, then as much of the evidence as fits whole.
        text = render.finding_line(self.items[0], width - len(more), scope=True)
        text.append(more, style="dim")
        return text


def header_state_from(snapshot: Snapshot, state: HeaderState) -> None:
    """The header's values from a snapshot, cleaned: a recording's host name and
    driver strings are whatever its file says."""
    state.hostname = fmt.clean(snapshot.host.hostname, 128)
    state.driver = (
        None if snapshot.driver_version is None else fmt.clean(snapshot.driver_version, 64)
    )
    state.cuda = (
        None
        if snapshot.cuda_driver_version is None
        else fmt.clean(snapshot.cuda_driver_version, 64)
    )
    state.n_gpus = len(snapshot.devices)
    state.latency_ms = snapshot.sample_latency_ms
    state.error = snapshot.error
