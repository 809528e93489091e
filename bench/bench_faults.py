"""What viewers under load cost a training job: 50 viewers at once, a viewer
that never reads, against a job with one viewer.

    .venv/bin/python bench/bench_faults.py --out /tmp/bench-faults.json
    .venv/bin/python bench/bench_faults.py --rounds 1 --seconds 3    # quick look

A synthetic job (no torch: a fixed amount of Python work per step, about 1 ms,
unpaced, with ``gputui.hook.step()``) runs throughout.  A probe viewer in this
process stays subscribed and reads every step record; the step times below are
the records' wall times over each window.  Scenarios, interleaved round by round
so that drift of the machine falls on all of them alike:

- ``baseline``: the probe alone, and ``baseline A/A``: the same again, which
  shows how much two identical windows differ on this machine;
- ``50 viewers``: 49 more connect at once from a helper process (raw sockets
  that subscribe and read without decoding, so the helper's CPU stays small and
  the cost measured is the hook's: the hook encodes and sends to each viewer);
  the hook admits up to its limit and refuses the rest with a reason;
- ``stuck viewer``: a raw socket subscribes and never reads.

Reported per scenario: median over rounds of the mean and p99 step time, their
ratio to the baseline, the job's CPU, and (for the helper's viewers) how many
were admitted, refused, and got step data.

Then recovery times, ``--recoveries`` times each: a viewer SIGKILLed until the
hook has given its slot back (polled through the hello's viewer count), and a
job SIGKILLed until its subscribed viewer has the ``Disconnected`` event.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import select
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

JOB = r"""
import sys, time
import gputui.hook
seconds, loops = float(sys.argv[1]), int(sys.argv[2])

def work(n):
    x = 0
    for i in range(n):
        x += i
    return x

gputui.hook.install()
t0 = time.perf_counter()
while time.perf_counter() - t0 < seconds:
    with gputui.hook.phase("work"):
        work(loops)
    gputui.hook.step()
"""

# -- helper process: many raw viewers (--viewers N) ----------------------------------------
HEADER = struct.Struct(">I")


def viewers_main(path: str, count: int, read: bool) -> int:
    """Connect ``count`` raw viewers, subscribe each, read (or not) until stdin
    closes; print what each got as JSON."""
    from gputui.protocol import framing

    subscribe = framing.encode("subscribe", history=0, memory=True)
    socks: list[socket.socket] = []
    for _ in range(count):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        s.setblocking(False)
        socks.append(s)
    state: dict[int, dict[str, Any]] = {
        s.fileno(): {"buf": b"", "first": None, "steps_frames": 0, "bytes": 0} for s in socks
    }
    print("connected", flush=True)  # each subscribes once its first frame is a hello
    subscribed: set[int] = set()
    reading = list(socks)
    while True:
        ready, _, _ = select.select([sys.stdin, *reading], [], [], 0.5)
        if sys.stdin in ready and not sys.stdin.readline():
            break
        for item in ready:
            if not isinstance(item, socket.socket):
                continue
            s = item
            st = state[s.fileno()]
            try:
                data = s.recv(1 << 20)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                reading.remove(s)
                continue
            st["bytes"] += len(data)
            buf = st["buf"] + data
            while len(buf) >= 4:
                (n,) = HEADER.unpack_from(buf)
                if len(buf) < 4 + n:
                    break
                payload, buf = buf[4 : 4 + n], buf[4 + n :]
                if st["first"] is None:
                    first = json.loads(payload)  # hello or the refusal
                    st["first"] = first
                    if first.get("type") == "hello":
                        s.setblocking(True)
                        s.sendall(subscribe)
                        s.setblocking(False)
                        subscribed.add(s.fileno())
                        if not read:
                            reading.remove(s)  # from now on it never reads
                            buf = b""
                            break
                elif b'"type":"steps"' in payload[:40] or b'"steps":[' in payload:
                    st["steps_frames"] += 1
            st["buf"] = buf
    admitted = [st for st in state.values() if (st["first"] or {}).get("type") == "hello"]
    refusals = [st["first"] for st in state.values() if (st["first"] or {}).get("type") == "error"]
    print(
        json.dumps(
            {
                "admitted": len(admitted),
                "refused": len(refusals),
                "refusal": refusals[0].get("error") if refusals else None,
                "admitted_with_steps": sum(1 for st in admitted if st["steps_frames"] > 0),
            }
        ),
        flush=True,
    )
    for s in socks:
        s.close()
    return 0


# -- orchestration --------------------------------------------------------------------------
def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _work(n: int) -> int:
    x = 0
    for i in range(n):
        x += i
    return x


def _calibrate(target_s: float) -> int:
    """Loops of the job's work() that take ``target_s`` here."""
    n = 20000
    while True:
        t0 = time.perf_counter()
        _work(n)
        took = time.perf_counter() - t0
        if took > 0.01:
            return max(1, int(n * target_s / took))
        n *= 2


