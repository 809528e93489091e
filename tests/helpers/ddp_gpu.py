"""A DDP job on GPUs with NCCL under ``gputui run -- torchrun`` (the hook in
every rank), for the gpu-marked tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from gputui.client.job_group import parent_pid
from gputui.protocol import list_sockets
from tests.helpers import hookutil
from tests.helpers.deadlines import START_S, WAIT_S

JOB = hookutil.REPO / "bench" / "jobs" / "train_ddp_cpu.py"
TORCHRUN = Path(sys.executable).with_name("torchrun")
#: NCCL's multicast paths stay off on the machines these tests run on
NCCL_SAFE = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


@dataclass
class DdpJob:
    proc: subprocess.Popen[str]
    env: dict[str, str]
    #: the ranks' pids, in order
    ranks: list[int]


@contextmanager
def ddp_job(nproc: int, *job_args: str) -> Iterator[DdpJob]:
    """The job running, every rank's socket up; stopped (SIGTERM) after."""
    with hookutil.isolated_dirs() as dirs:
        env = hookutil.make_env(*dirs, **NCCL_SAFE)
        cmd = [
            sys.executable, "-m", "gputui", "run", "--",
            str(TORCHRUN), "--standalone", f"--nproc-per-node={nproc}", str(JOB),
            "--device", "cuda", "--steps", "0", *job_args,
        ]  # fmt: skip
        proc = subprocess.Popen(
            cmd, env=env, cwd=str(hookutil.REPO), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        old = os.environ.get("GPUTUI_SOCKET_DIR")
        os.environ["GPUTUI_SOCKET_DIR"] = env["GPUTUI_SOCKET_DIR"]

        def all_up() -> list[int] | None:
            if proc.poll() is not None:
                raise AssertionError(f"torchrun exited:\n{proc.communicate()[0]}")
            pids = sorted(p for p in list_sockets() if parent_pid(p) == proc.pid)
            return pids if len(pids) == nproc else None

        try:
            ranks = hookutil.wait_for(all_up, START_S, "the ranks' sockets")
            yield DdpJob(proc, env, ranks)
        finally:
            if old is None:
                os.environ.pop("GPUTUI_SOCKET_DIR", None)
            else:
                os.environ["GPUTUI_SOCKET_DIR"] = old
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=WAIT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
            print(proc.communicate(timeout=WAIT_S)[0][-3000:])
