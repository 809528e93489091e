"""``gputui analyze PATH... [--json]``: what torch.profiler traces say.

Reads Chrome traces (``export_chrome_trace`` files, ``tensorboard_trace_handler``
directories, ``.json``/``.json.gz``, gputui's own capture traces; several files
are several ranks), and prints per rank: the steps found, the TensorBoard
plugin's step breakdown, Holistic Trace Analysis' temporal and idle breakdowns
and communication overlap, kernel launch statistics, the top kernels and CPU
ops, and the findings of the trace rules.  docs/analyze.md has the definitions.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gputui import __version__
from gputui.commands import args as types

if TYPE_CHECKING:
    from gputui.analysis.mfu import Utilisation
    from gputui.analysis.roofline import Roof
    from gputui.analysis.trace_summary import TraceSummary

# The trace reader, the analyzer and the report are imported where they are used:
# `gputui analyze --help` and a refused command line load none of them.

#: 2 adds each rank's step account (``account``); 3 its MFU during the trace
#: (``utilisation``, ``utilisation_note``); 5 its window (``window``, ``setup``,
#: ``teardown``), its sanity counts and warnings (``sanity``, ``warnings``), the
#: analyzer's ledger (``ledger``) and ``kernel_calls``; 6 the device's ``rocm`` and
#: the findings' ``overlap_pct``; every earlier key stays
JSON_VERSION = 6


SUMMARY = "what torch.profiler traces say (steps, breakdowns, kernels)"
DESCRIPTION = (
    "Analyze torch.profiler Chrome traces: trace files, .json.gz files, "
    "tensorboard_trace_handler directories, gputui's capture traces.  Several files "
    "are several ranks."
)


def register(subparsers: Any) -> None:
    parser = types.command(subparsers, "analyze", SUMMARY, DESCRIPTION)
    parser.add_argument("paths", nargs="+", metavar="PATH", help="a trace file or directory")
    parser.add_argument("--json", action="store_true", help="print JSON (docs/json.md)")
    parser.add_argument(
        "--top",
        type=types.integer(1, 1000),
        default=10,
        metavar="N",
        help="rows in the kernel and CPU-op tables, 1-1000 (default 10)",
    )
    parser.add_argument(
        "--include-last-step",
        action="store_true",
        help="keep the last ProfilerStep in the HTA breakdowns (HTA leaves it out by default)",
    )
    parser.add_argument(
        "--jobs",
        type=types.integer(1, 1024),
        default=None,
        metavar="N",
        help="rank files read at once, each by its own process, 1-1024; one file of 64 MB or "
        "more is decoded by up to N processes (at most 8) (default: one per CPU; 1: one after "
        "the other in this process)",
    )
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from gputui.analysis import engine
    from gputui.analysis.diagnosis import job_diagnosis
    from gputui.analysis.evidence import roofline_of
    from gputui.analysis.finding import ranked
    from gputui.analysis.trace_evidence import trace_evidence, trace_rank_findings
    from gputui.analysis.trace_summary import summary_json, trace_findings
    from gputui.commands.analyze_load import load
    from gputui.reports import roofline as roofline_text
    from gputui.reports.analyze import render, render_across, render_diagnosis
    from gputui.reports.text import emit
    from gputui.trace.tables import TOP_ROWS

    warnings: list[str] = []
    summaries = load(
        # the rules read every row the tables keep, whatever --top shows: text and
        # JSON give the same findings
        args.paths,
        args.include_last_step,
        max(args.top, TOP_ROWS),
        warnings,
        jobs=args.jobs,
        leaving=getattr(args, "leaving", False),
    )
    if warnings:
        from gputui.reports.text import say

        for line in warnings:
            say(f"gputui analyze: warning: {line}")
    roofs = roofs_of(summaries)
    evidence = [
        trace_evidence(s, roof, datasheet=datasheet_of(s))
        for s, roof in zip(summaries, roofs, strict=True)
    ]
    findings = [
        ranked([*trace_findings(s), *engine.analyze(ev)])
        for s, ev in zip(summaries, evidence, strict=True)
    ]
    ledgers = [ev.ledger for ev in evidence]
    mfus = [mfu_of(s, roof) for s, roof in zip(summaries, roofs, strict=True)]
    across = trace_rank_findings(summaries, roofs)
    diagnosis = job_diagnosis(
        [(s.rank, f) for s, f in zip(summaries, findings, strict=True)], across
    )
    if args.json:
        ranks = []
        for s, f, roof, (util, why), led in zip(
            summaries, findings, roofs, mfus, ledgers, strict=True
        ):
            doc_rank = summary_json(s, f)
            doc_rank["ledger"] = led.to_json()
            report = roofline_of(s.op_rows, roof)
            doc_rank["roofline"] = None if report is None else roofline_text.to_json(report)
            doc_rank["utilisation"] = None if util is None else util.as_dict()
            doc_rank["utilisation_note"] = why
            ranks.append(doc_rank)
        doc = {
            "version": JSON_VERSION,
            "gputui": __version__,
            "ranks": ranks,
            "warnings": warnings,
            "across_ranks": [f.to_json() for f in across],
            "diagnosis": None if diagnosis is None else diagnosis.to_json(),
        }
        print(json.dumps(doc, indent=2))
        return 0
    lines: list[str] = (
        [] if diagnosis is None else render_diagnosis(diagnosis, one_job=not warnings)
    )
    if across:
        lines.extend(["", *render_across(across)] if lines else render_across(across))
    for summary, found, roof, mfu, led in zip(
        summaries, findings, roofs, mfus, ledgers, strict=True
    ):
        if lines:
            lines.append("")
        lines.extend(render(summary, found, args.top, roof, mfu=mfu, ledger=led))
    emit(lines)
    return 0


def mfu_of(summary: TraceSummary, roof: Roof | None) -> tuple[Utilisation | None, str | None]:
    """A rank's MFU during its trace (analysis.mfu): against the datasheet peak of
    the trace's GPU, with the share of ``gputui bench``'s ceiling when ``roof``
    is a measured one; or why there is none."""
    from gputui.analysis.evidence import on_tf32
    from gputui.analysis.mfu import trace_utilisation
    from gputui.analysis.roofline import MEASURED
    from gputui.analysis.trace_summary import WINDOW_STEPS
    from gputui.ceilings.datasheet import datasheet_for

    sheet = datasheet_for(summary.device_name)
    markers = summary.metrics.markers
    return trace_utilisation(
        summary.step_flops,
        summary.step_us_mean,
        summary.device_name,
        None if sheet is None else sheet.roof(),
        roof if roof is not None and roof.source == MEASURED else None,
        gpu_work=summary.gpu_ran,
        # launches without kernel records and no steps: only the host's span
        timed=summary.gpu_activities > 0
        or not summary.gpu_ran
        or summary.window_kind == WINDOW_STEPS,
        tf32=on_tf32(summary.kernels),
        compiled=markers is not None and (markers.compiled or markers.cuda_graphs),
    )


def datasheet_of(summary: TraceSummary) -> Roof | None:
    """The datasheet ceilings of a rank's GPU (None for a GPU the table does not
    know): the attention rules cost a call against flash at its peak."""
    from gputui.ceilings.datasheet import datasheet_for

    if not summary.gpu_ran:
        return None  # its ops ran on the CPU
    sheet = datasheet_for(summary.device_name)
    return None if sheet is None else sheet.roof()


def roofs_of(summaries: Sequence[TraceSummary]) -> list[Roof | None]:
    """Each rank's roof: ``gputui bench``'s ceilings of a GPU of the trace's device
    name measured on this machine, else that GPU's datasheet; none for a rank
    whose ops ran on the CPU (no GPU's ceilings place them)."""
    by_name: dict[str | None, Roof | None] = {}
    if not any(s.op_rows and s.gpu_ran for s in summaries):
        return [None for _ in summaries]  # no op rows to place: no ceilings to read
    from gputui.ceilings.cache import roof_for

    for s in summaries:
        if s.gpu_ran and s.device_name not in by_name:
            by_name[s.device_name] = roof_for(None, s.device_name)
    return [by_name[s.device_name] if s.gpu_ran else None for s in summaries]
