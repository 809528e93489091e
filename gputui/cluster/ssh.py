"""``gputui cluster --ssh``: one ssh per node, each read on a thread of its own.

Each node runs ``gputui serve --stdio`` (``gputui.cluster.wire``) through
``ssh -T -o BatchMode=yes -o ConnectTimeout=N [-F FILE] HOST``: ssh resolves
the host (aliases of ``~/.ssh/config`` or ``--ssh-config``), never asks for a
password, and gives up on a node that does not answer.  Where the node has no
gputui (the remote shell's exit status 127, or a gputui without ``serve``),
the same ssh runs ``nvidia-smi --query-gpu`` instead (``gputui.cluster.smi``)
and the node is marked "nvidia-smi only".

The threads block on the pipes; the screen never waits on them: it asks each
reader for its latest values (:meth:`HostReader.view`, a copy under a lock).
A node that fails, goes silent or sends what is not the protocol is marked
with the reason and called again after a delay that doubles up to
``BACKOFF_MAX_S``.  Nothing read from a node is trusted: lines are capped at
``wire.MAX_LINE_BYTES``, decoded strictly, and its text is cleaned where shown.
"""

from __future__ import annotations

import collections
import math
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gputui.analysis.throttle import costly
from gputui.cluster import smi, wire
from gputui.snapshot.model import DeviceSnapshot, Snapshot

#: the first retry waits this long, each further one twice as long, up to the max
BACKOFF_MIN_S = 1.0
BACKOFF_MAX_S = 60.0
#: a remote gputui has this long (after the connect timeout) to send its first line
FIRST_DATA_S = 30.0
#: a node silent this many intervals (and at least SILENT_MIN_S) is cut off and called again
SILENT_INTERVALS = 10
SILENT_MIN_S = 15.0
#: a node whose newest data is older than this many intervals is shown as slow
SLOW_INTERVALS = 3
#: what is kept of a node's standard error, for the reason it failed
STDERR_KEEP = 4096
#: the utilization history: window and step, as the Prometheus source's
HISTORY_S = 600.0
HISTORY_STEP_S = 10.0
#: clock-event reasons are counted over this window (the Prometheus source's rate window)
THROTTLE_WINDOW_S = 60.0
#: nvidia-smi lines that are not CSV rows tolerated before the node is a protocol error
SMI_GARBAGE_LINES = 8

#: the longest interval ``gputui serve`` takes (the monitor's sampling range)
SERVE_INTERVAL_MAX_S = 30.0

MODE_GPUTUI = "gputui serve"
MODE_SMI = "nvidia-smi only"
NO_TOOLS = "neither gputui nor nvidia-smi is on the node's PATH"


class HostError(ValueError):
    """A host name that ssh would take for an option, or one with control characters."""


def check_host(host: str) -> str:
    """``host`` as given, if it can only be a destination for ssh."""
    if not host or len(host) > 255:
        raise HostError(f"not a host: {host!r}")
    if host.startswith("-") or any(c.isspace() or not c.isprintable() for c in host):
        raise HostError(f"not a host: {host!r} (a name, user@name or an ssh config alias)")
    return host


@dataclass(frozen=True)
class SshOptions:
    interval_s: float = 1.0
    connect_timeout_s: float = 5.0
    ssh_config: str | None = None
    #: the remote gputui command (a path or a venv's gputui where it is not on PATH)
    remote_gputui: str = "gputui"
    ssh: str = "ssh"

    def argv(self, host: str, command: str) -> list[str]:
        argv = [
            self.ssh,
            "-T",
            "-o",
            "BatchMode=yes",
            "-o",
            f"ConnectTimeout={max(1, math.ceil(self.connect_timeout_s))}",
            "-o",
            "ServerAliveInterval=10",
        ]
        if self.ssh_config:
            argv += ["-F", self.ssh_config]
        return [*argv, "--", check_host(host), command]

    @property
    def serve_command(self) -> str:
        # serve samples at most every SERVE_INTERVAL_MAX_S; a slower view reads what is newest
        interval = min(self.interval_s, SERVE_INTERVAL_MAX_S)
        return f"{self.remote_gputui} serve --stdio --interval {interval:g}"

    @property
    def silent_after_s(self) -> float:
        return max(SILENT_MIN_S, SILENT_INTERVALS * self.interval_s)


