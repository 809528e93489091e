"""The attach screen's header: the job, its environment, its throughput, and
the connection's and the profiler's state."""

from __future__ import annotations

from rich.text import Text

from gputui import fmt
from gputui.protocol import messages
from gputui.reports import compile as compile_text
from gputui.reports import mfu as mfu_text
from gputui.session.attach import AttachView
from gputui.tui.attach.view_panel import ViewPanel
from gputui.tui.render import join_parts


class AttachHeader(ViewPanel):
    """Job, environment, throughput, and the connection and profiler state."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
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
        if stats.excluded_warmup:
            parts.append((f"{stats.excluded_warmup} warm-up steps left out", "magenta"))
        # The job's own errors are worth a cut line more than nothing.
        join_parts(text, parts, width, cut=True)
        return text
