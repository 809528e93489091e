"""``gputui attach ... --once [--json]``: a hooked job's report, printed.

The report is built from events, from a live job (its history, then an
optional capture) or from an attach recording (``--replay FILE --once``: a
session a colleague sent).  Every string the job sent is untrusted: the text
report shows it through :func:`gputui.fmt.clean`; the JSON keeps it exact.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from typing import Any

from gputui import fmt, roofline_text
from gputui.analysis.engine import analyze
from gputui.analysis.evidence import (
    GPU_WINDOW,
    MIN_GPU_SAMPLES,
    MIN_STEPS,
    roofline_of,
)
from gputui.analysis.finding import Finding
from gputui.analysis.memory import memory_growth
from gputui.analysis.roofline import Roof, RooflineReport
from gputui.analysis.steps import Dist, StepStats, step_stats
from gputui.ceilings.cache import roof_for
from gputui.collectors.hook_client import (
    AttachError,
    CaptureResult,
    CaptureStatus,
    Disconnected,
    Event,
    Hello,
    HookClient,
    HookError,
    Invalid,
    MemoryBatch,
    MemorySample,
    MemorySnapshotResult,
    Status,
    StepBatch,
    StepRecord,
    Synced,
)
from gputui.session.evidence import evidence
from gputui.snapshot.model import DeviceSnapshot

#: how long the hook may take to send its history
SYNC_TIMEOUT_S = 10.0
#: memory samples kept for the growth estimate
MEMORY_POINTS = 1200


class JobFailed(AttachError):
    """The job went away, or its capture failed or was refused: the command did
    its part, the job did not (exit status 1, not the 2 of a usage error)."""

    exit_code = 1


class Collected:
    """What the report is made of: the events seen, folded."""

    def __init__(self, hello: Hello) -> None:
        self.hello = hello
        self.steps: list[StepRecord] = []
        self.missed = 0
        self.status: Status | None = None
        self.memory: list[tuple[MemorySample, int | None]] = []
        self.capture: CaptureResult | None = None
        #: the job's GPU as NVML saw it while attached (or as recorded)
        self.gpu: list[DeviceSnapshot] = []
        #: why there are no GPU samples, when there are none
        self.gpu_note: str | None = None
        self.memory_snapshot: MemorySnapshotResult | None = None
        self.disconnected: Disconnected | None = None
        self.problems: list[str] = []  # hook errors, invalid messages
        #: the job's GPU's ceilings (measured by gputui bench, else the datasheet)
        device = hello.device
        self.roof: Roof | None = None if device is None else roof_for(device.uuid, device.name)

    def add(self, event: Event) -> None:
        if isinstance(event, StepBatch):
            self.steps.extend(event.steps)
            self.missed += event.missed
        elif isinstance(event, Status):
            self.status = event
        elif isinstance(event, MemoryBatch):
            at = self.steps[-1].index if self.steps else None
            self.memory.extend((s, at) for s in event.samples)
            del self.memory[:-MEMORY_POINTS]
        elif isinstance(event, CaptureResult):
            self.capture = event
        elif isinstance(event, MemorySnapshotResult):
            self.memory_snapshot = event
        elif isinstance(event, Disconnected):
            self.disconnected = event
        elif isinstance(event, HookError):
            self.problems.append(f"hook: {event.error}")
        elif isinstance(event, Invalid):
            self.problems.append(f"skipped an invalid {event.type} message: {event.error}")

    def add_gpu(self, sample: DeviceSnapshot) -> None:
        self.gpu.append(sample)
        del self.gpu[:-GPU_WINDOW]

    @property
    def latest_memory(self) -> MemorySample | None:
        return self.memory[-1][0] if self.memory else None

    def findings(self, window: int) -> list[Finding]:
        """The analyzer's findings over the newest ``window`` steps, ranked."""
        ev = evidence(
            self.hello,
            self.status,
            self.steps,
            self.memory,
            self.capture,
            self.gpu,
            memory_snapshot=self.memory_snapshot,
            roof=self.roof,
            window=window,
        )
        return analyze(ev)

    @property
    def roofline(self) -> RooflineReport | None:
        return roofline_of(self.capture.op_rows if self.capture else (), self.roof)

    def analysis_notes(self, stats: StepStats) -> list[str]:
        """What the analyzer could not look at, so a short list reads right."""
        notes = []
        if stats.count < MIN_STEPS:
            notes.append(findings_waiting(stats.count))
        if self.hello.cuda_in_use and len(self.gpu) < MIN_GPU_SAMPLES:
            why = f" ({self.gpu_note})" if self.gpu_note else ""
            notes.append(f"GPU rules need {MIN_GPU_SAMPLES} samples of the job's GPU{why}")
        if self.capture is None:
            notes.append("kernel-level rules need a capture: --capture N")
        return notes


