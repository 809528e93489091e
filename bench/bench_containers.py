"""What container and Slurm attribution and PID mapping cost per process per refresh.

    python bench/bench_containers.py [--out FILE.json] [--procs 512] [--refreshes 200]

Four workloads, timed in one run with a baseline:

- ``fake``: a /proc tree in a temporary directory with ``--procs`` processes:
  half in docker scopes (64 containers), a quarter in Kubernetes pods
  (cri-containerd scopes, 16 pods, with hostname and namespace files), a
  quarter on the host.  The runtime's API is not asked (no sockets): a
  container's name look-up happens once per container, within its timeout
  (0.25 s), and is cached after that whatever it answered.
- ``slurm``: a /proc tree with ``--procs`` processes: half in the steps of 16
  Slurm jobs under cgroup v2 (``slurmstepd.scope/job_J/step_S/user/task_0``),
  a quarter in 4 jobs under cgroup v1 (``/slurm/uid_U/job_J/step_S/task_0``),
  a quarter on the host.  Half of the processes in jobs have an environment
  naming their job (``SLURM_JOB_ID``, ``SLURM_JOB_NAME``); the jobs no such
  process names (8 of the 20) are named by a fake ``scontrol`` (a shell script
  that prints the job's line): one call per job, on the first refresh only.
- ``real``: every process of this machine, through its real /proc.
- ``mapped``: NVML's host pids mapped into a container's PID namespace through
  a fake host /proc (``GPUTUI_HOST_PROC``'s mode): two files per process per
  refresh (the host's start time; the NSpid line when it changed).

For each: the first refresh (every process read: its cgroup, then its names)
and the steady state (the median of ``--refreshes`` refreshes, each over
every process), in microseconds per process.  The steady state is timed twice:
over the very process objects of the last refresh (a process whose NVML and
host values did not change), and over new objects of the same processes (each
refresh made anew before it is timed: a process whose %CPU or memory moved,
which the live source hands over as a new value, so its place is looked up by
(pid, start time) and copied onto it).  The baseline, in the same run:
the host collector's join of the same real processes with their psutil
details (user, command line, CPU, RSS), which every refresh already pays.
The targets: the steady state at most 100 µs per process (containers), at
most 5 µs with Slurm attribution.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gputui.host.attribution import (  # noqa: E402
    HOSTNAME_FILE,
    NAMESPACE_FILE,
    ContainerAttributor,
)
from gputui.host.collector import HostCollector  # noqa: E402
from gputui.host.pid_namespace import INIT_PID_NS, PidMapper  # noqa: E402
from gputui.host.runtime_api import RuntimeNames  # noqa: E402
from gputui.host.scontrol import ScontrolNames  # noqa: E402
from gputui.snapshot.model import ProcessSnapshot  # noqa: E402

TARGET_US = 100.0
SLURM_TARGET_US = 5.0


def _proc(pid: int, start: float | None = 1.0) -> ProcessSnapshot:
    return ProcessSnapshot(
        pid=pid, gpu_index=0, gpu_uuid="GPU-0", type="compute", start_time_s=start
    )


def _write_process(root: Path, pid: int, cgroup: str, nspid: Sequence[int], start: int) -> Path:
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "cgroup").write_text(cgroup)
    (d / "status").write_text("NSpid:\t" + "\t".join(map(str, nspid)) + "\n")
    (d / "stat").write_text(f"{pid} (python) S 1 " + "0 " * 17 + f"{start} 0\n")
    return d


def fake_tree(root: Path, n: int) -> list[int]:
    pids = []
    for i in range(n):
        pid = 1000 + i
        kind = i % 4
        if kind in (0, 1):
            cid = f"{i % 64:064x}"
            cgroup = f"0::/system.slice/docker-{cid}.scope\n"
        elif kind == 2:
            uid = f"{i % 16:08x}_0000_4000_8000_{i % 16:012x}"
            cid = f"{i:064x}"
            cgroup = (
                "0::/kubepods.slice/kubepods-burstable.slice/"
                f"kubepods-burstable-pod{uid}.slice/cri-containerd-{cid}.scope\n"
            )
        else:
            cgroup = "0::/user.slice/user-1000.slice/session-1.scope\n"
        d = _write_process(root, pid, cgroup, (pid,), 5000 + i)
        if kind == 2:
            for name, text in ((HOSTNAME_FILE, f"trainer-{i % 16}\n"), (NAMESPACE_FILE, "ml")):
                path = d / "root" / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
        pids.append(pid)
    return pids


def per_process_us(
    run: Callable[[Sequence[ProcessSnapshot]], object],
    procs: Sequence[ProcessSnapshot],
    refreshes: int,
) -> dict[str, float]:
    """The first call and the median of the next ``refreshes`` (over the same
    objects, then over new ones made before each), in µs per process."""
    n = max(1, len(procs))
    t0 = time.perf_counter()
    run(procs)
    first = (time.perf_counter() - t0) / n * 1e6
    times = []
    for _ in range(refreshes):
        t0 = time.perf_counter()
        run(procs)
        times.append((time.perf_counter() - t0) / n * 1e6)
    times.sort()
    fresh = []
    for _ in range(refreshes):
        new = [dataclasses.replace(p) for p in procs]
        t0 = time.perf_counter()
        run(new)
        fresh.append((time.perf_counter() - t0) / n * 1e6)
    fresh.sort()
    return {
        "first_us": round(first, 2),
        "steady_median_us": round(statistics.median(times), 2),
        "steady_p90_us": round(times[int(0.9 * (len(times) - 1))], 2),
        "new_objects_median_us": round(statistics.median(fresh), 2),
        "new_objects_p90_us": round(fresh[int(0.9 * (len(fresh) - 1))], 2),
        "processes": len(procs),
    }


def bench_fake(n: int, refreshes: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "proc"
        pids = fake_tree(root, n)
        attributor = ContainerAttributor(str(root), RuntimeNames({}), node_hostname="node")
        procs = [_proc(pid) for pid in pids]
        result = per_process_us(attributor.attribute, procs, refreshes)
        placed = attributor.attribute(procs)
        result["in_containers"] = sum(1 for p in placed if p.container is not None)
        return result


def slurm_tree(root: Path, n: int) -> list[int]:
    """``n`` processes: half in v2 job steps, a quarter in v1 ones, a quarter on
    the host; every other process in a job with an environment naming it."""
    pids = []
    for i in range(n):
        pid = 1000 + i
        kind = i % 4
        env = ""
        if kind in (0, 1):
            job = 1000 + i % 32
            cgroup = f"0::/system.slice/slurmstepd.scope/job_{job}/step_{i % 3}/user/task_0\n"
        elif kind == 2:
            job = 2000 + i % 16
            cgroup = f"4:memory:/slurm/uid_{1000 + i % 4}/job_{job}/step_batch/task_0\n"
        else:
            job = 0
            cgroup = "0::/user.slice/user-1000.slice/session-1.scope\n"
        d = _write_process(root, pid, cgroup, (pid,), 5000 + i)
        if job and i % 2 == 0:
            env = f"HOME=/home/u\0SLURM_JOB_ID={job}\0SLURM_JOB_NAME=train-{job}\0PATH=/bin\0"
            (d / "environ").write_text(env)
        pids.append(pid)
    return pids


def bench_slurm(n: int, refreshes: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "proc"
        pids = slurm_tree(root, n)
        scontrol = Path(tmp) / "scontrol"
        scontrol.write_text('#!/bin/sh\necho "JobId=$3 JobName=job-$3 UserId=u(1000)"\n')
        scontrol.chmod(0o755)
        jobs = ScontrolNames(str(scontrol))
        attributor = ContainerAttributor(
            str(root), RuntimeNames({}), node_hostname="node", jobs=jobs
        )
        procs = [_proc(pid) for pid in pids]
        result = per_process_us(attributor.attribute, procs, refreshes)
        placed = attributor.attribute(procs)
        result["in_jobs"] = sum(1 for p in placed if p.slurm is not None)
        result["named"] = sum(1 for p in placed if p.slurm is not None and p.slurm.name)
        result["scontrol_calls"] = jobs.calls
        return result


def bench_mapped(n: int, refreshes: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        here, host = Path(tmp) / "proc", Path(tmp) / "host"
        _write_process(here, 7, "0::/\n", (7,), 100)
        (here / "self").symlink_to("7")
        (here / "7" / "ns").mkdir()
        (here / "7" / "ns" / "pid").symlink_to("pid:[4026532999]")
        _write_process(host, 5000, "0::/\n", (5000, 7), 100)
        (host / "self").symlink_to("5000")
        (host / "1").mkdir()
        (host / "1" / "ns").mkdir()
        (host / "1" / "ns" / "pid").symlink_to(INIT_PID_NS)
        host_pids = []
        for i in range(n):
            local, host_pid = 100 + i, 20000 + i
            _write_process(here, local, "0::/\n", (local,), 9000 + i)
            _write_process(host, host_pid, "0::/\n", (host_pid, local), 9000 + i)
            host_pids.append(host_pid)
        mapper = PidMapper(str(here), str(host))
        assert mapper.mode == "mapped", mapper.mode
        procs = [_proc(pid) for pid in host_pids]
        result = per_process_us(mapper.map, procs, refreshes)
        result["mapped"] = sum(1 for p in mapper.map(procs) if not p.pid_is_host)
        return result


def real_processes() -> list[ProcessSnapshot]:
    import psutil

    procs = []
    for pid in sorted(int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            procs.append(_proc(pid, psutil.Process(pid).create_time()))
        except (psutil.Error, OSError):
            continue
    return procs


def bench_real(refreshes: int) -> dict[str, Any]:
    procs = real_processes()
    attributor = ContainerAttributor()
    result = per_process_us(attributor.attribute, procs, refreshes)
    result["in_containers"] = sum(1 for p in attributor.attribute(procs) if p.container)
    host = HostCollector()
    result["baseline_host_enrich"] = per_process_us(host.enrich, procs, refreshes)
    base = result["baseline_host_enrich"]["steady_median_us"]
    result["steady_vs_baseline"] = round(result["steady_median_us"] / base, 4) if base else None
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--procs", type=int, default=512)
    parser.add_argument("--refreshes", type=int, default=200)
    args = parser.parse_args()
    results = {
        "machine": platform.node(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_before": os.getloadavg(),
        "run": secrets.token_hex(4),
        "fake": bench_fake(args.procs, args.refreshes),
        "slurm": bench_slurm(args.procs, args.refreshes),
        "mapped": bench_mapped(args.procs, args.refreshes),
        "real": bench_real(args.refreshes),
        "load_after": os.getloadavg(),
        "target_us": TARGET_US,
        "slurm_target_us": SLURM_TARGET_US,
    }
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    for name in ("fake", "slurm", "mapped", "real"):
        r = results[name]
        print(
            f"{name:7s} {r['processes']:5d} processes: first {r['first_us']:8.1f} µs/process, "
            f"steady {r['steady_median_us']:6.2f} µs/process (p90 {r['steady_p90_us']:.2f}), "
            f"new objects {r['new_objects_median_us']:6.2f} (p90 {r['new_objects_p90_us']:.2f})"
        )
    slurm = results["slurm"]
    print(
        f"slurm: {slurm['in_jobs']} processes in jobs, {slurm['named']} named, "
        f"{slurm['scontrol_calls']} scontrol calls; steady {slurm['steady_median_us']:.2f}, "
        f"new objects {slurm['new_objects_median_us']:.2f} µs/process "
        f"(target <= {SLURM_TARGET_US:g})"
    )
    base = results["real"]["baseline_host_enrich"]
    print(
        f"baseline: host details of the same real processes {base['steady_median_us']:.2f} "
        f"µs/process; attribution / baseline {results['real']['steady_vs_baseline']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
