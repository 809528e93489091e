"""The per-process hook object: ties the recorder, the torch hooks, the capture
controller and the I/O server together, and builds hello/status messages."""

from __future__ import annotations

import atexit
import dataclasses
import os
import socket
import sys
import time
import traceback
from typing import Any

import gputui
from gputui.hook._capture import CaptureController
from gputui.hook._collect import StepCollector
from gputui.hook._comm import CommTimer
from gputui.hook._import_watch import TorchImportWatcher
from gputui.hook._memory import MemorySampler
from gputui.hook._memsnap import MemorySnapshotController
from gputui.hook._outbox import Outbox
from gputui.hook._recorder import Recorder
from gputui.hook._ring import HISTORY
from gputui.hook._sampler import Sampler
from gputui.hook._server import Server
from gputui.hook._torch_hooks import TorchHooks
from gputui.hook._workers import WorkerProfiles, merge
from gputui.protocol import paths
from gputui.protocol.hello import FRAMEWORK_MODULES
from gputui.protocol.schema import DeviceInfo, GpuTiming, Hello, LoaderInfo, Status

MAX_ARGS = 200
MAX_ARG_CHARS = 1000


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    try:
        number = int(value) if value is not None else None
    except ValueError:
        return None
    return number if number is not None and 0 <= number < 1 << 24 else None