def findings_waiting(seen: int) -> str:
    from gputui.findings_text import waiting

    return waiting(seen, MIN_STEPS)


# -- collecting -------------------------------------------------------------------------------
def collect_live(
    client: HookClient, window: int, timeout: float, got: Collected | None = None
) -> Collected:
    """Subscribe and read the job's history until the hook says it is all sent."""
    got = got or Collected(client.hello)
    client.subscribe(history=window, memory=True)
    client.start()
    deadline = time.monotonic() + min(timeout, SYNC_TIMEOUT_S)
    while True:
        event = client.get(timeout=max(0.0, deadline - time.monotonic()))
        if event is None:
            raise JobFailed(
                f"gputui attach: job {client.pid} did not send its history within "
                f"{min(timeout, SYNC_TIMEOUT_S):g} s"
            )
        got.add(event)
        if isinstance(event, Disconnected):
            raise JobFailed(
                f"gputui attach: job {client.pid} exited while sending its history "
                f"({fmt.clean(event.reason)})"
            )
        if isinstance(event, Synced):
            return got


def capture_live(
    client: HookClient, got: Collected, request: dict[str, Any], timeout: float, quiet: bool
) -> None:
    """Ask for a capture and wait for its result (raises AttachError on failure)."""
    cid = client.request_capture(**request)
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        event = client.get(timeout=remaining) if remaining > 0 else None
        if event is None:
            try:
                client.cancel_capture()
            except AttachError:
                pass
            raise JobFailed(
                f"gputui attach: the capture did not finish within {timeout:g} s "
                "(is the job still stepping?)"
            )
        if isinstance(event, CaptureResult) and event.id != cid:
            continue  # someone else's capture (or a replay of an older one)
        got.add(event)
        if isinstance(event, Disconnected):
            raise JobFailed(
                f"gputui attach: job {client.pid} exited before the capture finished "
                f"({fmt.clean(event.reason)})"
            )
        if isinstance(event, CaptureStatus) and event.id == cid:
            if event.ended:
                reason = fmt.clean(event.reason or "no reason given")
                raise JobFailed(f"gputui attach: capture {event.state}: {reason}")
            if not quiet:
                where = "" if event.step is None else f" at step {event.step}"
                print(f"capture: {event.state}{where}", file=sys.stderr)
        if isinstance(event, CaptureResult):
            if event.error:
                raise JobFailed(f"gputui attach: capture failed: {fmt.clean(event.error)}")
            return


class GpuSampling:
    """The job's GPU (by the UUID its hook reports) sampled while the report is
    collected, for the analyzer's GPU rules: started before the history is read,
    so the two overlap; :meth:`finish` waits out the rest of ``seconds``.
    Nothing to sample (a CPU job, no driver) is said in ``got.gpu_note``."""

    def __init__(self, got: Collected, seconds: float, open_collector: Any = None) -> None:
        from gputui.collectors.gpu_watch import GpuWatch

        self.got = got
        self.seconds = seconds
        self.watch: GpuWatch | None = None
        self.started = time.monotonic()
        hello = got.hello
        if not hello.cuda_in_use or hello.device is None:
            got.gpu_note = "the job uses no CUDA device"
        elif seconds <= 0:
            got.gpu_note = "not sampled (--gpu-seconds 0)"
        else:
            # MIN_GPU_SAMPLES readings with rates need one more reading (GPM
            # and PCIe rates are differences)
            self.watch = GpuWatch(
                hello.device.uuid,
                hello.device.index,
                interval_s=max(0.1, seconds / MIN_GPU_SAMPLES),
                open_collector=open_collector,
            )
            self.watch.start()

    def finish(self) -> None:
        watch = self.watch
        if watch is None:
            return
        deadline = self.started + self.seconds + 0.15
        try:
            while watch.running and time.monotonic() < deadline:
                time.sleep(0.02)
        finally:
            watch.stop()
        for sample in watch.samples():
            self.got.add_gpu(sample)
        self.got.gpu_note = watch.reason


# -- the report ----------------------------------------------------------------------------------
def stats_of(got: Collected, window: int) -> StepStats:
    return step_stats(got.steps[-window:])


