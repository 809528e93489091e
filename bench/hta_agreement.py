"""How far gputui's trace metrics are from Holistic Trace Analysis 0.5.0's, trace by trace.

    .venv/bin/python bench/hta_agreement.py                     # tests/data/traces
    .venv/bin/python bench/hta_agreement.py run/*.pt.trace.json.gz

Prints, per trace, the largest difference (percentage points) in the temporal
breakdown (idle, compute, non-compute shares), in the idle breakdown (host
wait, kernel wait, other shares of idle time) and in the overlap, the launch
counts of both, and both tools' comm/compute overlap.
tests/integration/test_hta_truth.py asserts the same within 0.5 point; this
shows how much room there is (docs/analyze.md).
"""

from __future__ import annotations

import logging
import sys
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "integration"))

from test_hta_truth import hta  # noqa: E402

from gputui.trace.trace_metrics import compute  # noqa: E402
from gputui.tracefile.reader import read_trace  # noqa: E402


def diff(a: tuple[float | None, ...], b: tuple[float | None, ...]) -> float:
    return max(abs((x or 0.0) - (y or 0.0)) for x, y in zip(a, b, strict=True))


def main() -> int:
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    paths = [Path(p) for p in sys.argv[1:]] or sorted((REPO / "tests/data/traces").glob("*.gz"))
    print(
        f"{'trace':<40} {'temporal':>9} {'idle':>9} {'overlap':>9} {'launches':>15}"
        f"  {'overlap % (gputui / HTA)':>24}"
    )
    worst = [0.0, 0.0, 0.0]
    for path in paths:
        ref = hta(path)
        m = compute(read_trace(path).timeline)
        t, ib, ls = m.temporal, m.idle_breakdown, m.launch
        assert t is not None and ib is not None and ls is not None
        d_t = (
            diff((t.idle_pct, t.compute_pct, t.non_compute_pct), ref["temporal"])
            if isinstance(ref["temporal"], tuple)
            else float("nan")
        )
        d_i = diff((ib.host_wait_pct, ib.kernel_wait_pct, ib.other_pct), ref["idle"])
        ov, rov = m.comm_compute_overlap_pct, ref["overlap"]
        d_o = abs(ov - rov) if ov is not None and rov is not None else 0.0
        for k, v in enumerate((d_t, d_i, d_o)):
            worst[k] = max(worst[k], v) if v == v else worst[k]
        name = path.name.removesuffix(".pt.trace.json.gz")
        print(
            f"{name:<40} {d_t:>9.3f} {d_i:>9.3f} "
            f"{'-' if ov is None and rov is None else f'{d_o:.3f}':>9} "
            f"{ls.launches:>7}/{ref['launches']:<7}"
            f"  {'-' if ov is None else f'{ov:.2f}':>11} / "
            f"{'-' if rov is None else f'{rov:.2f}':<10}"
        )
    print(f"{'largest difference (points)':<40} {worst[0]:>9.3f} {worst[1]:>9.3f} {worst[2]:>9.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
