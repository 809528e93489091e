"""Opening a long recording: time and peak memory, this code against a baseline.

    .venv/bin/python bench/bench_recording.py                      # this code only
    .venv/bin/python bench/bench_recording.py --baseline REF --out /tmp/rec.json

A 24-hour recording (86,400 snapshots at 1 s) is generated from the embedded
demo's snapshots, with times moved on and the busy values varied so that it
compresses like a real one (not checked in).  For the working tree and for the
code of ``--baseline`` (a git ref, unpacked to a temporary directory), in turns:

- ``once``: ``gputui --replay FILE --once`` (and ``--json``): wall time from
  start to exit and the process's peak RSS (``wait4``);
- ``frame``: ``gputui --replay FILE`` in a 120x40 tmux pane: time from launch to
  a first full frame (device panel and process table drawn), and the peak RSS
  (VmHWM) at that moment;
- ``bomb``: ``--once`` on a 2 MB gzip file that inflates to 2 GiB (a header
  line, then zeros without a newline): time to exit and peak RSS.  The
  baseline is given ``--bomb-timeout`` seconds, then killed;
- ``demo_once``, ``demo_frame``: the same two for ``--demo`` (its start-up must
  stay fast);
- ``decode``: decoding one demo snapshot from parsed JSON, best of 5 passes.

Each measurement runs ``--rounds`` times per code, alternating; the table shows
medians.  Needs tmux for ``frame``.
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SESSION = "gputui-bench-rec"
PANE_T = f"={SESSION}:"
HOURS_24 = 86_400


def make_long_recording(path: Path, snapshots: int, interval_s: float = 1.0) -> dict[str, Any]:
    """A recording of ``snapshots`` snapshots built from the demo's (format 1)."""
    from importlib import resources

    raw = resources.files("gputui.data").joinpath("demo.jsonl.gz").read_bytes()
    lines = gzip.decompress(raw).splitlines()
    header = json.loads(lines[0])
    bodies = [json.loads(line) for line in lines[1:]]
    t0 = 1_795_000_000.0
    header.update(created_s=t0, interval_s=interval_s, note="bench: a synthetic 24 h session")
    start = time.perf_counter()
    with open(path, "wb") as raw_file, gzip.GzipFile(fileobj=raw_file, mode="wb") as out:
        out.write(json.dumps(header, separators=(",", ":")).encode() + b"\n")
        for i in range(snapshots):
            body = copy.deepcopy(bodies[i % len(bodies)])
            body["timestamp_s"] = t0 + i * interval_s
            # Vary what a real session varies, so that it compresses like one.
            body["sample_latency_ms"] = 1.0 + (i * 7919 % 1000) / 333.0
            host = body.get("host") or {}
            host["uptime_s"] = 1000.0 + i * interval_s
            host["cpu_pct"] = (i * 31 % 1000) / 10.0
            for device in body.get("devices") or []:
                device["energy_j"] = 1.0e6 + i * 412.5
                device["power_w"] = 300.0 + (i * 17 % 4000) / 10.0
                device["temp_gpu_c"] = 40.0 + i * 13 % 35
            for proc in body.get("processes") or []:
                proc["cpu_pct"] = (i * 53 % 1500) / 10.0
            out.write(json.dumps(body, separators=(",", ":")).encode() + b"\n")
    return {
        "snapshots": snapshots,
        "bytes": path.stat().st_size,
        "generate_s": round(time.perf_counter() - start, 1),
    }


def make_bomb(path: Path, inflated: int = 2 * 2**30) -> int:
    """A gzip file whose body inflates to ``inflated`` zero bytes after a header."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    head = json.dumps({"type": "gputui-recording", "schema": 1}).encode() + b"\n"
    chunk = b"\0" * 2**24
    with open(path, "wb") as f:
        f.write(comp.compress(head))
        for _ in range(inflated // len(chunk)):
            f.write(comp.compress(chunk))
        f.write(comp.flush())
    return path.stat().st_size


DECODE = """
import gzip, json, time
from importlib import resources
from gputui.snapshot.codec import snapshot_from_json
raw = resources.files("gputui.data").joinpath("demo.jsonl.gz").read_bytes()
objs = [json.loads(line) for line in gzip.decompress(raw).splitlines()[1:]]
best = None
for _ in range(5):
    t = time.perf_counter()
    for obj in objs:
        snapshot_from_json(obj)
    per = (time.perf_counter() - t) / len(objs)
    best = per if best is None else min(best, per)
