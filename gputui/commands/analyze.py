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
import contextlib
import gc
import json
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gputui import __version__, fmt
from gputui.commands import args as types

if TYPE_CHECKING:
    from gputui.analysis.mfu import Utilisation
    from gputui.analysis.roofline import Roof
    from gputui.analysis.trace_summary import TraceSummary
    from gputui.tracefile.reader import TraceFile

# The trace reader, the analyzer and the report are imported where they are used:
# `gputui analyze --help` and a refused command line load none of them.

#: 2 adds each rank's step account (``account``); 3 its MFU during the trace
#: (``utilisation``, ``utilisation_note``); every key of 1 and 2 stays
JSON_VERSION = 4


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
    parser.set_defaults(func=main)


def _device(tf: TraceFile) -> tuple[str | None, int | None, str | None]:
    """The GPU the trace's activity ran on, as its header describes it."""
    if not tf.devices:
        return None, None, None
    used = Counter(a.device for a in tf.timeline.gpu)
    index = used.most_common(1)[0][0] if used else tf.devices[0].index
    dev = next((d for d in tf.devices if d.index == index), tf.devices[0])
    return dev.name, dev.total_memory_bytes, dev.compute_capability


@contextlib.contextmanager
def _without_cyclic_gc() -> Iterator[None]:
    """A trace becomes millions of small records without cycles: reference
    counting frees them, and the cyclic collector would only walk them again
    and again (about a fifth of the run time on a 50 MB trace)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def load(
    paths: Sequence[str],
    include_last_step: bool = False,
    top: int = 30,
    warnings: list[str] | None = None,
) -> list[TraceSummary]:
    """Every trace file named by ``paths``, summarized, by rank.  A file named
    twice, or a copy of another (the same trace_id), is read once; ``warnings``
    gets a line for each, and for each reason the files are not the ranks of one
    job (``analyze_ranks``)."""
    from gputui.tracefile.reader import find_traces

    said: list[str] = [] if warnings is None else warnings
    with _without_cyclic_gc():
        return _load(find_traces(paths, said), include_last_step, top, said)


def _load(
    files: Sequence[Path], include_last_step: bool, top: int, warnings: list[str]
) -> list[TraceSummary]:
    from gputui.analysis.trace_summary import summarize
    from gputui.commands.analyze_ranks import TraceOrigin, job_warnings
    from gputui.tracefile.reader import read_trace

    out: list[TraceSummary] = []
    origins: list[TraceOrigin] = []
    ids: dict[str, str] = {}
    for path in files:
        tf = read_trace(path)
        if tf.trace_id is not None and tf.trace_id in ids:
            warnings.append(
                f"{fmt.clean(tf.path)}: a copy of {fmt.clean(ids[tf.trace_id])} (the same "
                "trace_id); read once"
            )
            continue
        if tf.trace_id is not None:
            ids[tf.trace_id] = tf.path
        position = len(origins)
        origins.append(TraceOrigin(tf.path, tf.rank, tf.world_size, tf.host_pid, tf.trace_id))
        name, memory, cc = _device(tf)
        if tf.rank is not None:
            rank, rank_from = tf.rank, "distributedInfo"
        else:
            rank, rank_from = position, "order"
        out.append(
            summarize(
                tf.timeline,
                rank,
                rank_from,
                tf.path,
                world_size=tf.world_size,
                device_name=name,
                device_memory_bytes=memory,
                compute_capability=cc,
                include_last_step=include_last_step,
                top=top,
                op_rows=tf.op_rows,
                step_flops=tf.step_flops,
            )
        )
        del tf  # one file's events at a time
    warnings.extend(job_warnings(origins))
    out.sort(key=lambda s: s.rank)
    return out


def main(args: argparse.Namespace) -> int:
    from gputui.analysis.evidence import roofline_of
    from gputui.analysis.finding import ranked
    from gputui.analysis.trace_evidence import trace_job_findings, trace_rank_findings
    from gputui.analysis.trace_summary import summary_json, trace_findings
    from gputui.reports import roofline as roofline_text
    from gputui.reports.analyze import render, render_across
    from gputui.trace.tables import TOP_ROWS

    warnings: list[str] = []
    summaries = load(
        # the rules read every row the tables keep, whatever --top shows: text and
        # JSON give the same findings
        args.paths,
        args.include_last_step,
        max(args.top, TOP_ROWS),
        warnings,
    )
    for line in warnings:
        print(f"gputui analyze: warning: {line}", file=sys.stderr)
    roofs = roofs_of(summaries)
    findings = [
        ranked([*trace_findings(s), *trace_job_findings(s, roof)])
        for s, roof in zip(summaries, roofs, strict=True)
    ]
    mfus = [mfu_of(s, roof) for s, roof in zip(summaries, roofs, strict=True)]
    across = trace_rank_findings(summaries, roofs)
    if args.json:
        ranks = []
        for s, f, roof, (util, why) in zip(summaries, findings, roofs, mfus, strict=True):
            doc_rank = summary_json(s, f)
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
        }
        print(json.dumps(doc, indent=2))
        return 0
    lines: list[str] = render_across(across) if across else []
    for summary, found, roof, mfu in zip(summaries, findings, roofs, mfus, strict=True):
        if lines:
            lines.append("")
        lines.extend(render(summary, found, args.top, roof, mfu=mfu))
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def mfu_of(summary: TraceSummary, roof: Roof | None) -> tuple[Utilisation | None, str | None]:
    """A rank's MFU during its trace (analysis.mfu): against the datasheet peak of
    the trace's GPU, with the share of ``gputui bench``'s ceiling when ``roof``
    is a measured one; or why there is none."""
    from gputui.analysis.mfu import trace_utilisation
    from gputui.analysis.roofline import MEASURED
    from gputui.ceilings.datasheet import datasheet_for

    sheet = datasheet_for(summary.device_name)
    return trace_utilisation(
        summary.step_flops,
        summary.step_us_mean,
        summary.device_name,
        None if sheet is None else sheet.roof(),
        roof if roof is not None and roof.source == MEASURED else None,
    )


def roofs_of(summaries: Sequence[TraceSummary]) -> list[Roof | None]:
    """Each rank's roof: ``gputui bench``'s ceilings of a GPU of the trace's device
    name measured on this machine, else that GPU's datasheet."""
    by_name: dict[str | None, Roof | None] = {}
    if not any(s.op_rows for s in summaries):
        return [None for _ in summaries]  # no op rows to place: no ceilings to read
    from gputui.ceilings.cache import roof_for

    for s in summaries:
        if s.device_name not in by_name:
            by_name[s.device_name] = roof_for(None, s.device_name)
    return [by_name[s.device_name] for s in summaries]
