"""``gputui analyze``: the text report of one rank's trace (findings, step
breakdown, HTA's breakdowns, kernels, roofline, CPU ops)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gputui import fmt
from gputui.analysis.diagnosis import Diagnosis
from gputui.analysis.evidence import roofline_of
from gputui.analysis.finding import Finding
from gputui.analysis.ledger import Ledger
from gputui.analysis.mfu import Utilisation
from gputui.analysis.roofline import Roof
from gputui.analysis.trace_summary import (
    WINDOW_GPU,
    WINDOW_HOST,
    WINDOW_LAUNCHES,
    WINDOW_STEPS,
    TraceSummary,
)
from gputui.analysis.trace_summary import warnings as trace_warnings
from gputui.protocol.trace_metrics import STEP_CATEGORIES, StepAccount
from gputui.reports import findings as findings_text
from gputui.reports import mfu as mfu_text
from gputui.reports import roofline as roofline_text
from gputui.reports.account import lines as account_lines
from gputui.reports.kernels import kernel_table
from gputui.reports.text import output_width, plural, table, wrap, wrap_items
from gputui.trace.kernels import CLASS_LABELS, COMMUNICATION
from gputui.trace.scan import Outside


# -- text ---------------------------------------------------------------------------------------
def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}%"


_CATEGORY_LABELS = {
    "kernel": "kernel",
    "memcpy": "memcpy",
    "memset": "memset",
    "communication": "communication",
    "runtime": "CUDA runtime",
    "dataloader": "DataLoader, GPU idle",
    "cpu_op": "CPU op",
    "other": "other",
}
#: the widest the step breakdown's bars are drawn
BAR_WIDTH = 40
#: the tables' indent
_TAB = "  "


def _count(n: int) -> str:
    return f"{n:,}"


def _steps_text(steps: Sequence[int]) -> str:
    if not steps:
        return "no ProfilerStep marks"
    if len(steps) == 1:
        return f"1 step (ProfilerStep#{steps[0]})"
    return f"{plural(len(steps), 'step')} (ProfilerStep#{steps[0]}–{steps[-1]})"


def window_words(summary: TraceSummary) -> str:
    """The analyzer's window of a rank in words: ``the 3 profiled steps``."""
    if summary.window_kind == WINDOW_GPU:
        return "the span of GPU activity"
    if summary.window_kind == WINDOW_HOST:
        return "the span of host activity"
    if summary.window_kind == WINDOW_LAUNCHES:
        return "the span of kernel launch calls"
    acct = summary.metrics.account
    sb = summary.metrics.step_breakdown
    n = acct.steps if acct is not None else sb.steps if sb is not None else len(summary.steps)
    return f"the {plural(n, 'profiled step')}" if n != 1 else "the 1 profiled step"


def _outside_text(side: Outside, where: str) -> str | None:
    """``before it: 1.02s of set-up (cudaFree 981ms in 2 calls, ...; 3 GPU
    activities, 240us)``; None where nothing is there."""
    if side.us <= 0 or not (side.ops or side.gpu_activities):
        return None
    what = [
        f"{fmt.clean(o.name, 60)} {fmt.us(o.self_us)}"
        + (f" in {o.calls:,} calls" if o.calls > 1 else "")
        for o in side.ops[:3]
    ]
    if side.gpu_activities:
        what.append(
            f"{plural(side.gpu_activities, 'GPU activity', 'GPU activities')}, "
            f"{fmt.us(side.gpu_us)}"
        )
    label = "set-up" if where == "before" else "tear-down"
    return f"{where} it: {fmt.ms(side.us / 1e6)} of {label} ({'; '.join(what)})"