def report_dict(
    pid: int | None, got: Collected, stats: StepStats, window: int = 1000
) -> dict[str, Any]:
    """The ``--json`` document (docs/json.md: "attach --once --json")."""
    growth = memory_growth(got.memory)
    memory = got.latest_memory
    return _finite(
        {
            "pid": pid,
            "hello": got.hello.to_wire(),
            "status": None if got.status is None else got.status.to_wire(),
            "steps_received": len(got.steps),
            "missed": got.missed,
            "stats": stats.as_dict(),
            "memory": None if memory is None else memory.to_wire(),
            "memory_growth": None if growth is None else dataclasses.asdict(growth),
            "capture": None if got.capture is None else got.capture.to_wire(),
            "roofline": None if got.roofline is None else roofline_text.to_json(got.roofline),
            "gpu_samples": len(got.gpu),
            "findings": [f.to_json() for f in got.findings(window)],
            "analysis_notes": got.analysis_notes(stats),
            "memory_snapshot": _memory_snapshot(got.memory_snapshot),
            "problems": list(got.problems),
        }
    )


def _memory_snapshot(result: MemorySnapshotResult | None) -> dict[str, Any] | None:
    """The latest memory snapshot, as ``attach --memory-snapshot --json`` prints it."""
    if result is None:
        return None
    doc = result.to_wire()
    doc.pop("v", None)
    doc.pop("type", None)
    return doc


