"""Trim an attach recording to its last steps, for keeping it as test data.

    python bench/trim_recording.py IN.jsonl.gz OUT.jsonl.gz [--keep N]

A recording of a fast job holds every step record the hook sent (its history
first, then each batch): tens of thousands of steps, most of its bytes.  The
viewer's statistics and the analyzer read the last ``--window`` steps (1,000
by default), so a recording kept for tests needs only its last steps: this
drops the step records before the last ``N`` (4,000) and the step messages
left empty; every other message (hello, status, memory, GPU samples, the
capture, the Python profile) stays as recorded.  It then replays both files
with ``gputui attach --replay --once --json`` and says whether the reports
differ in anything but the count of steps received.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
from typing import Any


def _steps(rec: dict[str, Any]) -> list[dict[str, Any]] | None:
    msg = rec.get("msg")
    if isinstance(msg, dict) and msg.get("type") == "steps":
        return msg.get("steps")
    return None


def trim(src: str, dst: str, keep: int) -> tuple[int, int]:
    with gzip.open(src, "rt", encoding="utf-8") as f:
        lines = [json.loads(line) for line in f if line.strip()]
    last = max((s["i"] for rec in lines for s in (_steps(rec) or ()) if "i" in s), default=0)
    first = last - keep + 1
    out, dropped = [], 0
    for rec in lines:
        steps = _steps(rec)
        if steps is not None:
            kept = [s for s in steps if s.get("i", first) >= first]
            dropped += len(steps) - len(kept)
            if not kept:
                continue
            rec["msg"]["steps"] = kept
        out.append(rec)
    with gzip.open(dst, "wt", encoding="utf-8", compresslevel=9) as f:
        for rec in out:
            f.write(json.dumps(rec, separators=(",", ":")) + "\n")
    return dropped, last


def report(path: str) -> dict[str, Any]:
    run = subprocess.run(
        [sys.executable, "-m", "gputui", "attach", "--replay", path, "--once", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    rep = json.loads(run.stdout)
    for key in ("steps_received", "recording"):
        rep.pop(key, None)
    return rep


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--keep", type=int, default=4000, help="step records kept (4000)")
    args = ap.parse_args()
    dropped, last = trim(args.src, args.dst, args.keep)
    same = report(args.src) == report(args.dst)
    what = (
        f"dropped {dropped} step records before step {last - args.keep + 1}"
        if dropped
        else f"all {last + 1 if last else 0} steps kept or fewer: nothing dropped"
    )
    print(
        f"{args.dst}: {what}; report {'the same' if same else 'DIFFERS'} but for the steps received"
    )
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
