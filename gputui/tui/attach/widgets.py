"""The attach screen's job and step panels: header, step bars, phase table,
memory.  Each draws one :class:`AttachView` (plain values) as Rich Text through
:class:`TextPanel`, so an unchanged panel is not repainted.  The capture panels
are in :mod:`gputui.tui.attach.capture_panels`."""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.text import Text

from gputui import fmt
from gputui.analysis.live_account import MEASURED, REST, LiveAccount
from gputui.analysis.steps import SLOW_FACTOR, Dist
from gputui.protocol import messages
from gputui.protocol.trace_metrics import ACCOUNT_BUCKETS
from gputui.reports import compile as compile_text
from gputui.reports import mfu as mfu_text
from gputui.session.attach import AttachView, StepColumn
from gputui.tui import render
from gputui.tui.render import join_parts
from gputui.tui.widgets.text_panel import TextPanel

PHASE_STYLES = {
    "data": "yellow",
    "forward": "green",
    "backward": "cyan",
    "comm": "blue",
    "optimizer": "magenta",
    "other": "bright_black",
}
USER_STYLES = ("bright_red", "bright_blue", "orange3", "bright_green", "plum2")


def phase_style(name: str, order: Sequence[str]) -> str:
    if name in PHASE_STYLES:
        return PHASE_STYLES[name]
    users = [p for p in order if p not in PHASE_STYLES]
    index = users.index(name) if name in users else 0
    return USER_STYLES[index % len(USER_STYLES)]


def phase_letter(name: str) -> str:
    """The ASCII-mode fill of a phase: its initial (``:`` for other)."""
    first = name[:1]
    if name == "other":
        return ":"
    return first if first.isascii() and first.isprintable() and first != " " else "?"


def signed_size(value: float) -> str:
    sign = "+" if value >= 0 else "-"
    return sign + fmt.size(abs(value))