def _finite(obj: Any) -> Any:
    """JSON-safe copy: NaN and infinities (empty distributions) become null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def print_json(doc: dict[str, Any]) -> None:
    print(json.dumps(doc, indent=2, allow_nan=False))


def print_report(
    got: Collected, stats: StepStats, banner: str | None = None, window: int = 1000
) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(highlight=False)
    if banner:
        console.print(Text(banner, style="bold black on yellow"))
    h = got.hello
    head = Text()
    head.append(f"pid {h.pid}", style="bold")
    head.append("  " + fmt.clean_all(h.argv))
    console.print(head)
    env = f"python {fmt.clean(h.python, 32)}, torch {fmt.clean(h.torch or '-', 64)}"
    if h.cuda:
        env += f" (CUDA {fmt.clean(h.cuda, 32)})"
    if h.device is not None:
        env += f", device {h.device.index} {fmt.clean(h.device.name or '', 128)}"
    if h.rank is not None:
        env += f", rank {h.rank}/{h.world_size} (local {h.local_rank})"
    console.print(Text(env))
    status = got.status
    if status is not None:
        if status.errors:
            console.print(_labelled("hook errors: ", "; ".join(status.errors), "red"))
        if status.phases_coarse:
            console.print(_labelled("coarse phases: ", " ".join(status.coarse_reasons), "yellow"))
    for problem in got.problems[-3:]:
        console.print(_labelled("", problem, "red"))
    if not stats.count:
        left_out = stats.excluded_profiled
        console.print(
            "no steps recorded yet" + (f" ({left_out} profiled steps left out)" if left_out else "")
        )
    else:
        line = (
            f"steps {stats.first_index}..{stats.last_index} ({stats.count}"
            + (f", {stats.excluded_profiled} profiled left out" if stats.excluded_profiled else "")
            + (f", {got.missed} missed" if got.missed else "")
            + f"): {stats.steps_per_s:.2f} steps/s"
        )
        if stats.samples_per_s is not None:
            inferred = " (batch size inferred)" if stats.samples_inferred else ""
            line += f", {stats.samples_per_s:,.0f} samples/s{inferred}"
        console.print(Text(line))
        console.print(_dist_table("wall time (ms)", stats.wall, stats.phases, Table, Text))
        if stats.gpu is not None:
            console.print(_dist_table("GPU time (ms)", stats.gpu, stats.gpu_phases, Table, Text))
    memory = got.latest_memory
    if memory is not None:
        line = (
            f"memory (device {memory.device}): allocated {fmt.size(memory.allocated)}, "
            f"reserved {fmt.size(memory.reserved)}, peak {fmt.size(memory.peak_allocated)}, "
            f"retries {memory.alloc_retries}, OOMs {memory.ooms}"
        )
        growth = memory_growth(got.memory)
        if growth is not None:
            sign = "+" if growth.per_step_bytes >= 0 else "-"
            line += f"; baseline {sign}{fmt.size(abs(growth.per_step_bytes))}/step"
            if growth.growing:
                line += " (GROWING)"
        console.print(Text(line))
    if got.capture is not None:
        _print_capture(console, got.capture, Table, Text)
        if got.roofline is not None:
            console.print(Text("\n".join(roofline_text.lines(got.roofline))))
        elif got.capture.op_rows:
            console.print(Text("roofline: no ceilings known for this GPU: run gputui bench"))
    snap = got.memory_snapshot
    if snap is not None:
        about = Text(
            f"memory snapshot steps {snap.first_step}..{snap.last_step}: "
            f"{len(snap.growing)} growing allocation site(s)"
        )
        if snap.growing and snap.growing[0].site is not None:
            top = snap.growing[0].site
            about.append(f", top {fmt.clean(top.file)}:{top.line}")
        if snap.snapshot_path:
            about.append(f"; file {fmt.clean(snap.snapshot_path)}")
        console.print(about)
    _print_findings(console, got.findings(window), got.analysis_notes(stats))


def _print_findings(console: Any, items: list[Finding], notes: list[str]) -> None:
    from rich.text import Text

    from gputui import findings_text

    head = Text("findings", style="bold")
    head.append(
        f" ({len(items)}, ranked by the step time a fix could recover)"
        if items
        else ": nothing found that costs this job time",
        style="" if items else "green",
    )
    console.print(head)
    for note in notes:
        console.print(Text(f"  ({note})", style="dim"))
    if items:
        console.print(findings_text.blocks(items))


def _labelled(label: str, value: str, style: str) -> Any:
    from rich.text import Text

    text = Text()
    text.append(label, style=style)
    text.append(fmt.clean(value))
    return text


def _dist_table(
    title: str, total: Dist | None, phases: tuple[Dist, ...], table_cls: Any, text_cls: Any
) -> Any:
    table = table_cls(title=title, title_justify="left", box=None, header_style="bold")
    for col in ("phase", "mean", "p50", "p90", "p99", "share"):
        table.add_column(col, justify="left" if col == "phase" else "right")
    rows = list(phases) + ([total] if total is not None else [])
    for d in rows:
        table.add_row(
            text_cls(fmt.clean(d.name, 64)),
            fmt.ms(d.mean, unit=False),
            fmt.ms(d.p50, unit=False),
            fmt.ms(d.p90, unit=False),
            fmt.ms(d.p99, unit=False),
            f"{d.share * 100:.1f}%",
        )
    return table


def _print_capture(console: Any, cap: CaptureResult, table_cls: Any, text_cls: Any) -> None:
    when = " (from an earlier capture)" if cap.replay else ""
    stop = "-" if cap.stop_ms is None else f"{cap.stop_ms:g}"
    console.print(
        text_cls(
            f"capture steps {cap.first_step}..{cap.last_step}{when}: "
            f"{cap.events} events, profiler stop {stop} ms"
        )
    )
    if cap.kernels:
        table = table_cls(
            title="top GPU kernels", title_justify="left", box=None, header_style="bold"
        )
        for col in ("kernel", "class", "calls", "total ms", "mean us", "share"):
            table.add_column(col, justify="left" if col in ("kernel", "class") else "right")
        for k in cap.kernels[:15]:
            table.add_row(
                text_cls(fmt.truncate(fmt.clean(k.name), 70)),
                text_cls(fmt.clean(k.kernel_class, 16)),
                str(k.calls),
                f"{k.total_us / 1000:.3f}",
                f"{k.mean_us:.1f}",
                f"{k.share * 100:.1f}%",
            )
        console.print(table)
    g = cap.gpu_time
    if g is not None:
        console.print(
            text_cls(
                f"GPU time: span {g.span_us / 1000:.2f} ms, busy {g.busy_us / 1000:.2f} ms, "
                f"idle {g.idle_us / 1000:.2f} ms; compute {g.compute_us / 1000:.2f}, comm "
                f"{g.communication_us / 1000:.2f}, memcpy {g.memcpy_us / 1000:.2f}, memset "
                f"{g.memset_us / 1000:.2f} ms"
            )
        )
    if cap.cpu_ops:
        table = table_cls(
            title="top CPU ops (self time)", title_justify="left", box=None, header_style="bold"
        )
        for col in ("op", "calls", "self ms", "total ms", "share"):
            table.add_column(col, justify="left" if col == "op" else "right")
        for op in cap.cpu_ops[:15]:
            table.add_row(
                text_cls(fmt.truncate(fmt.clean(op.name), 70)),
                str(op.calls),
                f"{op.self_us / 1000:.3f}",
                f"{op.total_us / 1000:.3f}",
                f"{op.share * 100:.1f}%",
            )
        console.print(table)
    if cap.trace_path:
        line = text_cls("trace: ")
        line.append(fmt.clean(cap.trace_path))
        line.append(" (open in https://ui.perfetto.dev)")
        console.print(line)
    elif cap.trace_error:
        console.print(_labelled("trace not written: ", cap.trace_error, "yellow"))
