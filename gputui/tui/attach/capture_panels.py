"""The attach screen's capture panels: the capture line (progress, GPU busy,
trace path), the kernel-class rollup with the top CPU ops, the selected row's
full name, and the findings line."""

from __future__ import annotations

import os

from rich.text import Text

from gputui import fmt
from gputui.session.attach import AttachView
from gputui.session.autocapture import (
    ASKED,
    FAILED,
    SKIPPED,
    WAITING,
    AutoLine,
    cost_parts,
    kind_of,
)
from gputui.trace.kernels import CLASS_LABELS, CLASS_SHORT, KERNEL_CLASSES
from gputui.tui import render
from gputui.tui.attach.view_panel import ViewPanel
from gputui.tui.render import join_parts
from gputui.tui.widgets.text_panel import TextPanel

PERFETTO = "ui.perfetto.dev"


def us_text(us: float) -> str:
    return fmt.us(us)


# -- capture -------------------------------------------------------------------------------
def cost_line(view: AttachView | None, auto: AutoLine | None) -> list[tuple[str, str]]:
    """The line under the capture's, as parts: the automatic capture while it
    waits or runs (or why it did not run), else what the capture shown cost
    the job; nothing to say: no parts."""
    if auto is not None and auto.state in (WAITING, ASKED, FAILED):
        parts = [(auto.text, "yellow" if auto.state != WAITING else "dim")]
        return [*parts, (auto.detail, "dim")] if auto.detail else parts
    cap = view.capture if view is not None else None
    if view is not None and cap is not None and not (cap.replayed and view.capture_cost is None):
        result = view.snap.capture
        stop_ms = None if result is None else result.stop_ms
        automatic = cap.auto or (auto is not None and auto.capture_id == cap.id)
        first, *rest = cost_parts(view.capture_cost, stop_ms)
        parts = [(f"{kind_of(result, automatic)}: {first}", ""), *((p, "") for p in rest)]
        if auto is not None and auto.user_waits:
            parts.insert(1, ("your capture (p) goes next", "yellow"))
        elif auto is not None and auto.state == SKIPPED:
            parts.append(("(none automatic: this one is of the last 10 minutes)", "dim"))
        return parts
    if auto is not None:
        return [(auto.text, "dim")]
    return []


class CapturePanel(ViewPanel):
    """The latest capture: when, GPU busy, trace path; progress while one runs;
    the automatic capture's state, and what the capture cost the job."""

    def __init__(self, *, id: str | None = None, ascii_only: bool = False) -> None:
        super().__init__(id=id, ascii_only=ascii_only)
        self.is_replay = False
        self.show_classes = False
        #: the automatic capture's line (None: a recording, or none kept here)
        self.auto: AutoLine | None = None

    def build(self, width: int) -> Text:
        v = self.view
        first = Text()
        first.append("Capture", style="bold")
        cap = v.capture if v else None
        progress = v.capture_progress if v else None
        lines = [first]
        about = cost_line(v, self.auto)
        if cap is None:
            if progress:
                first.append(f"  {progress}", style="bold yellow")
            elif self.is_replay:
                first.append("  none in this recording", style="dim")
            else:
                first.append(
                    "  none yet: p profiles the next 5 steps (kernels, CPU ops, trace)",
                    style="dim",
                )
            if about:
                second = Text()
                join_parts(second, about, width, self.ascii_only, cut_first=True)
                lines.append(second)
            return Text("\n").join(lines)
        assert v is not None
        parts: list[tuple[str, str]] = []
        parts.append((f"steps {cap.first_step}-{cap.last_step}", ""))
        if cap.started_s is not None:
            age = fmt.duration(max(0.0, v.now_s - cap.started_s))
            parts.append((f"at {fmt.clock(cap.started_s)} ({age} ago)", ""))
        if cap.replayed:
            parts.append(("from before this viewer", "dim"))
        if cap.span_us and cap.busy_us is not None:
            busy = cap.busy_us / cap.span_us * 100
            idle = us_text(cap.span_us - cap.busy_us)
            parts.append((f"GPU busy {busy:.1f}% of {us_text(cap.span_us)}", "bold"))
            parts.append((f"idle {idle}", "dim"))
        elif not cap.kernels:
            parts.append(("CPU job: CPU ops below", "bold yellow"))
        if cap.kernel_calls:
            parts.append((f"{cap.kernel_calls:,} kernel launches", "dim"))
        if progress:
            parts.append((progress, "bold yellow"))
        elif cap.error:
            parts.append((f"error: {fmt.clean(cap.error)}", "bold red"))
        join_parts(
            first, [(" " + p, s) if i == 0 else (p, s) for i, (p, s) in enumerate(parts)], width
        )
        if about:
            second = Text()
            join_parts(second, about, width, self.ascii_only, cut_first=True)
            lines.append(second)
        if self.show_classes and cap.classes:
            classes = Text("by class ", style="bold")
            cparts = [
                (f"{CLASS_SHORT.get(name, name)} {share * 100:.0f}%", class_style(name))
                for name, _us, share in cap.classes
            ]
            join_parts(classes, cparts, width)
            lines.append(classes)
        trace = Text()
        if cap.trace_path:
            # The path is what the user copies: always whole (folded onto more
            # lines when it must be); the Perfetto hint goes first when short of room.
            trace.append("trace ", style="bold")
            path = _home_short(fmt.clean(cap.trace_path))
            hint = f"  open in {PERFETTO}"
            room = max(12, width - len(trace))
            if len(path) + len(hint) <= room:
                trace.append(path)
                trace.append(hint, style="dim")
            else:
                chunks = [path[i : i + room] for i in range(0, len(path), room)]
                trace.append(chunks[0])
                for chunk in chunks[1:]:
                    lines.append(trace)
                    trace = Text(" " * len("trace ") + chunk)
        elif cap.trace_error:
            trace.append(f"trace not written: {fmt.clean(cap.trace_error)}", style="yellow")
        if len(trace):
            lines.append(trace)
        return Text("\n").join(lines)