# -- header ------------------------------------------------------------------------------
class AttachHeader(TextPanel):
    """Job, environment, throughput, and the connection and profiler state."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.view: AttachView | None = None
        self.label = ""
        self.pid: int | None = None
        #: esc goes back to the monitor (this screen was opened from it)
        self.can_go_back = False
        self.is_replay = False
        self.replay_note = ""

    def build(self, width: int) -> Text:
        v = self.view
        snap = v.snap if v else None
        hello = snap.hello if snap else None
        line1 = Text()
        line1.append(" gputui attach ", style="bold reverse")
        pid = hello.pid if hello else self.pid
        line1.append(f" pid {pid if pid is not None else '?'} ", style="bold")
        right = Text()
        if v is not None:
            right.append(" " + fmt.clock(v.now_s, with_date=self.is_replay) + " ")
        label = "" if self.label == f"pid {pid}" else fmt.clean(self.label)
        command = fmt.clean_all(hello.argv) if hello else label
        room = width - len(line1) - len(right)
        line1.append(fmt.truncate(command, room).ljust(max(0, room)))
        line1.append_text(right)
        lines = [line1, self._environment(v, width), self._state_line(v, width)]
        return Text("\n").join(lines)

    def _environment(self, v: AttachView | None, width: int) -> Text:
        text = Text(" ")
        hello = v.snap.hello if v else None
        if v is None or hello is None:
            text.append("waiting for the job's hello", style="dim")
            return text
        parts: list[tuple[str, str]] = []
        device = hello.device
        if device:
            name = fmt.gpu_name(device.name or "GPU")
            parts.append((f"{name} (cuda:{device.index})", "bold"))
        else:
            parts.append(("CPU (no CUDA device)", "bold"))
        parts.append((f"torch {fmt.clean(hello.torch or '-', 64)}", ""))
        if hello.cuda:
            parts.append((f"CUDA {fmt.clean(hello.cuda, 32)}", ""))
        if hello.world_size is not None or hello.rank is not None:
            rank = "?" if hello.rank is None else hello.rank
            world = "?" if hello.world_size is None else hello.world_size
            parts.append((f"rank {rank}/{world}", "bold"))
        else:
            parts.append(("rank -/-", "dim"))
        if hello.started:
            parts.append((f"up {fmt.duration(v.now_s - hello.started)}", ""))
        parts.append((f"python {fmt.clean(hello.python, 32)}", "dim"))
        join_parts(text, parts, width)
        return text

    def _state_line(self, v: AttachView | None, width: int) -> Text:
        text = Text(" ")
        snap = v.snap if v else None
        if snap is None or snap.connecting:
            text.append(f"connecting to pid {self.pid} ...", style="bold yellow")
            return text
        if snap.connect_error and snap.hello is None:
            text.append(" NOT CONNECTED ", style="bold reverse red")
            keys = "  r: retry" + ("  esc: back" if self.can_go_back else "")
            why = fmt.clean(snap.connect_error).removeprefix("gputui attach: ")
            text.append(fmt.truncate(f" {why}", max(10, width - len(text) - len(keys) - 1)))
            text.append(keys, style="dim")
            return text
        if snap.disconnected is not None and not self.is_replay:
            text.append(" DISCONNECTED ", style="bold reverse red")
            keys = "  r: reconnect" + ("  esc: back" if self.can_go_back else "")
            # The reason, then why a reconnect failed, fitted before the keys: the
            # keys are what the user needs next, so they are never cut.
            room = max(10, width - len(text) - len(keys) - 1)
            reason = fmt.clean(snap.disconnected.reason)
            if snap.connect_error:
                why = fmt.clean(snap.connect_error).removeprefix("gputui attach: ")
                line = f" {why} (last data kept)"
                style = "bold red"
            else:
                line = f" {reason}; last data kept"
                style = "bold"
            text.append(fmt.truncate(line, room), style=style)
            text.append(keys, style="dim")
            return text
        assert v is not None
        parts: list[tuple[str, str]] = []
        status = snap.status
        last = snap.steps[-1].index if snap.steps else -1
        total = max(status.steps if status else 0, last + 1)
        parts.append((f"{total:,} steps", "bold"))
        stats = v.stats
        if stats.steps_per_s is not None:
            parts.append((f"{stats.steps_per_s:.1f} steps/s", "bold cyan"))
        if stats.samples_per_s is not None:
            approx = "~" if stats.samples_inferred else ""
            parts.append((f"{approx}{stats.samples_per_s:,.0f} samples/s", "bold cyan"))
        if v.utilisation is not None:
            parts.append((mfu_text.short(v.utilisation), "bold cyan"))
        if snap.compile_report is not None:
            parts.append((compile_text.short(snap.compile_report), "yellow"))
        compile_note = compile_text.unavailable(snap.compile_report, snap.status)
        if compile_note is not None:
            parts.append((compile_note, "dim"))
        if self.is_replay:
            parts.append((self.replay_note or "replay", "bold yellow"))
        else:
            dot = "*" if getattr(self.app, "ascii_only", False) else "●"
            parts.append((f"{dot} connected" if snap.synced else f"{dot} connecting", "green"))
        if status is not None:
            dropped = status.dropped + snap.missed
            parts.append((f"{dropped:,} dropped", "bold red" if dropped else "dim"))
            if status.capture.state in messages.CAPTURE_ACTIVE:
                parts.append(("profiler busy", "bold yellow"))
            else:
                parts.append(("profiler idle", "dim"))
            if status.errors:
                errors = fmt.clean("; ".join(status.errors))
                parts.append((f"hook errors: {errors}", "bold red"))
            if status.phases_coarse:
                reasons = fmt.clean(", ".join(status.coarse_reasons)) or "see gputui attach --once"
                parts.append((f"coarse phases: {reasons}", "yellow"))
        for message in snap.hook_messages[-1:]:
            parts.append((f"hook: {fmt.clean(message)}", "red"))
        if stats.excluded_profiled:
            parts.append((f"{stats.excluded_profiled} profiled steps left out", "magenta"))
        if stats.excluded_compile:
            parts.append((f"{stats.excluded_compile} compiling steps left out", "magenta"))
        # The job's own errors are worth a cut line more than nothing.
        join_parts(text, parts, width, cut=True)
        return text


# -- steps ---------------------------------------------------------------------------------
class StepBars(TextPanel):
    """The newest steps as stacked columns by phase, their marks, history and outliers."""

    def __init__(self, *, id: str | None = None, ascii_only: bool = False) -> None:
        super().__init__(id=id)
        self.view: AttachView | None = None
        self.ascii_only = ascii_only
        self.bar_rows = 9
        self.history_rows = 2

    def build(self, width: int) -> Text:
        v = self.view
        title = Text()
        mode = "GPU" if v is not None and v.gpu_mode else "wall"
        title.append(f"Step {mode}", style="bold")
        if v is None or not v.columns:
            title.append("  waiting for steps", style="dim")
            return title
        cols = v.columns[-max(1, width) :]
        top = _scale(cols)
        extra = [
            (f"{len(cols)} steps, top {fmt.ms(top)}", "dim"),
            ("P", "bold magenta"),
            ("profiled", "dim"),
            ("w", "bold yellow"),
            ("warm-up", "dim"),
            ("!", "bold red"),
            (f">{SLOW_FACTOR:g}x p50", "dim"),
        ]
        title.append("  ")
        join_parts(title, extra, width)
        lines = [title]
        lines.extend(self._bars(cols, top, v.phases))
        lines.append(self._marks(cols))
        lines.extend(self._history(v, width))
        lines.append(self._outliers(v, width))
        return Text("\n").join(lines)

    def _bars(self, cols: Sequence[StepColumn], top: float, order: Sequence[str]) -> list[Text]:
        height = self.bar_rows
        grid: list[list[tuple[str, str]]] = [[] for _ in range(height)]
        styles = {name: phase_style(name, order) for name in order}
        for col in cols:
            cells = _column_cells(col, top, height, styles, self.ascii_only)
            for row in range(height):
                grid[row].append(cells[row])
        # Runs of one style become one span: ~10x fewer spans than cells.
        lines = []
        for row in reversed(range(height)):
            text = Text()
            run_style = ""
            run: list[str] = []
            for char, style in grid[row]:
                if style != run_style and run:
                    text.append("".join(run), style=run_style)
                    run = []
                run_style = style
                run.append(char)
            if run:
                text.append("".join(run), style=run_style)
            lines.append(text)
        return lines

    def _marks(self, cols: Sequence[StepColumn]) -> Text:
        text = Text()
        for col in cols:
            if col.profiled:
                text.append("P", style="bold magenta")
            elif col.warmup:
                text.append("w", style="bold yellow")
            elif col.slow:
                text.append("!", style="bold red")
            else:
                text.append(" ")
        return text

    def _history(self, v: AttachView, width: int) -> list[Text]:
        stats = v.stats
        top = None
        if stats.wall is not None and math.isfinite(stats.wall.p99):
            # The p99 sets the scale: a 2 s warm-up step must not flatten the graph.
            top = stats.wall.p99 * 1.5
        graph_w = max(8, width - 15)
        rows = [("wall", v.history_wall, "cyan")]
        if v.history_gpu and self.history_rows > 1:
            rows.append(("GPU", v.history_gpu, "green"))
        lines = []
        for label, values, style in rows[: self.history_rows]:
            line = Text(f"{label:<5}", style="bold")
            line.append_text(render.sparkline(list(values), graph_w, top, self.ascii_only, style))
            line.append(fmt.ms(values[-1] if values else None).rjust(9))
            lines.append(line)
        return lines

    def _outliers(self, v: AttachView, width: int) -> Text:
        text = Text()
        p50 = v.stats.wall.p50 if v.stats.wall is not None else None
        if not v.outliers:
            p50_text = fmt.ms(p50)
            text.append(
                render.first_fitting(
                    width,
                    f"no outliers (slower than {SLOW_FACTOR:g}x p50 {p50_text}) in the window",
                    f"no outliers (slower than {SLOW_FACTOR:g}x p50 {p50_text})",
                    f"no outliers (>{SLOW_FACTOR:g}x p50 {p50_text})",
                    "no outliers",
                ),
                "dim",
            )
            return text
        text.append("outliers ", style="bold")
        parts = []
        for o in v.outliers:
            if o.why == "slow" and p50:
                parts.append((f"#{o.index} {fmt.ms(o.wall_s)} ({o.wall_s / p50:.0f}x p50)", "red"))
            else:
                parts.append((f"#{o.index} {fmt.ms(o.wall_s)} {o.why}", "yellow"))
        join_parts(text, parts, width)
        return text


def _scale(cols: Sequence[StepColumn]) -> float:
    """Bar height: the tallest ordinary step, so outliers are clipped, not the norm."""
    ordinary = [c.total_s for c in cols if not (c.warmup or c.slow or c.profiled)]
    values = ordinary or [c.total_s for c in cols]
    top = max(values) if values else 0.0
    return top * 1.05 if top > 0 else 1e-9


def _column_cells(
    col: StepColumn, top: float, height: int, styles: dict[str, str], ascii_only: bool
) -> list[tuple[str, str]]:
    """(char, style) from the bottom row up, in eighths of a cell.  Each cell takes
    the phase at its middle; the top cell is a partial block.  Hot at 1,000 steps/s
    (every column is new each frame), hence the plain loop."""
    units = height * 8
    scale = units / top
    total = col.total_s * scale
    segments = col.segments
    if not segments:
        return [_BLANK] * height
    bounds = []
    acc = 0.0
    for _name, seconds in segments:
        acc += seconds * scale
        bounds.append(acc)
    last = len(bounds) - 1
    k = 0
    cells: list[tuple[str, str]] = []
    for row in range(height):
        low = row * 8
        if total <= low + 0.5:
            cells.extend([_BLANK] * (height - row))
            break
        if row == height - 1 and total > units:
            cells.append(_CLIP_ASCII if ascii_only else _CLIP)
            break
        filled = total - low
        if filled > 8.0:
            filled = 8.0
        middle = low + filled / 2
        while k < last and middle >= bounds[k]:
            k += 1
        name = segments[k][0]
        style = styles.get(name, "")
        if ascii_only:
            cells.append((phase_letter(name) if filled >= 4 else " ", style))
        else:
            eighths = round(filled)
            cells.append((render.EIGHTHS[eighths if eighths > 0 else 1], style))
    return cells


_BLANK = (" ", "")
_CLIP = ("▲", "bold red")
_CLIP_ASCII = ("^", "bold red")


class PhaseTable(TextPanel):
    """p50 / p90 / p99 and the share of each phase, plus the whole step, and the
    step's time account as a stacked bar (its legend too, unless ``compact``)."""

    def __init__(self, *, id: str | None = None, ascii_only: bool = False) -> None:
        super().__init__(id=id)
        self.view: AttachView | None = None
        self.ascii_only = ascii_only
        self.compact = False

    def build(self, width: int) -> Text:
        v = self.view
        head = Text()
        mode = "GPU" if v is not None and v.gpu_mode else "wall"
        count = v.stats.count if v else 0
        head.append(f"{mode + ' (ms)':<12}", style="bold")
        head.append(f"{'p50':>7}{'p90':>7}{'p99':>7}  share", style="bold")
        if v is None or not count:
            return Text("\n").join([head, Text("no steps yet", style="dim")])
        stats = v.stats
        phases = stats.gpu_phases if v.gpu_mode else stats.phases
        total = stats.gpu if v.gpu_mode else stats.wall
        lines = [head]
        bar_w = max(4, width - 41)
        for d in phases:
            style = phase_style(d.name, v.phases)
            line = Text()
            # the legend shows each phase as the chart draws it
            swatch = phase_letter(d.name) if self.ascii_only else "█"
            line.append(swatch + " ", style=style)
            line.append(f"{fmt.truncate(fmt.clean(d.name, 64), 10):<10}")
            line.append(_percentiles(d) + "  ")
            line.append_text(render.bar(d.share, bar_w, self.ascii_only, style=style))
            line.append(f"{d.share * 100:5.1f}%")
            lines.append(line)
        if total is not None:
            line = Text()
            line.append(f"  {'step':<10}", style="bold")
            line.append(_percentiles(total), style="bold")
            line.append(f"  {count} steps", style="dim")
            lines.append(line)
        if v.account is not None and not v.gpu_mode:
            lines.extend(account_lines(v.account, width, self.ascii_only, self.compact))
        return Text("\n").join(lines)


