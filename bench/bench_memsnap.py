"""What a memory snapshot costs the job: step time with the allocation history on
against off, in the same run, and the stalls around it.  Needs a CUDA device.

    python bench/bench_memsnap.py --out bench-memsnap.json

The hook is installed in this process; its memory snapshot controller is asked
directly (the request a viewer's ``memory_snapshot`` frame makes), so no socket
or viewer process shares the machine.  For each model (the launch-bound MLP and
the ~50 ms transformer of ``bench_hook.py``), ``--rounds`` times:

1. ``--steps`` steps with the history off (the baseline of this round);
2. a snapshot of ``--steps`` steps: the steps inside the window (history on),
   the step that ends it (it also pays for ``_snapshot()`` and turning the
   history off: ``stop_ms``), and the steps while the worker thread summarises
   and writes the file (they share the GIL with it), until the result is ready.

Reported per model: the median step time off, on, and their ratio (median of
the per-round ratios, with quartiles); the extra time of the step that ends the
window; the steps during processing against off; the result's own
``start_ms``/``stop_ms``/``summary_ms``/``dump_ms``, trace entries and file size.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import torch  # noqa: E402
from bench_hook import Workload, mlp, transformer  # noqa: E402

import gputui.hook  # noqa: E402
from gputui.protocol import memsnap as ms  # noqa: E402
from gputui.protocol.memsnap import MemorySnapshotRequest, MemorySnapshotResult  # noqa: E402

#: the longest a snapshot's processing may take before the round is abandoned
PROCESS_TIMEOUT_S = 120.0


def timed_step(work: Workload) -> float:
    t0 = time.perf_counter()
    work.step()
    return time.perf_counter() - t0


def quartiles(values: list[float]) -> dict[str, float]:
    if len(values) < 2:
        v = values[0] if values else float("nan")
        return {"p25": v, "median": v, "p75": v}
    q = statistics.quantiles(values, n=4)
    return {"p25": q[0], "median": statistics.median(values), "p75": q[2]}


def one_round(work: Workload, hook: Any, steps: int, entries: int) -> dict[str, Any]:
    sync = torch.cuda.synchronize
    sync()
    off = [timed_step(work) for _ in range(steps)]
    sync()
    ctl = hook.memsnap
    status = ctl.request(
        None, MemorySnapshotRequest(id=f"bench-{time.time()}", steps=steps, max_entries=entries)
    )
    if status.state != ms.ARMED:
        raise RuntimeError(f"snapshot not armed: {status.state} {status.reason}")
    before = ctl.count
    on: list[float] = []
    end_step = None
    processing: list[float] = []
    deadline = time.monotonic() + PROCESS_TIMEOUT_S
    while ctl.count == before:
        if time.monotonic() > deadline:
            raise RuntimeError("the snapshot did not finish")
        state_before = ctl.state
        dt = timed_step(work)
        state_after = ctl.state
        if state_before == ms.RECORDING:
            if state_after == ms.RECORDING:
                on.append(dt)  # inside the window: history on
            else:
                end_step = dt  # its end took the snapshot and turned the history off
        elif state_before == ms.PROCESSING:
            processing.append(dt)  # the worker summarises and writes meanwhile
    sync()
    result = MemorySnapshotResult.from_wire(ctl.last_result)
    return {"off": off, "on": on, "end_step": end_step, "processing": processing, "result": result}


def bench_model(
    work: Workload, hook: Any, rounds: int, steps: int, entries: int, warm: int
) -> dict[str, Any]:
    for _ in range(warm):
        work.step()
    torch.cuda.synchronize()
    ratios, off_all, on_all, end_extra, proc_ratio, proc_steps = [], [], [], [], [], []
    costs: dict[str, list[float]] = {
        k: [] for k in ("start_ms", "stop_ms", "summary_ms", "dump_ms")
    }
    entries_seen, file_bytes, allocs = [], [], []
    for _ in range(rounds):
        r = one_round(work, hook, steps, entries)
        off_med = statistics.median(r["off"])
        off_all += r["off"]
        on_all += r["on"]
        if r["on"]:
            ratios.append(statistics.median(r["on"]) / off_med)
        if r["end_step"] is not None:
            end_extra.append((r["end_step"] - off_med) * 1000.0)
        proc_steps.append(len(r["processing"]))
        if r["processing"]:
            proc_ratio.append(statistics.median(r["processing"]) / off_med)
        res: MemorySnapshotResult = r["result"]
        for key in costs:
            value = getattr(res, key)
            if value is not None:
                costs[key].append(value)
        entries_seen.append(res.trace_entries)
        allocs.append(res.alloc_count)
        if res.snapshot_bytes:
            file_bytes.append(res.snapshot_bytes)
        if res.snapshot_path:
            try:
                os.unlink(res.snapshot_path)  # the bench keeps numbers, not files
            except OSError:
                pass
    return {
        "model": work.name,
        "rounds": rounds,
        "window_steps": steps,
        "max_entries": entries,
        "step_ms_off": statistics.median(off_all) * 1000.0,
        "step_ms_on": statistics.median(on_all) * 1000.0 if on_all else None,
        "on_over_off": quartiles(ratios),
        "end_step_extra_ms": quartiles(end_extra),
        "processing_over_off": quartiles(proc_ratio),
        "processing_steps_per_round": statistics.median(proc_steps),
        **{key: quartiles(values) for key, values in costs.items()},
        "allocations_per_step": statistics.median(allocs) / steps if allocs else None,
        "trace_entries": statistics.median(entries_seen) if entries_seen else None,
        "file_bytes": statistics.median(file_bytes) if file_bytes else None,
    }


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", help="write the results as JSON here")
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--steps", type=int, default=10, help="steps per window (and per baseline)")
    p.add_argument("--entries", type=int, default=ms.DEFAULT_ENTRIES)
    p.add_argument("--mlp-layers", type=int, default=16)
    p.add_argument("--models", nargs="*", default=["mlp", "transformer"])
    args = p.parse_args()
    if not torch.cuda.is_available():
        print(
            "bench_memsnap: needs a CUDA device (memory snapshots are CUDA-only)", file=sys.stderr
        )
        return 2
    device = torch.device("cuda")
    gputui.hook.install()
    hook = gputui.hook._HOOK
    assert hook is not None
    results = []
    for name in args.models:
        work = mlp(device, False, args.mlp_layers) if name == "mlp" else transformer(device, False)
        results.append(bench_model(work, hook, args.rounds, args.steps, args.entries, warm=30))
        row = results[-1]
        on, end = row["on_over_off"], row["end_step_extra_ms"]
        print(
            f"{row['model']}: step {row['step_ms_off']:.3f} ms off, "
            f"{(row['step_ms_on'] or float('nan')):.3f} ms with history "
            f"(x{on['median']:.3f}, IQR {on['p25']:.3f}-{on['p75']:.3f}); "
            f"window end +{end['median']:.1f} ms (stop_ms {row['stop_ms']['median']:.1f}); "
            f"processing steps x{row['processing_over_off']['median']:.3f}; "
            f"summary {row['summary_ms']['median']:.1f} ms, "
            f"file {row['dump_ms']['median']:.1f} ms, "
            f"{row['file_bytes'] or 0:,.0f} bytes, "
            f"{row['allocations_per_step'] or 0:.0f} allocations/step",
            flush=True,
        )
    doc = {
        "when": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "machine": platform.node(),
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "results": results,
    }
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
