"""The attach screen's memory panel: the allocator's allocated, reserved and
peak bytes over time, and the baseline's growth per step (the memory snapshot
is :mod:`gputui.tui.attach.memory_snapshot`)."""

from __future__ import annotations

from rich.text import Text

from gputui import fmt
from gputui.tui import render
from gputui.tui.attach.view_panel import ViewPanel
from gputui.tui.render import join_parts


class MemoryPanel(ViewPanel):
    """Allocated / reserved / peak over time and the growth per step."""

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
                f"{fmt.signed_size(mem.growth.per_step_bytes)}/step",
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