def _percentiles(d: Dist) -> str:
    """p50, p90 and p99 in milliseconds, seven cells each."""
    return "".join(f"{fmt.ms(x, unit=False):>7}" for x in (d.p50, d.p90, d.p99))


#: how the step account's buckets are drawn: colour, letter in ASCII mode, and
#: name in the legend (in the order of ACCOUNT_BUCKETS, then the unsplit rest)
_BUCKETS = (*ACCOUNT_BUCKETS, REST)
_COLOURS = ("yellow", "magenta", "cyan", "red", "blue", "green", "bright_red", "grey50")
_LETTERS = ("d", "u", "c", "s", "l", "t", "p", ".")
_NAMES = ("data", "user", "comm", "sync", "launch", "dispatch", "python", "unsplit")
ACCOUNT_STYLE = {
    b: (c, x, n) for b, c, x, n in zip(_BUCKETS, _COLOURS, _LETTERS, _NAMES, strict=True)
}


def account_lines(
    acct: LiveAccount, width: int, ascii_only: bool = False, compact: bool = False
) -> list[Text]:
    """The step's account as one stacked bar and (unless ``compact``) its legend:
    each bucket's share, the ones the hook measures on every step marked ``*``,
    the others said to come from the capture they were measured in."""
    bar = Text("acct ", style="bold")
    bar_w = max(8, width - len(bar))
    used = 0
    order = acct.ordered
    for i, b in enumerate(order):
        style, letter, _name = ACCOUNT_STYLE[b]
        cells = bar_w - used if i == len(order) - 1 else round(acct.share(b) * bar_w)
        cells = max(0, min(cells, bar_w - used))
        used += cells
        bar.append((letter if ascii_only else "█") * cells, style=style)
    legend = Text("  ")
    for b in order:
        style, letter, name = ACCOUNT_STYLE[b]
        mark = "*" if b in MEASURED else ""
        legend.append((letter if ascii_only else "█") + " ", style=style)
        pct = acct.share(b) * 100
        legend.append(f"{name}{mark} " + (f"{pct:.0f}%  " if pct >= 1 else "<1%  "))
    where = (
        f"*every step; others from capture at step {acct.capture_step}"
        if acct.capture_step is not None
        else "*every step"
    )
    legend.append(where, style="dim")
    return [bar] if compact else [bar, render.hanging(legend, width, 2)]


