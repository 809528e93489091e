"""Where ``gputui analyze`` spends its time on one trace: the CPU time
(``time.process_time``) of each stage of the reader and of the rank's summary,
in one process, the cyclic collector off as ``analyze`` runs.  The stages are
timed by wrapping the functions that run them, which adds a few microseconds
a batch, nothing per event.

    .venv/bin/python bench/trace_phases.py [--read] TRACE [TRACE ...]

``--read`` times the reading alone (no summary).  ``--workers N`` reads with
up to N forked workers, as ``gputui analyze`` does a large trace (the stages
done by the workers then go untimed); ``read_wall_s`` and ``summary_wall_s``
are the wall times, the others this process's CPU time.

One JSON line per trace: ``read_s`` and ``summary_s``, then each stage's
seconds (``decode`` the msgspec decoders, ``records`` the per-event and
by-category passes that make the timeline, ``op_rows_pass`` the op rows' pass
over the events, ``op_rows`` and ``step_flops`` what is made of them at the
end; the summary's scan, passes, sweep and self times).
"""

from __future__ import annotations

import functools
import gc
import json
import sys
import time
from typing import Any

from gputui.analysis import trace_summary
from gputui.trace import op_rows, scan
from gputui.tracefile import categories, reader, typed

SPENT: dict[str, float] = {}


def _timed(owner: Any, name: str, label: str) -> None:
    real = getattr(owner, name)

    @functools.wraps(real)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t = time.process_time()
        try:
            return real(*args, **kwargs)
        finally:
            SPENT[label] = SPENT.get(label, 0.0) + time.process_time() - t

    setattr(owner, name, wrapper)


class _Decoder:
    def __init__(self, real: Any) -> None:
        self.real = real

    def decode(self, text: Any) -> Any:
        t = time.process_time()
        try:
            return self.real.decode(text)
        finally:
            SPENT["decode"] = SPENT.get("decode", 0.0) + time.process_time() - t


def _instrument() -> None:
    for name in ("_DECODER", "CATEGORY_DECODER", "SHAPED_DECODER"):
        if hasattr(typed, name):
            setattr(typed, name, _Decoder(getattr(typed, name)))
    _timed(typed.TypedReader, "_records", "records")
    _timed(categories.ByCategory, "take", "records")
    _timed(typed.TypedReader, "_op_rows", "op_rows_pass")
    if hasattr(typed.TypedReader, "_op_rows_by_category"):
        _timed(typed.TypedReader, "_op_rows_by_category", "op_rows_pass")
    _timed(op_rows.ChromeTraceOps, "rows", "op_rows")
    _timed(op_rows.ChromeTraceOps, "step_totals", "step_flops")
    for cls in ("Scan", "RangePass", "GpuPass", "RuntimePass"):
        _timed(getattr(scan, cls), "__init__", f"summary.{cls}")
    _timed(scan, "sweep", "summary.sweep")
    _timed(scan, "_nest", "summary.self_times")


def main() -> int:
    args = sys.argv[1:]
    read_only = "--read" in args
    args = [a for a in args if a != "--read"]
    workers = 0
    if "--workers" in args:
        at = args.index("--workers")
        workers = int(args[at + 1])
        del args[at : at + 2]
    _instrument()
    gc.disable()
    for path in args:
        SPENT.clear()
        t, w = time.process_time(), time.perf_counter()
        tf = reader.read_trace(path, workers=workers)
        read_s, read_wall = time.process_time() - t, time.perf_counter() - w
        t, w = time.process_time(), time.perf_counter()
        if not read_only:
            trace_summary.summarize(tf.timeline, 0, "order", path, op_rows=tf.op_rows)
        summary_s, summary_wall = time.process_time() - t, time.perf_counter() - w
        out = {
            "trace": path,
            "events": tf.timeline.events,
            "read_s": round(read_s, 2),
            "summary_s": round(summary_s, 2),
            "workers": workers,
            "read_wall_s": round(read_wall, 2),
            "summary_wall_s": round(summary_wall, 2),
            **{k: round(v, 2) for k, v in sorted(SPENT.items())},
        }
        print(json.dumps(out), flush=True)
        del tf
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