def _head(summary: TraceSummary, width: int) -> list[str]:
    """The steps, the window every section but HTA's reads, what lies outside it,
    and the warnings."""
    m = summary.metrics
    out = wrap(_steps_text(summary.steps), width, "   ", "     ")
    window = f"window of every section but HTA's: {window_words(summary)}"
    if summary.window_us is not None:
        lo, hi = summary.window_us
        window += f", {fmt.ms((hi - lo) / 1e6)}"
    sb = m.step_breakdown
    kept = len(sb.step_us) if sb is not None and summary.window_kind == WINDOW_STEPS else None
    if kept is not None and 0 < kept < len(summary.steps):
        left = summary.steps[kept:]
        window += (
            f" (ProfilerStep#{left[0]}{'' if len(left) == 1 else f'–{left[-1]}'} left out: "
            "the profiler stopped before its GPU work ran)"
        )
    out.extend(wrap(window, width, "   ", "     "))
    for side, where in ((summary.setup, "before"), (summary.teardown, "after")):
        said = _outside_text(side, where)
        if said:
            out.extend(wrap(said, width, "   ", "     "))
    for line in trace_warnings(summary):
        out.extend(wrap(f"warning: {line}", width, "   ", "     "))
    return out


def render(
    summary: TraceSummary,
    findings: Sequence[Finding] = (),
    top: int = 10,
    roof: Roof | None = None,
    width: int | None = None,
    mfu: tuple[Utilisation | None, str | None] | None = None,
    ledger: Ledger | None = None,
) -> list[str]:
    """The text report of one rank, in lines of at most ``width`` characters (the
    output's width by default): every sentence wrapped whole, long kernel and op
    names elided in the middle.  ``mfu``: the trace's MFU, or why there is none
    (``analysis.mfu.trace_utilisation``); ``ledger``: the analyzer's (the
    findings' window and the figures HTA's are told apart from)."""
    width = output_width() if width is None else width
    m = summary.metrics
    title = f"rank {summary.rank}" + (f"/{summary.world_size}" if summary.world_size else "")
    out = wrap(f"{title}  {fmt.clean(Path(summary.path).name)}", width, "── ", "   ")
    device = []
    if summary.device_name:
        device.append(fmt.clean(summary.device_name, 60))
    if summary.device_memory_bytes:
        device.append(fmt.size(summary.device_memory_bytes))
    if summary.compute_capability:
        device.append(f"sm {fmt.clean(summary.compute_capability, 8)}")
    head = [", ".join(device)] if device else []
    head.append(plural(summary.events, "event"))
    head.append(plural(summary.gpu_activities, "GPU activity", "GPU activities"))
    out.extend(wrap_items(head, width, " · ", "   "))
    out.extend(_head(summary, width))
    out.extend(_findings(findings, ledger, width))
    if m.account is not None:
        # a trace without GPU work is a job on the CPU (as its evidence says); one
        # whose launches' kernels went unrecorded is a GPU job still
        cuda = summary.gpu_ran
        out.extend(["", *account_lines(m.account, width=width, cuda=cuda)])
        out.extend(_calls(m.account, width))
    out.extend(_step_breakdown(summary, width))
    if mfu is not None:
        out.append("")
        window = "the trace"
        if summary.step_flops is not None:
            window = f"the {plural(summary.step_flops[1], 'profiled step')}"
        for i, sentence in enumerate(mfu_text.trace_lines(*mfu, window=window)):
            out.extend(wrap(sentence, width, _TAB if i else "", _TAB))
    out.extend(_hta(summary, ledger, width))
    out.extend(_kernels(summary, top, width))
    out.extend(_collectives(summary, top, width))
    out.extend(_roofline(summary, roof, top, width))
    out.extend(_cpu_ops(summary, top, width))
    return out


def render_diagnosis(
    diagnosis: Diagnosis, width: int | None = None, one_job: bool = True
) -> list[str]:
    """The job's one diagnosis across its ranks, first of a report of several;
    of "all files" where they are not (or not known to be) one job's ranks."""
    width = output_width() if width is None else width
    head = "Job: " if one_job else "All files: "
    return wrap(fmt.clean(diagnosis.sentence(one_job)), width, head, _TAB)