# -- memory --------------------------------------------------------------------------------
class MemoryPanel(TextPanel):
    """Allocated / reserved / peak over time and the growth per step."""

    def __init__(self, *, id: str | None = None, ascii_only: bool = False) -> None:
        super().__init__(id=id)
        self.view: AttachView | None = None
        self.ascii_only = ascii_only
        self.compact = False

    def build(self, width: int) -> Text:
        v = self.view
        mem = v.memory if v else None
        title = Text("Memory", style="bold")
        if v is None or mem is None:
            hello = v.snap.hello if v else None
            if hello is not None and not hello.cuda_in_use:
                note = render.first_fitting(
                    width - len(title) - 2,
                    "no CUDA memory: the job does not use CUDA",
                    "none: the job does not use CUDA",
                    "no CUDA",
                )
                title.append(f"  {note}", style="dim")
            else:
                title.append("  no samples yet", style="dim")
            return title
        m = mem.latest
        total = mem.total_bytes
        of_total = f"/{fmt.size(total)}" if total else ""
        growth = Text()
        if mem.growth is None:
            growth.append("growth: -", style="dim")
        else:
            style = "bold reverse red" if mem.growing else "dim"
            growth.append(
                f"{'GROWING ' if mem.growing else 'growth '}"
                f"{signed_size(mem.growth.per_step_bytes)}/step",
                style=style,
            )
        alarms = Text()
        if m.alloc_retries or m.ooms:
            alarms.append(f" retries {m.alloc_retries} OOMs {m.ooms}", style="bold red")
        if self.compact:
            line = Text()
            line.append("Mem ", style="bold")
            # One line: a growing baseline or allocator trouble matter more than the peak.
            parts = [
                (f"alloc {fmt.size(m.allocated)}", ""),
                (f"resv {fmt.size(m.reserved)}{of_total}", ""),
            ]
            if mem.growing:
                parts.append((growth.plain, "bold reverse red"))
            elif len(alarms):
                parts.append((alarms.plain.strip(), "bold red"))
            else:
                parts.append((f"peak {fmt.size(m.peak_allocated)}", ""))
            join_parts(line, parts, width, self.ascii_only)
            return line
        title.append(f"  cuda:{mem.device}  reserved {fmt.size(m.reserved)}{of_total}")
        if total:
            title.append(f" ({m.reserved / total * 100:.0f}%)", style="dim")
        top = max([*mem.reserved, *mem.peak, 1.0])
        graph_w = max(8, width - 14)
        lines = [title]
        for label, values, value, style in (
            ("alloc", mem.allocated, m.allocated, "cyan"),
            ("resv", mem.reserved, m.reserved, "blue"),
            ("peak", mem.peak, m.peak_allocated, "magenta"),
        ):
            line = Text(f"{label:<6}", style="bold")
            line.append_text(render.sparkline(list(values), graph_w, top, self.ascii_only, style))
            line.append(fmt.size(value).rjust(8))
            lines.append(line)
        foot = Text()
        parts = [(growth.plain, "bold reverse red" if mem.growing else "dim")]
        if mem.growth is not None:
            parts.append((f"({mem.growth.steps:,} steps)", "dim"))
        if len(alarms):
            parts.append((alarms.plain.strip(), "bold red"))
        else:
            parts.append(("0 retries  0 OOMs", "dim"))
        join_parts(foot, parts, width, self.ascii_only)
        lines.append(foot)
        return Text("\n").join(lines)