@dataclass(frozen=True)
class HostView:
    """One node as its reader sees it now: plain values for the view."""

    host: str
    #: "connecting", "up", "slow", "down" or "protocol error"
    state: str
    reason: str | None
    mode: str | None
    answered: bool
    remote_host: str | None = None
    snapshot: Snapshot | None = None
    ranks: tuple[wire.RemoteRank, ...] = ()
    gpu_unavailable: str | None = None
    age_s: float | None = None
    #: GPU index -> mean utilization (0-100) of each step of the history window
    history: Mapping[int, tuple[float | None, ...]] = field(default_factory=dict)
    #: GPU index -> share of the last minute's snapshots with a costly clock-event reason
    throttled: Mapping[int, float] = field(default_factory=dict)


@dataclass
class _Outcome:
    state: str
    reason: str | None = None
    had_data: bool = False
    no_gputui: bool = False


class HostReader:
    """One node: its ssh session, its latest values, its retries."""

    def __init__(self, host: str, options: SshOptions) -> None:
        self.host = check_host(host)
        self.options = options
        self.settled = threading.Event()  # the first outcome is known
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._state: str = "connecting"
        self._reason: str | None = None
        self._mode = MODE_GPUTUI
        self._answered = False
        self._hello: wire.ServeHello | None = None
        self._frame: wire.ServeFrame | None = None
        self._data_at: float | None = None
        self._smi: dict[int, tuple[DeviceSnapshot, float]] = {}
        self._smi_messages: list[str] = []
        self._gpu_unavailable: str | None = None
        self._session_data = False
        self._bins: dict[int, dict[int, tuple[float, int]]] = {}
        self._throttle: dict[int, collections.deque[tuple[float, bool]]] = {}
        self._thread = threading.Thread(target=self._run, name="gputui-ssh", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            proc = self._proc
        if proc is not None and proc.poll() is None:
            _kill(proc)

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)

    # -- the values -------------------------------------------------------------------
    def view(self) -> HostView:
        now, wall = time.monotonic(), time.time()
        with self._lock:
            state, reason, mode = self._state, self._reason, self._mode
            age = None if self._data_at is None else now - self._data_at
            if state == "up" and age is not None:
                slow_after = SLOW_INTERVALS * self.options.interval_s + 2.0
                if age > slow_after:
                    state, reason = "slow", f"no data for {age:.0f} s"
            snapshot = self._snapshot(wall)
            frame = self._frame if mode == MODE_GPUTUI else None
            return HostView(
                host=self.host,
                state=state,
                reason=reason,
                mode=mode if self._answered else None,
                answered=self._answered,
                remote_host=self._hello.host if self._hello and mode == MODE_GPUTUI else None,
                snapshot=snapshot,
                ranks=frame.ranks if frame is not None else (),
                gpu_unavailable=self._gpu_unavailable,
                age_s=age,
                history=self._history(wall),
                throttled={
                    i: sum(1 for _, c in q if c) / len(q) for i, q in self._throttle.items() if q
                },
            )

    def _snapshot(self, wall: float) -> Snapshot | None:
        if self._mode == MODE_GPUTUI:
            return self._frame.snapshot if self._frame is not None else None
        if not self._smi:
            return None
        fresh = wall - max(3.0 * max(1.0, self.options.interval_s), 5.0)
        devices = tuple(d for i, (d, t) in sorted(self._smi.items()) if t >= fresh)
        return Snapshot(timestamp_s=wall, devices=devices)

    def _history(self, wall: float) -> dict[int, tuple[float | None, ...]]:
        last = int(wall // HISTORY_STEP_S)
        steps = int(HISTORY_S / HISTORY_STEP_S)
        out = {}
        for index, bins in self._bins.items():
            grid = []
            for b in range(last - steps, last + 1):
                total = bins.get(b)
                grid.append(total[0] / total[1] if total else None)
            out[index] = tuple(grid)
        return out

    def _record(self, devices: Sequence[DeviceSnapshot], wall: float) -> None:
        """Each GPU's utilization into the history's step, its clock events into
        the throttle window (under the lock)."""
        b = int(wall // HISTORY_STEP_S)
        oldest = b - int(HISTORY_S / HISTORY_STEP_S)
        for d in devices:
            bins = self._bins.setdefault(d.index, {})
            if d.util_gpu_pct is not None:
                total = bins.get(b, (0.0, 0))
                bins[b] = (total[0] + d.util_gpu_pct, total[1] + 1)
            if len(bins) > HISTORY_S / HISTORY_STEP_S + 2:
                for old in [k for k in bins if k < oldest]:
                    del bins[old]
            if d.throttle_reasons is not None:
                queue = self._throttle.setdefault(d.index, collections.deque())
                queue.append((wall, bool(costly(d.throttle_reasons))))
                while queue and queue[0][0] < wall - THROTTLE_WINDOW_S:
                    queue.popleft()

    # -- the session ------------------------------------------------------------------
    def _run(self) -> None:
        backoff = BACKOFF_MIN_S
        while not self._stop.is_set():
            outcome = self._session(self._mode)
            if self._stop.is_set():
                break
            if outcome.no_gputui and self._mode == MODE_GPUTUI:
                with self._lock:
                    self._mode = MODE_SMI
                continue
            with self._lock:
                self._state, self._reason = outcome.state, outcome.reason
                if outcome.state == "down" and not outcome.had_data:
                    self._mode = MODE_GPUTUI  # ssh itself failed: ask for gputui again next time
            self.settled.set()
            backoff = BACKOFF_MIN_S if outcome.had_data else min(backoff * 2, BACKOFF_MAX_S)
            self._stop.wait(backoff)

    def _session(self, mode: str) -> _Outcome:
        opts = self.options
        command = opts.serve_command if mode == MODE_GPUTUI else smi.smi_command(opts.interval_s)
        try:
            proc = subprocess.Popen(
                opts.argv(self.host, command),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # the terminal's ctrl+c is the viewer's alone
            )
        except OSError as exc:
            return _Outcome("down", f"cannot run {opts.ssh}: {exc.strerror or exc}")
        with self._lock:
            self._proc = proc
            self._hello = None
            self._smi_messages = []
        self._session_data = False
        if self._stop.is_set():
            _kill(proc)
        try:
            outcome = self._read(proc, mode)
        finally:
            if proc.poll() is None:
                _kill(proc)
            try:
                proc.wait(timeout=10.0)  # reaped: no zombie per reconnection
            except subprocess.TimeoutExpired:
                pass
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
            with self._lock:
                self._proc = None
        return outcome

    def _read(self, proc: subprocess.Popen[bytes], mode: str) -> _Outcome:
        assert proc.stdout is not None and proc.stderr is not None
        out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
        selector = selectors.DefaultSelector()
        selector.register(out_fd, selectors.EVENT_READ)
        selector.register(err_fd, selectors.EVENT_READ)
        buf, err = bytearray(), bytearray()
        had_data = False
        deadline = time.monotonic() + self.options.connect_timeout_s + FIRST_DATA_S
        problem: _Outcome | None = None
        try:
            while selector.get_map() and problem is None:
                timeout = deadline - time.monotonic()
                if timeout <= 0:
                    waited = "first data" if not had_data else "data"
                    problem = _Outcome("down", f"no {waited} in time: cut off", had_data)
                    break
                for key, _ in selector.select(timeout):
                    chunk = os.read(key.fd, 1 << 16)
                    if not chunk:
                        selector.unregister(key.fd)
                    elif key.fd == err_fd:
                        err += chunk
                        del err[:-STDERR_KEEP]
                    else:
                        buf += chunk
                        deadline = time.monotonic() + self.options.silent_after_s
                        problem = self._lines(buf, mode)
                        had_data = had_data or self._session_data
        finally:
            selector.close()
        if problem is not None:
            _kill(proc)
            return problem
        try:
            rc = proc.wait(timeout=10.0)
        except subprocess.TimeoutExpired:
            _kill(proc)
            rc = proc.wait()
        return self._ended(mode, rc, bytes(err), had_data)

    def _lines(self, buf: bytearray, mode: str) -> _Outcome | None:
        """Every whole line of ``buf`` (taken out of it); a protocol error, or None."""
        while True:
            end = buf.find(b"\n")
            if end < 0:
                if len(buf) > wire.MAX_LINE_BYTES:
                    return _Outcome("protocol error", "a line longer than the limit", True)
                return None
            line = bytes(buf[:end])
            del buf[: end + 1]
            try:
                if mode == MODE_GPUTUI:
                    self._serve_line(line)
                else:
                    self._smi_line(line)
            except wire.ProtocolError as exc:
                excerpt = line[:60].decode("utf-8", "replace")
                return _Outcome("protocol error", f"{exc}: {excerpt!r}", True)

    def _serve_line(self, line: bytes) -> None:
        if self._hello is None:
            hello = wire.decode_hello(line)
            with self._lock:
                self._hello = hello
            return
        frame = wire.decode_frame(line)
        if frame is None:
            return
        wall = time.time()
        with self._lock:
            self._frame = frame
            self._gpu_unavailable = frame.gpu_unavailable
            self._record(frame.snapshot.devices, wall)
            self._up()
        self._session_data = True
        self.settled.set()

    def _smi_line(self, line: bytes) -> None:
        text = line.decode("utf-8", "replace").strip()
        if not text:
            return
        try:
            device = smi.parse_line(text)
        except smi.NotSmi:
            with self._lock:
                self._smi_messages.append(text[:300])
                if self._smi and len(self._smi_messages) > SMI_GARBAGE_LINES:
                    raise wire.ProtocolError("lines that are not nvidia-smi's CSV") from None
            return
        wall = time.time()
        with self._lock:
            self._smi[device.index] = (device, wall)
            self._gpu_unavailable = None
            self._record((device,), wall)
            self._up()
        self._session_data = True
        self.settled.set()

    def _up(self) -> None:
        self._state, self._reason = "up", None
        self._answered = True
        self._data_at = time.monotonic()

    def _ended(self, mode: str, rc: int, err: bytes, had_data: bool) -> _Outcome:
        said = _last_line(err)
        if mode == MODE_GPUTUI and not had_data and _no_gputui(rc, err):
            return _Outcome("down", said, no_gputui=True)
        if rc == 255:
            lost = "the connection was lost" if had_data else "ssh failed (exit status 255)"
            return _Outcome("down", said or lost, had_data)
        if mode == MODE_SMI and not had_data:
            with self._lock:
                self._answered = True
                messages = self._smi_messages
                self._gpu_unavailable = (
                    NO_TOOLS if rc == 127 else f"nvidia-smi: {(messages or [said or str(rc)])[0]}"
                )
            return _Outcome("up", None, had_data=True)
        ended = f"the session ended (exit status {rc})"
        return _Outcome("down", f"{ended}: {said}" if said else ended, had_data)


def _no_gputui(rc: int, err: bytes) -> bool:
    """The remote shell found no gputui, or a gputui too old to have ``serve``."""
    if rc == 127:
        return True
    return rc == 2 and b"invalid choice" in err and b"serve" in err


def _last_line(err: bytes) -> str | None:
    lines = [
        line.strip()
        for line in err.decode("utf-8", "replace").splitlines()
        if line.strip() and not line.startswith("Warning: Permanently added")
    ]
    return lines[-1][:300] if lines else None


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """ssh and whatever it started here (a ProxyCommand): its own process group."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        try:
            proc.kill()
        except OSError:
            pass