def render_across(findings: Sequence[Finding], width: int | None = None) -> list[str]:
    """The findings of the rank rules across the traces of one job's ranks."""
    width = output_width() if width is None else width
    head = f"Findings across ranks ({len(findings)})"
    return [head, *findings_text.text_blocks(findings, width)]


def _findings(findings: Sequence[Finding], ledger: Ledger | None, width: int) -> list[str]:
    if not findings:
        return []
    head = f"Findings ({len(findings)})"
    if ledger is not None:
        words = ledger.window.words
        head += f", over {words if words.startswith('the ') else 'the ' + words}"
        if ledger.step_s:
            head += f", {fmt.ms(ledger.step_s)} each"
    return ["", *wrap(head, width, "", "  "), *findings_text.text_blocks(findings, width)]


def _calls(acct: StepAccount, width: int) -> list[str]:
    """The account's calls per step: launches (every launch API) and syncs."""
    launches, syncs = (
        fmt.per_step(acct.launch_calls_per_step),
        fmt.per_step(acct.sync_calls_per_step),
    )
    return wrap(
        f"{launches} launch call{'' if launches == '1' else 's'} per step (every launch API: "
        f"kernels, copies, graphs), {syncs} synchronizing call{'' if syncs == '1' else 's'} "
        "per step",
        width,
        "  ",
        "    ",
    )


def _step_breakdown(summary: TraceSummary, width: int) -> list[str]:
    sb = summary.metrics.step_breakdown
    if sb is None:
        return ["", "Step time by what ran: no host activity in the trace"]
    step = sb.step_us_mean
    util = _pct(sb.gpu_utilization_pct)
    out = [
        "",
        *wrap(
            "Step time by what ran (the TensorBoard plugin's breakdown: each moment goes to "
            f"the first of these that ran then), {window_words(summary)}, "
            f"{fmt.ms(None if step is None else step / 1e6)} each; kernels ran {util} of the "
            'steps (the plugin\'s "GPU utilization": kernels only)',
            width,
            "",
            "  ",
        ),
    ]
    bar_width = max(0, min(BAR_WIDTH, width - 41))
    for c in STEP_CATEGORIES:
        share = sb.category_pct(c)
        frac = None if share is None else share / 100.0
        bar = fmt.bar(frac, bar_width).rstrip()
        label = _CATEGORY_LABELS[c]
        per = fmt.us(sb.category_us(c) / max(sb.steps, 1))
        out.append(f"  {label:<20}{_pct(share):>7}  {per:>8}  {bar}".rstrip())
    return out


def _hta_window(summary: TraceSummary) -> str:
    """HTA's window in words."""
    m = summary.metrics
    steps = summary.steps
    if m.last_step_dropped and len(steps) > 1:
        kept = steps[:-1]
        span = f"ProfilerStep#{kept[0]}" + (f"–{kept[-1]}" if len(kept) > 1 else "")
        return f"HTA's window: {span}, the last step left out"
    return "HTA's window: the whole trace"