def class_style(name: str) -> str:
    return {
        "gemm": "green",
        "attention": "bright_green",
        "elementwise": "yellow",
        "reduction": "cyan",
        "communication": "red",
        "memcpy": "magenta",
        "memset": "magenta",
    }.get(name, "bright_black")


def _home_short(path: str) -> str:
    """``~/...`` for a path under the home directory (a shell expands it back)."""
    home = os.path.expanduser("~")
    if home not in ("", "/") and path.startswith(home + os.sep):
        return "~" + path[len(home) :]
    return path


class ClassPanel(ViewPanel):
    """GPU time by kernel class, GPU busy, and the top CPU ops (wide terminals)."""

    def __init__(self, *, id: str | None = None, ascii_only: bool = False) -> None:
        super().__init__(id=id, ascii_only=ascii_only)
        self.op_rows = 6

    def build(self, width: int) -> Text:
        v = self.view
        cap = v.capture if v else None
        title = Text("GPU time by kernel class", style="bold")
        if cap is None:
            return title
        lines = [title]
        shares = {name: (us, share) for name, us, share in cap.classes}
        bar_w = max(4, width - 28)
        if not cap.kernels:
            lines.append(Text("no GPU kernels in this capture", style="dim"))
        else:
            for name in KERNEL_CLASSES:
                us, share = shares.get(name, (0.0, 0.0))
                line = Text(f"{CLASS_LABELS.get(name, name):<14}")
                line.append_text(render.bar(share, bar_w, self.ascii_only, style=class_style(name)))
                line.append(f"{share * 100:5.1f}%{us_text(us):>8}", style="" if us else "dim")
                lines.append(line)
        if cap.cpu_ops:
            lines.append(Text("Top CPU ops (self time)", style="bold"))
            name_w = max(8, width - 15)
            for op in cap.cpu_ops[: self.op_rows]:
                line = Text(f"{fmt.truncate(fmt.clean(op.name), name_w):<{name_w}}")
                line.append(f"{us_text(op.self_us):>8}{op.share * 100:6.1f}%")
                lines.append(line)
        return Text("\n").join(lines)


class NameLine(TextPanel):
    """The full name of the selected kernel or op (the table shows short names)."""

    WRAP = True

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.full_name = ""
        self.kind = ""

    def build(self, width: int) -> Text:
        if not self.full_name:
            return Text("select a row for its full name", style="dim")
        text = Text()
        text.append(f"{self.kind}: " if self.kind else "", style="bold")
        text.append(fmt.clean(self.full_name))
        return text