class Probe:
    """The always-subscribed viewer: collects (end time, wall) of every record."""

    def __init__(self, pid: int) -> None:
        from gputui.client.hook import HookClient
        from gputui.protocol.schema import Status, StepBatch

        self.Status, self.StepBatch = Status, StepBatch
        self.records: list[tuple[float, float]] = []
        self.status: Any = None
        self.client = HookClient.connect(pid)
        self.client.subscribe(history=0, memory=False)
        self.client.start(on_event=self._on_event)

    def _on_event(self, event: Any) -> None:
        if isinstance(event, self.StepBatch):
            self.records.extend((s.t, s.wall) for s in event.steps)
        elif isinstance(event, self.Status):
            self.status = event

    def window(self, t0: float, t1: float) -> list[float]:
        return [wall for t, wall in list(self.records) if t0 <= t < t1]


def _helper(path: str, count: int, read: bool) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--viewers", str(count), "--path", path]
        + ([] if read else ["--no-read"]),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "connected":
        raise SystemExit("the helper's viewers did not connect")
    return proc


def _finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = proc.communicate(input="", timeout=60)
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def measure(scenario: str, probe: Probe, job_pid: int, path: str, seconds: float) -> dict[str, Any]:
    helper = None
    if scenario == "50 viewers":
        helper = _helper(path, 49, read=True)
    elif scenario == "stuck viewer":
        helper = _helper(path, 1, read=False)
    time.sleep(1.0)  # connections settled, backlogs sent
    cpu0, t0 = _cpu_seconds(job_pid), time.time()
    time.sleep(seconds)
    cpu1, t1 = _cpu_seconds(job_pid), time.time()
    time.sleep(0.5)  # the probe has the window's records
    walls = probe.window(t0, t1)
    row: dict[str, Any] = {
        "scenario": scenario,
        "steps": len(walls),
        "mean_ms": round(1000 * statistics.fmean(walls), 4) if walls else None,
        "p99_ms": round(1000 * sorted(walls)[int(0.99 * (len(walls) - 1))], 4) if walls else None,
        "job_cpu_pct": round(100 * (cpu1 - cpu0) / (t1 - t0), 1),
    }
    if helper is not None:
        row.update(_finish(helper))
    return row


def _viewers_now(pid: int) -> int:
    """The hook's viewer count, this connection included."""
    from gputui.client.hook import HookClient

    client = HookClient.connect(pid)
    client.close()
    return client.hello.status.viewers


def viewer_kill_recovery(job_pid: int, path: str) -> float:
    """Seconds from a viewer's SIGKILL until the hook has freed its slot."""
    before = _viewers_now(job_pid)  # the probe and this poll
    helper = _helper(path, 1, read=True)
    deadline = time.monotonic() + 10
    while _viewers_now(job_pid) != before + 1:
        if time.monotonic() > deadline:
            raise SystemExit("the helper's viewer was never counted")
        time.sleep(0.005)
    t0 = time.perf_counter()
    helper.kill()
    while _viewers_now(job_pid) != before:
        if time.perf_counter() - t0 > 10:
            raise SystemExit("the killed viewer's slot was not freed in 10 s")
    took = time.perf_counter() - t0
    helper.wait()
    return took