class Hook:
    def __init__(
        self,
        batch_size: int | None = None,
        capture_every_s: float | None = None,
        gpu_timing: bool = True,
        lazy: bool = False,
    ) -> None:
        self.pid = os.getpid()
        self.lazy = lazy
        self.errors: dict[str, str] = {}
        self.recorder = Recorder(
            on_first_activity=self.serve if lazy else None, report_error=self.report_error
        )
        self.recorder.batch_size = batch_size
        self.recorder.gpu_timing = gpu_timing
        self.torch_hooks = TorchHooks(self.recorder, self.report_error)
        self.comm = CommTimer(self.recorder, self.report_error)
        self.outbox = Outbox()
        self.capture = CaptureController(self.recorder, self.outbox.post, capture_every_s)
        capture = self.capture
        self.memsnap = MemorySnapshotController(
            self.recorder,
            self.outbox.post,
            capture_busy=lambda: capture.armed is not None or capture.state is not None,
        )
        self.collector = StepCollector(self.recorder)
        self.collector.compile_watch.hook_missing = self.torch_hooks.dynamo_missing
        self.memory = MemorySampler()
        self.sampler = Sampler(self.recorder, self.report_error)
        self.workers = WorkerProfiles()
        self.server: Server | None = None
        self.serve_error: str | None = None
        self.installed_at = time.time()
        self.watcher: TorchImportWatcher | None = None
        self.device_info: DeviceInfo | None = None
        self.active = True

    # -- setup ------------------------------------------------------------------
    def start(self) -> None:
        torch = sys.modules.get("torch")
        if torch is not None and hasattr(torch, "optim"):
            self._torch_ready(torch)
        else:
            self.watcher = TorchImportWatcher(self._torch_ready)
            sys.meta_path.insert(0, self.watcher)
        if not self.lazy:
            self.serve()
        atexit.register(self.shutdown)

    def _torch_ready(self, torch: Any) -> None:
        try:
            self.torch_hooks.install(torch)
        except Exception as exc:
            self.report_error("installing torch hooks", exc)
            return
        try:
            self.comm.install(torch, self.torch_hooks._is_compiling)
        except Exception as exc:
            self.report_error("installing communication timing", exc)
        try:
            self.workers.install()
        except Exception as exc:
            self.report_error("hooking DataLoader workers", exc)

    def serve(self) -> None:
        """Open the socket and start the I/O thread (once)."""
        if self.server is not None or self.serve_error is not None or not self.active:
            return
        if os.getpid() != self.pid:
            return
        try:
            path = paths.socket_path(self.pid, create_dir=True)
            server = Server(
                path,
                self.recorder,
                self.collector,
                self.memory,
                self.capture,
                self.outbox,
                hello=self.hello,
                status=self.status,
                periodic=self.torch_hooks.recheck_roots,
                report_error=self.report_error,
                memsnap=self.memsnap,
                profile=self.profile,
            )
            server.start()
            self.server = server
            self.sampler.start()
        except (paths.SocketDirError, OSError) as exc:
            self.serve_error = str(exc)
            self.report_error("opening the socket", exc)
            # The one message we print: without a socket nobody can attach, and
            # the user who installed the hook should learn why.
            print(f"gputui.hook: not serving: {exc}", file=sys.stderr)

    def shutdown(self) -> None:
        if os.getpid() != self.pid or not self.active:
            return
        self.active = False
        self.sampler.stop()
        server, self.server = self.server, None
        if server is not None:
            server.stop()
        self.workers.remove_dir()

    def uninstall(self) -> None:
        self.shutdown()
        self.recorder.disable()
        self.memsnap.stop()
        if self.watcher is not None:
            try:
                sys.meta_path.remove(self.watcher)
            except ValueError:
                pass
        if self.torch_hooks.installed:
            self.torch_hooks.uninstall()
        self.comm.uninstall()
        self.workers.uninstall()
        try:
            atexit.unregister(self.shutdown)
        except Exception:
            pass

    def after_fork_in_child(self) -> None:
        # A forked DataLoader worker inherits our state: it must not record steps,
        # serve viewers, or remove the parent's socket at exit.
        self.recorder.disable()
        self.recorder.on_boundary = None
        self.sampler.after_fork_in_child()
        self.workers.after_fork_in_child(self.pid)
        server, self.server = self.server, None
        if server is not None:
            server.close_in_child()
        self.active = False

    # -- cross-thread plumbing ------------------------------------------------------
    def report_error(self, where: str, exc: BaseException) -> None:
        if where in self.errors:
            return
        self.errors[where] = f"{where}: {type(exc).__name__}: {exc}"
        if os.environ.get("GPUTUI_HOOK_DEBUG"):
            traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)

    # -- messages -----------------------------------------------------------------
    def _device(self) -> DeviceInfo | None:
        if self.device_info is not None:
            return self.device_info
        torch = self.recorder.torch
        index = self.recorder.device
        if torch is None or index is None:
            return None
        try:
            # Only once CUDA is initialised by the job: never create a context here.
            if not torch.cuda.is_initialized():
                return None
            props = torch.cuda.get_device_properties(index)
            self.device_info = DeviceInfo(
                index=index,
                name=str(props.name),
                total_memory_bytes=int(props.total_memory),
                uuid=_nvml_uuid(getattr(props, "uuid", None)),
            )
        except Exception as exc:
            self.report_error("device properties", exc)
            self.device_info = DeviceInfo(index=index)
        return self.device_info

    def _coarse(self) -> tuple[list[str], int | None]:
        reasons = []
        graphs = None
        dynamo_utils = sys.modules.get("torch._dynamo.utils")
        counters = getattr(dynamo_utils, "counters", None)
        if counters is not None:
            try:
                graphs = int(dict.get(counters, "stats", {}).get("unique_graphs", 0))
            except Exception:
                graphs = None
        if self.torch_hooks.compile_seen or graphs:
            reasons.append(
                "torch.compile in use: phases inside compiled code are merged into the "
                "enclosing phase (call gputui.hook.step() if steps stop)"
            )
        rec = self.recorder
        if rec.capturing_graph or rec.graph_replays:
            reasons.append(
                f"CUDA graphs in use ({rec.capturing_graph} captured, {rec.graph_replays} "
                "replays): replayed graphs run no hooks, their time lands in the enclosing "
                "phase; captured steps have no GPU times"
                + (
                    "; nothing else marks the steps: each replay of the first graph ends one"
                    if self.torch_hooks.graph_steps
                    else ""
                )
            )
        return reasons, graphs

    def _status(self) -> Status:
        rec = self.recorder
        reasons, graphs = self._coarse()
        server = self.server
        collector = self.collector
        phase_now, phase_now_s, step_now_s = collector.now()
        return Status(
            t=round(time.time(), 3),
            steps=collector.steps_total,
            last_step=None if collector.expected_index is None else collector.last_index,
            recent_step_s=collector.recent_step_s(),
            dropped=collector.dropped,
            viewers=0 if server is None else len(server.viewers),
            refused=0 if server is None else server.refused,
            bad_frames=0 if server is None else server.bad_frames,
            stuck_viewers=0 if server is None else server.stuck_viewers,
            enabled=rec.enabled,
            errors=tuple(self.errors.values()),
            phases_coarse=bool(reasons),
            coarse_reasons=tuple(reasons),
            compiled_graphs=graphs,
            torch_hooked=self.torch_hooks.installed,
            explicit_steps=self.torch_hooks.explicit_steps,
            root_modules=len(self.torch_hooks.roots),
            forward_steps=self.torch_hooks.forward_steps,
            batch_size=rec.batch_size,
            gpu_timing=GpuTiming(
                enabled=rec.gpu_timing,
                active=rec.device is not None and rec.gpu_timing,
                events=rec.events_alive,
                pool_exhausted=rec.pool_exhausted,
                pending_steps=len(collector.gpu_pending),
            ),
            memory_error=self.memory.error,
            capture=self.capture.info(),
            phase_now=phase_now,
            phase_now_s=phase_now_s,
            step_now_s=step_now_s,
            comm=self.comm.info() if self.comm.torch is not None else None,
            loader=None if rec.loader is None else LoaderInfo(*rec.loader),
            sampler=self.sampler.info(),
            frameworks=_frameworks(),
        )

    def profile(self) -> dict[str, Any] | str:
        """The Python profile's message, or why there is none (I/O thread)."""
        sampler = self.sampler
        if not sampler.enabled or sampler.failed:
            return f"the Python sampler is off ({sampler.reason})"
        snapshot = sampler.snapshot()
        if snapshot is None:
            return "no Python samples yet: the training thread has not started a step"
        found = self.workers.collect()
        workers = merge(found)
        processes = len(found) if workers is not None else 0
        snapshot = dataclasses.replace(
            snapshot,
            workers=workers,
            worker_processes=processes,
            workers_note=self.workers.note(self.recorder.loader, processes),
        )
        return snapshot.to_wire()

    def status(self) -> dict[str, Any]:
        """The status message (the I/O thread sends it about once a second)."""
        return self._status().to_wire()

    def hello(self) -> dict[str, Any]:
        """The hello message: who this job is, and its status."""
        torch = self.recorder.torch
        argv = tuple(str(a)[:MAX_ARG_CHARS] for a in sys.argv[:MAX_ARGS])
        cuda_in_use = False
        torch_version = cuda_version = None
        if torch is not None:
            torch_version = str(getattr(torch, "__version__", "?"))
            cuda_version = getattr(getattr(torch, "version", None), "cuda", None)
            try:
                cuda_in_use = bool(torch.cuda.is_initialized())
            except Exception:
                cuda_in_use = False
        master = None
        if os.environ.get("MASTER_ADDR") and os.environ.get("MASTER_PORT"):
            master = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"[:512]
        return Hello(
            pid=self.pid,
            argv=argv,
            hook_version=gputui.__version__,
            ppid=os.getppid(),
            cwd=_cwd(),
            hostname=socket.gethostname(),
            python="{}.{}.{}".format(*sys.version_info[:3]),
            executable=sys.executable,
            torch=torch_version,
            cuda=None if cuda_version is None else str(cuda_version),
            cuda_in_use=cuda_in_use,
            device=self._device(),
            rank=_env_int("RANK"),
            local_rank=_env_int("LOCAL_RANK"),
            world_size=_env_int("WORLD_SIZE"),
            local_world_size=_env_int("LOCAL_WORLD_SIZE") or None,
            run_id=(os.environ.get("TORCHELASTIC_RUN_ID") or None),
            master=master,
            started=round(self.installed_at, 3),
            lazy=self.lazy,
            history_capacity=HISTORY,
            cpus=_cpus(),
            status=self._status(),
        ).to_wire()