def _hta(summary: TraceSummary, ledger: Ledger | None, width: int) -> list[str]:
    m = summary.metrics
    t = m.temporal
    if t is None:
        calls = summary.sanity.kernel_launch_calls
        if calls:
            return _section(
                f"GPU time: GPU activity not recorded ({plural(calls, 'kernel launch call')}, "
                "no kernel records)",
                width,
            )
        runtime = summary.sanity.runtime_calls
        if runtime:  # CUDA was recorded: no GPU work started in the trace
            return _section(
                f"GPU time: no GPU activity in the trace ({plural(runtime, 'CUDA call')}, "
                "none a kernel launch)",
                width,
            )
        return _section("GPU time: no GPU activity in the trace (a CPU-only profile)", width)
    shares = [
        f"compute {_pct(t.compute_pct)}",
        f"non-compute {_pct(t.non_compute_pct)}",
        f"idle {_pct(t.idle_pct)}",
    ]
    said: list[str] = []
    ib = m.idle_breakdown
    if ib is not None and ib.idle_us > 0:
        said.append(
            f"gaps between GPU activities: {fmt.us(ib.idle_us)} on "
            f"{plural(len(ib.streams), 'stream')}: host wait {_pct(ib.host_wait_pct)}, "
            f"kernel wait {_pct(ib.kernel_wait_pct)}, other {_pct(ib.other_pct)}"
        )
    if m.comm_compute_overlap_pct is None:
        other = summary.kernel_us_by_class.get(COMMUNICATION, 0.0)
        said.append(
            "communication overlapped by computation: no communication kernels"
            + (
                f" by HTA's definition (NCCL's); the {fmt.us(other)} of other "
                "communication kernels (DeepEP's, NVSHMEM's) are compute there"
                if other > 0
                else ""
            )
        )
    else:
        said.append(f"communication overlapped by computation: {_pct(m.comm_compute_overlap_pct)}")
    ls = m.launch
    if ls is not None:
        said.append(
            f"HTA's kernel launches: {_count(ls.launches)}; GPU work shorter than its launch "
            f"call: {_count(ls.short_kernels)} ({_pct(ls.short_kernel_pct)})"
        )
        said.append(
            f"launch calls > 50us: {_count(ls.runtime_outliers)}; launch delay median "
            f"{fmt.us(ls.launch_delay_us_median)}, p95 {fmt.us(ls.launch_delay_us_p95)}, "
            f"> 100us: {_count(ls.launch_delay_outliers)}"
        )
    differs = _hta_differs(summary, ledger)
    if differs:
        said.append(differs)
    out = [
        *_section(
            f"GPU time by Holistic Trace Analysis' definitions ({_hta_window(summary)}; "
            f"{fmt.us(t.span_us)} from its first GPU activity to its last)",
            width,
        ),
        *wrap_items(shares, width, "   ", _TAB, _TAB * 2),
    ]
    for line in said:
        out.extend(wrap(line, width, _TAB, _TAB * 2))
    return out


def _hta_differs(summary: TraceSummary, ledger: Ledger | None) -> str | None:
    """Why HTA's figures are not the account's, where they are not."""
    t, ls = summary.metrics.temporal, summary.metrics.launch
    if ledger is None or t is None or not t.span_us:
        return None
    theirs: list[str] = []
    ours: list[str] = []
    why: list[str] = []
    busy = ledger.gpu_busy
    hta_busy = 1.0 - t.idle_us / t.span_us
    if busy is not None and round(100 * busy) != round(100 * hta_busy):
        theirs.append(f"GPU busy {100 * hta_busy:.0f}%")
        ours.append(f"{100 * busy:.0f}%")
        why.append(
            "HTA measures from its first GPU activity to its last, the account the steps' wall time"
        )
    launches = ledger.launches_per_step
    hta_steps = len(summary.steps) - (1 if summary.metrics.last_step_dropped else 0)
    if ls is not None and launches is not None and hta_steps > 0:
        hta_per_step = ls.launches / hta_steps
        if fmt.per_step(hta_per_step) != fmt.per_step(launches):
            theirs.append(f"{fmt.per_step(hta_per_step)} launches per step")
            ours.append(f"{fmt.per_step(launches)} launch calls per step")
            why.append(
                "HTA counts cudaLaunchKernel, cudaLaunchKernelExC, cudaMemcpyAsync and "
                "cudaMemsetAsync calls joined to GPU work, not the driver's, HIP's or graph "
                "launches"
            )
    if not theirs:
        return None
    if summary.metrics.last_step_dropped:
        why.append("and leaves out the last step")
    return f"HTA's {' and '.join(theirs)} are not the account's ({', '.join(ours)}): " + "; ".join(
        why
    )