print(best * 1000)
"""


def decode_ms(code_dir: Path) -> dict[str, Any]:
    """Decoding one demo snapshot from its parsed JSON, best of 5 passes (ms)."""
    out = subprocess.run(
        [sys.executable, "-c", DECODE],
        cwd=code_dir,
        env=code_env(code_dir),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {"wall_s": float(out) / 1000.0, "ms_per_snapshot": round(float(out), 3)}


def code_env(code_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(code_dir)
    env["TERM"] = "xterm-256color"
    env.pop("GPUTUI_DEBUG", None)
    return env


def run_once(code_dir: Path, args: list[str], timeout_s: float) -> dict[str, Any]:
    """One ``python -m gputui ARGS`` run: wall time, peak RSS, exit status."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gputui", *args],
        cwd=code_dir,
        env=code_env(code_dir),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = start + timeout_s
    status = None
    usage = None
    while time.perf_counter() < deadline:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        time.sleep(0.005)
    else:
        proc.kill()
        _pid, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = -9
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status) if proc.returncode is None else -9
    stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    return {
        "wall_s": round(wall, 3),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1) if usage else None,
        "rc": proc.returncode,
        "timed_out": proc.returncode == -9,
        "stderr": stderr.strip()[-200:],
    }


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True).stdout


def first_frame(code_dir: Path, args: list[str], timeout_s: float) -> dict[str, Any]:
    """Launch to the first full frame in tmux, and VmHWM then."""
    subprocess.run(["tmux", "kill-session", "-t", f"={SESSION}"], capture_output=True)
    command = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "gputui", *args])
    shell = (
        f"cd {shlex.quote(str(code_dir))} && exec env TERM=xterm-256color "
        f"PYTHONPATH={shlex.quote(str(code_dir))} {command}"
    )
    start = time.perf_counter()
    tmux("new-session", "-d", "-s", SESSION, "-x", "120", "-y", "40", shell)
    pid = int(tmux("display-message", "-p", "-t", PANE_T, "#{pane_pid}").strip())
    try:
        while time.perf_counter() - start < timeout_s:
            text = tmux("capture-pane", "-p", "-t", PANE_T)
            if "H100" in text and "PID" in text and "%" in text:
                wall = time.perf_counter() - start
                return {"first_frame_s": round(wall, 3), "peak_rss_mb": _hwm_mb(pid)}
            time.sleep(0.01)
        return {"first_frame_s": None, "peak_rss_mb": _hwm_mb(pid), "timed_out": True}
    finally:
        subprocess.run(["tmux", "kill-session", "-t", f"={SESSION}"], capture_output=True)


def _hwm_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def unpack(ref: str, into: Path) -> Path:
    """The ``gputui`` package of git ``ref``, unpacked under ``into``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "gputui"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def median_of(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return round(statistics.median(values), 3) if values else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--baseline", default=None, help="git ref of the code to compare with")
    p.add_argument("--snapshots", type=int, default=HOURS_24)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--timeout", type=float, default=120.0, help="per run, seconds")
    p.add_argument("--bomb-timeout", type=float, default=60.0)
    p.add_argument("--skip", default="", help="comma-separated measurements to skip")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    if "frame" not in skip and not shutil.which("tmux"):
        sys.exit("bench_recording: 'frame' needs tmux (or --skip frame)")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        codes = {"this": ROOT}
        if args.baseline:
            codes["baseline"] = unpack(args.baseline, Path(tempfile.mkdtemp(dir=tmp)))
        rec = tmp / "day.jsonl.gz"
        made = make_long_recording(rec, args.snapshots)
        print(f"recording: {made}", file=sys.stderr)
        bomb = tmp / "bomb.jsonl.gz"
        bomb_bytes = make_bomb(bomb)
        runs: dict[str, dict[str, list[dict[str, Any]]]] = {c: {} for c in codes}
        plan = [
            ("once", lambda d: run_once(d, ["--replay", str(rec), "--once"], args.timeout)),
            (
                "once_json",
                lambda d: run_once(d, ["--replay", str(rec), "--once", "--json"], args.timeout),
            ),
            ("frame", lambda d: first_frame(d, ["--replay", str(rec)], args.timeout)),
            ("bomb", lambda d: run_once(d, ["--replay", str(bomb), "--once"], args.bomb_timeout)),
            ("demo_once", lambda d: run_once(d, ["--demo", "--once"], args.timeout)),
            ("demo_frame", lambda d: first_frame(d, ["--demo"], args.timeout)),
            ("decode", decode_ms),
        ]
        for _ in range(args.rounds):
            for name, measure in plan:
                if name in skip:
                    continue
                for code, code_dir in codes.items():
                    result = measure(code_dir)
                    runs[code].setdefault(name, []).append(result)
                    print(f"{code:8} {name:9} {result}", file=sys.stderr)
    summary: dict[str, dict[str, Any]] = {}
    for code, by_name in runs.items():
        for name, results in by_name.items():
            time_key = "first_frame_s" if name.endswith("frame") else "wall_s"
            summary.setdefault(code, {})[name] = {
                "time_s_median": median_of(results, time_key),
                "peak_rss_mb_median": median_of(results, "peak_rss_mb"),
                "exit_codes": sorted({r.get("rc") for r in results if "rc" in r}),
                "timed_out": sum(1 for r in results if r.get("timed_out")),
            }
    result = {
        "recording": made,
        "bomb_bytes": bomb_bytes,
        "baseline": args.baseline,
        "summary": summary,
        "runs": runs,
        "machine": {"cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d")},
    }
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
