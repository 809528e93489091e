"""JSON decoders on one large torch.profiler trace: what parsing alone costs.

    .venv/bin/python bench/bench_decoders.py TRACE.json [--rounds 2] [--out results.json]

Each decoder runs in its own fresh process (wall time, CPU time and peak RSS from
``wait4``), alternating, ``--rounds`` times:

- ``json``: the standard library's ``json.loads`` of the whole text (dicts);
- ``orjson``: ``orjson.loads`` of the whole bytes (dicts; skipped if not installed);
- ``msgspec-any``: ``msgspec.json.decode`` without a type (dicts);
- ``msgspec-typed``: ``msgspec.json.decode`` into Structs that hold only the
  fields ``gputui analyze`` reads, ``args`` kept as ``msgspec.Raw`` (the floor
  ``bench_analyze.py`` measures too).

The bytes are read whole first (their size is in every figure's peak RSS), as a
decoder that takes one buffer needs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

DECODERS = {
    "json": "import json\ndoc = json.loads(data)\nn = len(doc['traceEvents'])",
    "orjson": "import orjson\ndoc = orjson.loads(data)\nn = len(doc['traceEvents'])",
    "msgspec-any": "import msgspec\ndoc = msgspec.json.decode(data)\nn = len(doc['traceEvents'])",
    "msgspec-typed": "from floor import decode_floor\nn = decode_floor(data)",
}

CHILD = r"""
import os, sys, time, resource
sys.path.insert(0, {bench!r})
t0 = time.perf_counter()
with open(sys.argv[1], "rb") as fh:
    data = fh.read()
t1 = time.perf_counter()
{code}
t2 = time.perf_counter()
print(n, round(t1 - t0, 3), round(t2 - t1, 3))
"""


def measure(name: str, path: Path) -> dict[str, Any]:
    """``name`` on ``path`` in a fresh process: times and its own peak RSS."""
    code = CHILD.format(bench=str(REPO / "bench"), code=DECODERS[name]).replace(
        "print(n,", "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, n,"
    )
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["?"]
        return {"decoder": name, "error": tail[0]}
    rss_kb, events, read_s, decode_s = done.stdout.split()
    return {
        "decoder": name,
        "events": int(events),
        "read_s": float(read_s),
        "decode_s": float(decode_s),
        "wall_s": round(wall, 3),
        "peak_rss_mib": round(int(rss_kb) / 1024, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", help="an uncompressed JSON trace")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args()
    path = Path(args.trace)
    names = list(DECODERS)
    try:
        import orjson  # noqa: F401
    except ImportError:
        names.remove("orjson")
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "python": platform.python_version(),
        "trace_bytes": path.stat().st_size,
        "loadavg_before": os.getloadavg(),
        "runs": [],
    }
    for r in range(args.rounds):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            got = measure(name, path)
            results["runs"].append(got)
            print(json.dumps(got), flush=True)
    results["loadavg_after"] = os.getloadavg()
    summary = {}
    for name in names:
        ok = [g for g in results["runs"] if g["decoder"] == name and "error" not in g]
        if ok:
            summary[name] = {
                "decode_s": statistics.median(g["decode_s"] for g in ok),
                "peak_rss_mib": max(g["peak_rss_mib"] for g in ok),
            }
    results["summary"] = summary
    print(json.dumps(summary, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