def _roofline(summary: TraceSummary, roof: Roof | None, top: int, width: int) -> list[str]:
    if not summary.gpu_ran:
        return []  # its ops ran on the CPU: no GPU roof places them
    if not summary.op_rows:
        if summary.kernel_total_us <= 0:
            return []
        return _section(
            "Roofline: the trace has no input shapes (profile with record_shapes=True and "
            "with_flops=True)",
            width,
        )
    if summary.gpu_activities == 0:  # launches, but no kernel recorded: no op has GPU time
        return _section(
            "Roofline: the GPU's activity was not recorded, so no op has GPU time to place "
            "(profile with ProfilerActivity.CUDA among the activities)",
            width,
        )
    report = roofline_of(summary.op_rows, roof)
    if report is None:
        device = fmt.clean(summary.device_name or "an unnamed GPU", 60)
        if summary.rocm:  # gputui bench measures CUDA devices only
            return _section(f"Roofline: no ceilings known for {device}", width)
        return _section(f"Roofline: no ceilings known for {device}: run gputui bench on it", width)
    return ["", *roofline_text.lines(report, width, top)]


def _section(text: str, width: int) -> list[str]:
    """A section's first line, wrapped, after a blank line."""
    return ["", *wrap(text, width)]


def _kernels(summary: TraceSummary, top: int, width: int) -> list[str]:
    if not summary.kernels:
        return []
    out = _section(
        f"Top GPU activities ({window_words(summary)}: {fmt.us(summary.kernel_total_us)} in "
        f"{plural(summary.kernel_names, 'name')})",
        width,
    )
    by_class = [
        f"{CLASS_LABELS.get(c, fmt.clean(c, 20))} {100.0 * us / summary.kernel_total_us:.0f}%"
        for c, us in summary.kernel_us_by_class.items()
        if summary.kernel_total_us > 0
    ]
    if by_class:
        items = [f"{item}," for item in by_class[:-1]] + by_class[-1:]
        out.extend(wrap_items(items, width, " ", _TAB))
    out.extend(kernel_table(summary.kernels[:top], width, _TAB, upper=True))
    return out


def _collectives(summary: TraceSummary, top: int, width: int) -> list[str]:
    """The window's collectives by the messages their kernels record: what each
    call moves, how long it takes, and at what rate (on average, and the call
    that waited least)."""
    if not summary.collectives:
        return []
    out = _section(
        f"Collectives by the messages the trace records ({window_words(summary)}; a "
        "kernel's time includes its wait for the other ranks)",
        width,
    )
    rows = []
    for c in summary.collectives[:top]:
        rows.append(
            [
                _count(c.calls),
                fmt.size(c.bytes_per_call),
                fmt.us(c.us_per_call),
                fmt.rate(None if c.mean_gbps is None else c.mean_gbps * 1e9),
                fmt.rate(None if c.best_gbps is None else c.best_gbps * 1e9),
                str(c.group) if c.group else "-",
                "-" if c.split_skew is None else f"{c.split_skew:.2f}",
                fmt.clean(c.name, 40),
            ]
        )
    lines = table(
        ["CALLS", "EACH", "TIME", "RATE", "BEST", "RANKS", "SPLIT", "COLLECTIVE"],
        rows,
        width - len(_TAB),
        right=[True, True, True, True, True, True, True, False],
        flexible=7,
        optional=(5, 6),
        least=12,
    )
    out.extend(_TAB + line for line in lines)
    return out


def _cpu_ops(summary: TraceSummary, top: int, width: int) -> list[str]:
    if not summary.cpu_ops:
        return []
    out = _section(
        f"Top CPU ops by self time ({window_words(summary)}: "
        f"{fmt.us(summary.cpu_self_total_us)} of self time in "
        f"{plural(summary.cpu_op_names, 'name')})",
        width,
    )
    rows = [
        [
            fmt.us(o.self_us),
            _pct(100.0 * o.share),
            _count(o.calls),
            fmt.us(o.mean_self_us),
            fmt.clean(o.name),
        ]
        for o in summary.cpu_ops[:top]
    ]
    lines = table(
        ["SELF", "SHARE", "CALLS", "MEAN", "OP"],
        rows,
        width - len(_TAB),
        right=[True, True, True, True, False],
        flexible=4,
        optional=(2, 3),  # narrower: calls and mean give way to the op's name
        least=16,
    )
    out.extend(_TAB + line for line in lines)
    return out