def job_kill_recovery(loops: int) -> float:
    """Seconds from a job's SIGKILL until its viewer has the Disconnected event."""
    from gputui.client.hook import Disconnected, HookClient
    from gputui.protocol import find_socket
    from gputui.protocol.schema import StepBatch

    job = subprocess.Popen(
        [sys.executable, "-c", JOB, "60", str(loops)],
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    try:
        deadline = time.monotonic() + 30
        while find_socket(job.pid) is None:
            if job.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the job did not open its socket")
            time.sleep(0.02)
        client = HookClient.connect(job.pid)
        client.subscribe(history=0, memory=False)
        client.start()
        deadline = time.monotonic() + 10
        while not isinstance(client.get(timeout=1), StepBatch):  # streaming now
            if time.monotonic() > deadline:
                raise SystemExit("the viewer got no steps")
        t0 = time.perf_counter()
        job.kill()
        while True:
            event = client.get(timeout=10)
            if event is None:
                raise SystemExit("no Disconnected event 10 s after the job's SIGKILL")
            if isinstance(event, Disconnected):
                took = time.perf_counter() - t0
                break
        client.close()
        return took
    finally:
        job.kill()
        job.wait()


def _ms_summary(values: list[float]) -> dict[str, float]:
    ms = sorted(1000 * v for v in values)
    return {
        "n": len(ms),
        "median_ms": round(statistics.median(ms), 2),
        "max_ms": round(ms[-1], 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0, help="measured window")
    parser.add_argument("--step-ms", type=float, default=1.0, help="work per step")
    parser.add_argument("--recoveries", type=int, default=20, help="kills of each kind")
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--viewers", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--no-read", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.viewers is not None:
        return viewers_main(args.path, args.viewers, not args.no_read)

    from gputui.protocol import find_socket

    work = Path(tempfile.mkdtemp(prefix="gtf-", dir="/tmp"))
    os.environ["GPUTUI_SOCKET_DIR"] = str(work / "sock")
    scenarios = ["baseline", "50 viewers", "baseline A/A", "stuck viewer"]
    total = args.rounds * len(scenarios) * (args.seconds + 3) + 30
    loops = _calibrate(args.step_ms / 1000.0)
    job = subprocess.Popen(
        [sys.executable, "-c", JOB, str(total), str(loops)],
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    rows: list[dict[str, Any]] = []
    try:
        deadline = time.monotonic() + 30
        while (path := find_socket(job.pid)) is None:
            if job.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the job did not open its socket")
            time.sleep(0.02)
        probe = Probe(job.pid)
        time.sleep(2.0)  # past the first steps
        for rnd in range(args.rounds):
            for scenario in scenarios:
                row = measure(scenario, probe, job.pid, path, args.seconds)
                row["round"] = rnd
                rows.append(row)
                print(f"  round {rnd} {scenario}: {row}", file=sys.stderr)
        kills = [viewer_kill_recovery(job.pid, path) for _ in range(args.recoveries)]
        status = probe.status
        probe.client.close()
        job.kill()
        job.wait()
        job_kills = [job_kill_recovery(loops) for _ in range(args.recoveries)]
    finally:
        job.kill()
        job.wait()
        shutil.rmtree(work, ignore_errors=True)
    recovery = {
        "viewer_sigkill_to_slot_freed": _ms_summary(kills),
        "job_sigkill_to_viewer_disconnected": _ms_summary(job_kills),
    }
    summary = []
    base_mean = statistics.median(r["mean_ms"] for r in rows if r["scenario"] == "baseline")
    base_p99 = statistics.median(r["p99_ms"] for r in rows if r["scenario"] == "baseline")
    print(
        f"{'scenario':<13} {'mean ms':>8} {'x base':>7} {'p99 ms':>8} {'x base':>7} "
        f"{'job CPU%':>9} {'admitted':>9} {'refused':>8} {'with data':>10}"
    )
    for scenario in scenarios:
        mine = [r for r in rows if r["scenario"] == scenario]
        mean = statistics.median(r["mean_ms"] for r in mine)
        p99 = statistics.median(r["p99_ms"] for r in mine)
        entry = {
            "scenario": scenario,
            "mean_ms": round(mean, 4),
            "mean_ratio": round(mean / base_mean, 4),
            "p99_ms": round(p99, 4),
            "p99_ratio": round(p99 / base_p99, 4),
            "job_cpu_pct": statistics.median(r["job_cpu_pct"] for r in mine),
            "admitted": [r.get("admitted") for r in mine],
            "refused": [r.get("refused") for r in mine],
            "admitted_with_steps": [r.get("admitted_with_steps") for r in mine],
            "refusal": next((r.get("refusal") for r in mine if r.get("refusal")), None),
        }
        summary.append(entry)
        counts = [
            "-" if mine[0].get(key) is None else str(mine[0][key])
            for key in ("admitted", "refused", "admitted_with_steps")
        ]
        print(
            f"{scenario:<13} {mean:>8.4f} {entry['mean_ratio']:>7.3f} {p99:>8.4f} "
            f"{entry['p99_ratio']:>7.3f} {entry['job_cpu_pct']:>9} "
            f"{counts[0]:>9} {counts[1]:>8} {counts[2]:>10}"
        )
    hook = None
    if status is not None:
        hook = {
            "refused": status.refused,
            "stuck_viewers": status.stuck_viewers,
            "dropped": status.dropped,
        }
        print(f"hook status: {hook}")
    for name, fig in recovery.items():
        print(f"{name}: median {fig['median_ms']} ms, max {fig['max_ms']} ms over {fig['n']}")
    env = {
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "date": time.strftime("%Y-%m-%d"),
        "step_ms": args.step_ms,
    }
    if args.out:
        Path(args.out).write_text(
            json.dumps(
                {"env": env, "rows": rows, "summary": summary, "hook": hook, "recovery": recovery},
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