#: the CPU quota of the job's cgroup, as a container sees its own: cgroup v2's
#: "QUOTA PERIOD" (or "max"), and v1's quota and period (-1: none)
_CPU_MAX = "/sys/fs/cgroup/cpu.max"
_CFS = ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu/cpu.cfs_period_us")


def _cpus() -> int | None:
    """The CPU cores this process may use: its affinity (else the machine's
    count), capped by its cgroup's quota, rounded up; None if neither reads."""
    try:
        count: int | None = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        count = os.cpu_count()
    quota = _cgroup_quota()
    if quota is not None:
        count = quota if count is None else min(count, quota)
    return count or None


def _cgroup_quota() -> int | None:
    """The cgroup's CPU quota in whole cores (rounded up), or None: no quota, or
    no cgroup file to read (one small read each, at hello time only)."""
    try:
        quota, _, period = _read(_CPU_MAX).partition(" ")
    except OSError:
        try:
            quota, period = _read(_CFS[0]), _read(_CFS[1])
        except OSError:
            return None
    try:
        q, per = int(quota), int(period)
    except ValueError:
        return None  # "max": no quota
    if q <= 0 or per <= 0:
        return None
    return max(1, -(-q // per))


def _read(path: str) -> str:
    with open(path) as fh:
        return fh.read(256).strip()


def _frameworks() -> tuple[str, ...]:
    """The training frameworks the job imported (a look-up per name in
    ``sys.modules``; the status is built about once a second)."""
    loaded = sys.modules
    return tuple(dict.fromkeys(name for module, name in FRAMEWORK_MODULES if module in loaded))


def _nvml_uuid(uuid: Any) -> str | None:
    """torch's device UUID in NVML's form ("GPU-" + the hex groups)."""
    if uuid is None:
        return None
    text = str(uuid)
    if not text or len(text) > 100:
        return None
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:
        return None
