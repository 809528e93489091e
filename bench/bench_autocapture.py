"""What the automatic capture costs a job, and what FLOPs and shapes add to a
capture, measured on the job's own steps.

    python bench/bench_autocapture.py --step-ms 2 40 --out autocapture.json      # GPU machine
    python bench/bench_autocapture.py --step-ms 20 200 --device cpu --rounds 2   # CPU here

For each step time asked, a job (``bench/jobs/paced_train.py``: an MLP with
AdamW whose batch is calibrated to that step time) runs under ``gputui run``,
and then:

1. ``gputui attach PID --once --json``: the viewer waits for the job's steady
   state and takes its automatic capture (the job has none of the last 10
   minutes); the report's ``auto_capture`` holds what it cost the job, from the
   job's steps: the profiled steps' mean against the median of the ordinary
   steps before, the steps after them until the result was ready (the first
   pays the profiler's stop), their time beyond the median summed, torch's stop
   time;
2. ``--rounds`` pairs of captures over one connection, in turns: a plain one
   (no shapes, no FLOPs) and one with FLOPs and shapes (the automatic
   capture's options), each once the job is steady again after the previous
   one, with the same arithmetic (``gputui.analysis.auto_capture``) and the
   result's own ``stop_ms``, ``reduce_ms``, ``op_rows_ms``, ``export_ms``,
   ``ready_after_ms`` and trace size.

Prints one table and writes everything to ``--out`` (JSON, with the machine).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gputui.analysis.auto_capture import capture_cost, steadiness  # noqa: E402
from gputui.client.hook import Disconnected, HookClient  # noqa: E402
from gputui.protocol.capture import CaptureResult  # noqa: E402
from gputui.protocol.requests import CaptureRequest  # noqa: E402
from gputui.session.autocapture import auto_request  # noqa: E402
from gputui.session.reading import Collected, capture_live, collect_live  # noqa: E402

JOB = REPO / "bench" / "jobs" / "paced_train.py"
WAIT_S = 600.0


def wait_for(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def start_job(
    step_ms: float, device: str, width: int, env: dict[str, str], tmp: Path
) -> tuple[Any, dict]:
    info = tmp / f"info-{step_ms:g}.json"
    stop = tmp / f"stop-{step_ms:g}"
    cmd = [
        sys.executable, "-m", "gputui", "run", "--",
        sys.executable, str(JOB), "--step-ms", str(step_ms), "--device", device,
        "--seconds", "3600", "--info", str(info), "--stop-file", str(stop),
        "--width", str(width),
    ]  # fmt: skip
    # the job's output (the profiler's own lines among it) goes to a file
    log = open(tmp / f"job-{step_ms:g}.log", "w")
    proc = subprocess.Popen(cmd, env=env, cwd=str(REPO), stdout=log, stderr=log)
    wait_for(lambda: info.exists() or proc.poll() is not None, WAIT_S, "the job to calibrate")
    if proc.poll() is not None:
        raise SystemExit(f"the job exited ({proc.returncode})")
    data = json.loads(info.read_text())
    data["stop_file"] = str(stop)
    return proc, data


def once_auto(pid: int, env: dict[str, str]) -> dict[str, Any]:
    """``attach --once --json``: its automatic capture and what it cost."""
    out = subprocess.run(
        [sys.executable, "-m", "gputui", "attach", str(pid), "--once", "--json"],
        env=env,
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"attach --once failed ({out.returncode}): {out.stderr}")
    report = json.loads(out.stdout)
    return {"auto_capture": report.get("auto_capture"), "mfu": report.get("utilisation")}


def read_until(client: HookClient, got: Collected, done: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        event = client.get(timeout=max(0.0, deadline - time.monotonic()))
        if event is None:
            raise SystemExit("the job stopped sending steps")
        got.add(event)
        if isinstance(event, Disconnected):
            raise SystemExit("the job exited")


def paired(pid: int, rounds: int) -> list[dict[str, Any]]:
    """``rounds`` pairs of captures, plain then with FLOPs, each once the job is
    steady again."""
    client = HookClient.connect(pid)
    out: list[dict[str, Any]] = []
    try:
        got = collect_live(client, 2000, WAIT_S)
        for k in range(rounds * 2):
            read_until(client, got, lambda: steadiness(got.steps).steady, WAIT_S)
            flops = k % 2 == 1
            ask = auto_request(f"bench-{k}")
            if not flops:
                ask = CaptureRequest(id=ask.id, steps=ask.steps, warmup=ask.warmup)
            capture_live(client, got, ask, WAIT_S, quiet=True)
            result = got.capture
            assert isinstance(result, CaptureResult)

            def complete(result: CaptureResult = result) -> bool:
                cost = capture_cost(got.steps, result)
                return cost is not None and cost.complete

            read_until(client, got, complete, WAIT_S)
            cost = capture_cost(got.steps, result)
            assert cost is not None
            out.append(
                {
                    "flops": flops,
                    "ordinary_ms": cost.ordinary_s * 1000,
                    "profiled_steps": cost.profiled_steps,
                    "slowdown": cost.slowdown,
                    "after_steps": cost.after_steps,
                    "extra_ms": cost.extra_s * 1000,
                    "stop_ms": result.stop_ms,
                    "hook_stall_ms": result.hook_stall_ms,
                    "reduce_ms": result.reduce_ms,
                    "op_rows_ms": result.op_rows_ms,
                    "export_ms": result.export_ms,
                    "ready_after_ms": result.ready_after_ms,
                    "events": result.events,
                    "trace_bytes": result.trace_bytes,
                }
            )
    finally:
        client.close()
    return out


def _med(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else None


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--step-ms", type=float, nargs="+", default=[2.0, 40.0])
    p.add_argument("--device", default=None, help="cuda or cpu (default: the job's choice)")
    p.add_argument("--rounds", type=int, default=4, help="pairs of plain and FLOPs captures")
    p.add_argument("--width", type=int, default=None, help="the MLP's width (1024; CPU 256)")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    device = args.device
    if device is None:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    results: dict[str, Any] = {
        "machine": {
            "host": platform.node(),
            "cpus": os.cpu_count(),
            "load": os.getloadavg(),
            "python": platform.python_version(),
            "device": device,
        },
        "date": time.strftime("%Y-%m-%d"),
        "jobs": [],
    }
    if device == "cuda":
        import torch

        results["machine"]["gpu"] = torch.cuda.get_device_name(0)
        results["machine"]["torch"] = torch.__version__
    with tempfile.TemporaryDirectory(prefix="gt-ac-", dir="/tmp") as tmp_s:
        tmp = Path(tmp_s)
        env = dict(os.environ, PYTHONPATH=str(REPO))
        env["GPUTUI_SOCKET_DIR"] = str(tmp / "s")
        env["XDG_CACHE_HOME"] = str(tmp / "cache")
        os.environ["GPUTUI_SOCKET_DIR"] = env["GPUTUI_SOCKET_DIR"]  # this process's viewer
        for step_ms in args.step_ms:
            width = args.width or (1024 if device == "cuda" else 256)
            proc, info = start_job(step_ms, device, width, env, tmp)
            try:
                job: dict[str, Any] = {"step_ms_asked": step_ms, "width": width, **info}
                job["once"] = once_auto(info["pid"], env)
                job["pairs"] = paired(info["pid"], args.rounds) if args.rounds else []
            finally:
                Path(info["stop_file"]).touch()
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
            results["jobs"].append(job)
            _print(job)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))


def _print(job: dict[str, Any]) -> None:
    auto = job["once"]["auto_capture"] or {}
    cost = auto.get("cost") or {}
    print(
        f"\nstep {job['step_ms']:.1f} ms (batch {job['batch']}, {job['device']}): "
        f"attach --once's automatic capture: {auto.get('state')}, "
        f"slowdown x{_fmt(cost.get('slowdown'), '.2f')}, "
        f"extra {_fmt(cost.get('extra_ms'), '.0f')} ms "
        f"over {cost.get('profiled_steps')}+{cost.get('after_steps')} steps, "
        f"stop {_fmt(cost.get('stop_ms'), '.0f')} ms"
    )
    pairs = job["pairs"]
    if not pairs:
        return
    print(
        f"{'capture':<8}{'n':>3}{'step':>9}{'x':>7}{'extra':>9}{'stop':>8}{'reduce':>8}"
        f"{'op rows':>9}{'export':>8}{'ready':>8}{'trace':>10}"
    )
    for flops in (False, True):
        rows = [r for r in pairs if r["flops"] == flops]
        trace = _med(rows, "trace_bytes")
        print(
            f"{'FLOPs' if flops else 'plain':<8}{len(rows):>3}"
            f"{_fmt(_med(rows, 'ordinary_ms'), '8.1f')} {_fmt(_med(rows, 'slowdown'), '6.2f')}"
            f"{_fmt(_med(rows, 'extra_ms'), '9.0f')}{_fmt(_med(rows, 'stop_ms'), '8.0f')}"
            f"{_fmt(_med(rows, 'reduce_ms'), '8.0f')}{_fmt(_med(rows, 'op_rows_ms'), '9.0f')}"
            f"{_fmt(_med(rows, 'export_ms'), '8.0f')}{_fmt(_med(rows, 'ready_after_ms'), '8.0f')}"
            f"{_fmt(None if trace is None else trace / 1e6, '9.2f')}M"
        )


if __name__ == "__main__":
    main()
