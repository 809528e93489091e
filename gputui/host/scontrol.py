"""Slurm job names from ``scontrol show job <id> --oneliner``.

Asked only for a job whose processes' environment gputui may not read (another
user's job, gputui not root).  Every call has a short timeout and a bounded
answer; every answer (a failure too, for a while) is cached by job id, so a job
costs one call, not one per refresh.  A missing ``scontrol`` is looked for
again only after :data:`MISSING_RETRY_S`, and one that timed out or could not
run is not asked about other jobs for :data:`RETRY_S`: a hung controller costs
the poller one timeout a while, not one per job.  Nothing here raises.
"""

from __future__ import annotations

import os
import selectors
import shutil
import subprocess
import time
from collections.abc import Callable

from gputui.host.slurm import JobNames, from_scontrol

TIMEOUT_S = 1.0
#: the most of an answer read (one job's line is about a kilobyte)
MAX_ANSWER_BYTES = 1 << 16
#: a failed look-up, or a slurm controller that did not answer, is tried again after this
RETRY_S = 60.0
#: scontrol not installed: looked for again after this
MISSING_RETRY_S = 300.0
#: the most jobs kept (a node runs a few at a time)
MAX_CACHED = 4096


def _missing(note: str) -> JobNames:
    return JobNames(None, None, None, note)


class ScontrolNames:
    """Job names by job id, asked of ``scontrol`` once and cached."""

    def __init__(
        self,
        command: str = "scontrol",
        timeout_s: float = TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._command = command
        self._timeout_s = timeout_s
        self._clock = clock
        #: job id -> (names, when to ask again; None: never)
        self._cache: dict[int, tuple[JobNames, float | None]] = {}
        #: why scontrol is not asked, until when (missing, hung, not runnable)
        self._down: tuple[str, float] | None = None
        #: how many times scontrol was run (for tests and the benchmark)
        self.calls = 0

    def lookup(self, job_id: int) -> JobNames:
        now = self._clock()
        cached = self._cache.get(job_id)
        if cached is not None and (cached[1] is None or now < cached[1]):
            return cached[0]
        down = self._down
        if down is not None and now < down[1]:
            return _missing(down[0])
        names = self._ask(job_id)
        retry = None if names.name is not None else self._clock() + RETRY_S
        if len(self._cache) >= MAX_CACHED:
            self._cache.clear()
        self._cache[job_id] = (names, retry)
        return names

    def _ask(self, job_id: int) -> JobNames:
        path = shutil.which(self._command)
        if path is None:
            note = f"{self._command} is not installed here: no job names but the environment's"
            self._down = (note, self._clock() + MISSING_RETRY_S)
            return _missing(note)
        try:
            answer = run_bounded([path, "show", "job", str(job_id), "--oneliner"], self._timeout_s)
        except TimeoutError:
            note = f"{self._command} did not answer in {self._timeout_s:g} s"
            self._down = (note, self._clock() + RETRY_S)
            return _missing(note)
        except OSError as exc:
            note = f"{self._command} could not run ({exc.strerror or type(exc).__name__})"
            self._down = (note, self._clock() + RETRY_S)
            return _missing(note)
        except ValueError as exc:  # it answered: about this job only
            self.calls += 1
            return _missing(f"{self._command} gave no answer about job {job_id} ({exc})")
        self.calls += 1
        status, out = answer
        text = out.decode("utf-8", "replace")
        if status != 0:
            first = text.strip().splitlines()[0][:120] if text.strip() else f"status {status}"
            return _missing(f"{self._command} knows no job {job_id} ({first})")
        return from_scontrol(text, job_id)


def run_bounded(argv: list[str], timeout_s: float) -> tuple[int, bytes]:
    """Run ``argv`` with standard input closed:
    (exit status, its output and error output).  A command still running after
    ``timeout_s`` is killed and TimeoutError raised, one that prints more than
    :data:`MAX_ANSWER_BYTES` is killed and ValueError raised; OSError when it
    cannot start."""
    deadline = time.monotonic() + timeout_s
    env = dict(os.environ, LC_ALL="C")
    with subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
    ) as proc:
        assert proc.stdout is not None
        chunks: list[bytes] = []
        size = 0
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(proc.stdout, selectors.EVENT_READ)
                while size < MAX_ANSWER_BYTES:
                    left = deadline - time.monotonic()
                    if left <= 0 or not selector.select(left):
                        raise TimeoutError(argv[0])
                    chunk = os.read(proc.stdout.fileno(), MAX_ANSWER_BYTES - size)
                    if not chunk:
                        break
                    chunks.append(chunk)
                    size += len(chunk)
                else:
                    raise ValueError(f"an answer longer than {MAX_ANSWER_BYTES} bytes")
            status = proc.wait(max(0.0, deadline - time.monotonic()))
        except (TimeoutError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
            raise TimeoutError(argv[0]) from None
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    return status, b"".join(chunks)
