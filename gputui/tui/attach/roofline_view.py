"""The roofline screen of ``gputui attach`` (key ``l``): the top ops of the latest
capture recorded with FLOPs and shapes, each with its achieved TFLOP/s, bandwidth,
arithmetic intensity and % of what the GPU's roof allows, and the ops placed on a
log-log plot under the ceilings.

On a live job with no such capture yet, opening it asks for one
(:data:`CAPTURE_STEPS` steps; ``p`` asks again).  The roof is the GPU's ceilings
measured by ``gputui bench`` (cached per UUID), else its datasheet.
"""

from __future__ import annotations

from rich.text import Text
from textual.binding import Binding

from gputui import fmt
from gputui.analysis.evidence import roofline_of
from gputui.reports import roofline as roofline_text
from gputui.session.attach import StateSnapshot, capture_busy, capture_progress
from gputui.session.feeds import CAPTURE_STEPS
from gputui.tui.attach.capture_panels import PERFETTO
from gputui.tui.attach.subscreen import (
    PanelScreen,
    StatePanel,
    ask_capture,
    cpu_job,
)
from gputui.tui.render import hanging, lead_width

TOP = 10
_BOUND_STYLE = {"memory": "yellow", "compute": "green"}


def roofline_text_of(snap: StateSnapshot, width: int, ascii_only: bool, live: bool) -> Text:
    """The screen's text for one state snapshot (plain values in, Rich text out)."""
    text = Text()
    progress = capture_progress(snap)
    if progress:
        text.append(fmt.clean(progress) + "\n\n", style="cyan")
    cap = snap.capture
    if cpu_job(snap):
        # gputui bench measures a CUDA device: nothing there applies to this job.
        text.append("no roofline for a CPU job: ", style="yellow")
        text.append(
            "it places GPU kernels under a GPU's compute and memory ceilings, and this "
            "job runs on no CUDA device.\n\n"
        )
        text.append("Where a CPU job's time goes: ", style="bold")
        text.append("the step phases on the attach screen (esc), and its CPU ops: ")
        text.append(
            "p there profiles 5 steps, o shows their ops by self time, and the trace "
            f"file opens in {PERFETTO}."
            if live
            else "o there shows a capture's ops by self time, and its trace file opens "
            f"in {PERFETTO}."
        )
        return text
    if snap.roof is None:
        if snap.hello is None:
            text.append("waiting for the job's hello", style="dim")
            return text
        device = snap.hello.device
        name = fmt.clean(device.name if device is not None and device.name else "this GPU", 60)
        text.append(f"no ceilings known for {name}: ", style="yellow")
        text.append("gputui bench on the job's machine measures them (once per GPU)")
        return text
    if cap is None or not cap.op_rows:
        if cap is not None and not cap.options.flops:
            text.append("the latest capture was recorded without FLOPs and shapes. ")
        if live:
            text.append("p captures ", style="bold")
            text.append(f"{CAPTURE_STEPS} steps with FLOPs and shapes for the roofline")
        else:
            text.append("this recording has no capture with FLOPs", style="yellow")
        return text
    report = roofline_of(cap.op_rows, snap.roof)
    assert report is not None
    steps = f"steps {cap.first_step}..{cap.last_step}"
    text.append(f"capture {steps}: {len(cap.op_rows)} op signatures\n", style="dim")
    lines = roofline_text.lines(report, max(60, width), TOP)
    header_rows = len(roofline_text.header(report)) + 1
    for i, line in enumerate(lines):
        if ascii_only:
            line = line.replace("·", "*")
        style = ""
        if i < header_rows:
            style = "bold" if i == 0 or i == header_rows - 1 else ""
        else:
            for bound, colour in _BOUND_STYLE.items():
                if f" {bound} " in line and line[:3].strip().isdigit():
                    style = colour
        text.append(line + "\n", style=style)
    return text


class RooflinePanel(StatePanel):
    def build(self, width: int) -> Text:
        text = roofline_text_of(self.state.snapshot(), width, self.ascii_only, self.live)
        return hanging(text, width, lead_width)


class RooflineScreen(PanelScreen):
    """The latest capture's top ops on the roofline; asks for a capture with FLOPs
    on open when there is none (live)."""

    PANEL = RooflinePanel
    ID = "roof"
    KEY = "l"
    REQUEST = Binding("p", "capture", "Capture with FLOPs")

    def wants_request(self, snap: StateSnapshot) -> bool:
        # a capture under way (the automatic one, with FLOPs) fills the view: none asked
        no_rows = snap.capture is None or not snap.capture.op_rows
        return snap.roof is not None and no_rows and not capture_busy(snap)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == self.REQUEST_ACTION and cpu_job(self.state.snapshot()):
            return False  # FLOPs of a CPU job: no roof to place them under
        return super().check_action(action, parameters)

    def action_capture(self) -> None:
        ask_capture(self, self.feed, self.state, flops=True)
