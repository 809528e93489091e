"""The typed messages' ``from_wire`` and ``to_wire``, per message type, on the
frames of the recordings in the repository.

    .venv/bin/python bench/bench_wire.py                        # this checkout
    .venv/bin/python bench/bench_wire.py --tree /path/to/other  # another one's gputui
    .venv/bin/python bench/bench_wire.py --compare /path/to/other --rounds 5

Every frame of the embedded attach demos, ``tests/data`` and ``tests/samples``
(hello, status, steps, memory, capture and memory-snapshot progress and results,
Python profiles) is read once with ``json``; then, per type, the time to decode
them all with :func:`gputui.protocol.wire.decode` (what a replay and a viewer's
reader thread pay) and to encode the decoded messages again with ``to_wire``
(what the hook's I/O thread pays for its own messages; its step records take
``StepRecord.wire``, timed as ``steps``), the best of ``--repeat`` runs.
``--compare`` runs this checkout and the other in alternating fresh processes,
``--rounds`` times each, and prints the median of each figure and the ratio.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RECORDINGS = (
    "gputui/data/attach_demo.jsonl.gz",
    "gputui/data/attach_demo_ddp.jsonl.gz",
    "tests/data/cpu_python.jsonl.gz",
    "tests/samples/attach-v1.jsonl.gz",
    "tests/samples/attach-ranks-v2.jsonl.gz",
    *sorted(
        str(p.relative_to(REPO))
        for p in (REPO / "tests/data/h100").glob("*.jsonl.gz")
        if not p.name.startswith("monitor-")
    ),
)


def frames() -> dict[str, list[dict[str, Any]]]:
    """Every message of the recordings, by type (the file headers left out)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for name in RECORDINGS:
        with gzip.open(REPO / name, "rt") as fh:
            for line in fh:
                doc = json.loads(line)
                msg = doc.get("msg", doc)
                kind = msg.get("type") if isinstance(msg, dict) else None
                if isinstance(kind, str) and not kind.startswith("gputui-"):
                    out.setdefault(kind, []).append(msg)
    return out


def best(fn: Any, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def measure(tree: Path, repeat: int) -> dict[str, Any]:
    sys.path.insert(0, str(tree))
    from gputui.protocol.wire import decode

    out: dict[str, Any] = {}
    for kind, msgs in sorted(frames().items()):
        decoded = [decode(m) for m in msgs]
        if None in decoded:  # a recording's own lines (the job's GPU samples)
            continue
        count = len(msgs)

        def dec(msgs: list[dict[str, Any]] = msgs) -> None:
            for m in msgs:
                decode(m)

        def enc(decoded: list[Any] = decoded) -> None:
            for m in decoded:
                m.to_wire()

        out[kind] = {
            "frames": count,
            "from_wire_us": 1e6 * best(dec, repeat) / count,
            "to_wire_us": 1e6 * best(enc, repeat) / count,
        }
    return out


def run_child(tree: Path, repeat: int) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--tree", str(tree), "--repeat", str(repeat), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def compare(other: Path, rounds: int, repeat: int) -> None:
    runs: dict[str, list[dict[str, Any]]] = {"this": [], "other": []}
    for _ in range(rounds):
        runs["other"].append(run_child(other, repeat))
        runs["this"].append(run_child(REPO, repeat))
    three = f"{'other':>6} {'this':>6} {'ratio':>6}"
    print(f"{'type':24} {'frames':>6}  {'from_wire us':>20}  {'to_wire us':>20}")
    print(f"{'':24} {'':>6}  {three}  {three}")
    for kind in runs["this"][0]:
        row = [f"{kind:24} {runs['this'][0][kind]['frames']:>6} "]
        for what in ("from_wire_us", "to_wire_us"):
            a = statistics.median(r[kind][what] for r in runs["other"])
            b = statistics.median(r[kind][what] for r in runs["this"])
            row.append(f" {a:6.2f} {b:6.2f} {b / a:6.3f}")
        print("".join(row))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, default=REPO, help="the checkout whose gputui to time")
    parser.add_argument("--compare", type=Path, help="another checkout, timed alternately")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if args.compare is not None:
        compare(args.compare.resolve(), args.rounds, args.repeat)
        return
    result = measure(args.tree.resolve(), args.repeat)
    if args.json:
        print(json.dumps(result))
        return
    for kind, row in result.items():
        print(
            f"{kind:24} {row['frames']:>6} frames  from_wire {row['from_wire_us']:8.2f} us"
            f"  to_wire {row['to_wire_us']:8.2f} us"
        )


if __name__ == "__main__":
    main()
