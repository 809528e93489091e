"""Run the probes, time them, and put the results in one JSON-ready document (the
``gputui bench --json`` output and the cached file).  torch is passed in."""

from __future__ import annotations

import gc
import platform
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from gputui import __version__
from gputui.ceilings import measured, probes
from gputui.ceilings.datasheet import Datasheet, datasheet_for
from gputui.ceilings.timing import Clock, MeasureError, Plan, measure, rate
from gputui.errors import GputuiError

#: the whole bench stops starting new measurements after this many seconds
DEADLINE_S = 55.0

Progress = Callable[[str], None]


def measure_probe(
    key: str,
    torch: Any,
    device: str,
    sizes: probes.Sizes,
    plan: Plan,
    clock: Clock,
    factory: Callable[[Any, str, probes.Sizes], probes.Probe] | None = None,
) -> measured.Measurement:
    """One measurement; a failure becomes its ``error``, never an exception."""
    make = factory or probes.PROBES[key]
    probe = None
    try:
        probe = make(torch, device, sizes)
        with probe.context():
            timing = measure(probe.run, clock, plan)
        reps = len(timing.samples_ms)
        size = f"{probe.size} x{timing.inner}" if timing.inner > 1 else probe.size
        if key == measured.LAUNCH:
            # A time, not a rate: the worst is the slowest repetition.
            return measured.Measurement(
                key,
                timing.per_run_median_s * 1e6,
                timing.per_run_max_s * 1e6,
                timing.per_run_min_s * 1e6,
                reps,
                size,
            )
        unit = measured.MEASUREMENTS[key][1]
        value, worst, best = rate(probe.work, timing, 1e12 if unit == measured.TFLOPS else 1e9)
        return measured.Measurement(key, value, worst, best, reps, size)
    except probes.NotSupported as exc:
        return measured.Measurement(key, None, None, None, 0, "", f"not supported: {exc}")
    except MeasureError as exc:
        return measured.Measurement(key, None, None, None, 0, "", f"failed: {exc}")
    except Exception as exc:
        return measured.Measurement(key, None, None, None, 0, "", f"failed: {_line(exc)}")
    finally:
        del probe
        gc.collect()
        if device.startswith("cuda"):
            try:
                torch.cuda.synchronize(device)
                torch.cuda.empty_cache()  # the next probe gets the memory back
            except Exception:
                pass


def run_probes(
    torch: Any,
    device: str,
    sizes: probes.Sizes,
    plan: Plan,
    clock: Clock,
    progress: Progress | None = None,
    keys: tuple[str, ...] | None = None,
    deadline_s: float = DEADLINE_S,
    now: Callable[[], float] = time.perf_counter,
) -> list[measured.Measurement]:
    started = now()
    results = []
    for key in keys or tuple(probes.PROBES):
        if now() - started > deadline_s:
            results.append(
                measured.Measurement(
                    key, None, None, None, 0, "", f"skipped: past the {deadline_s:.0f} s budget"
                )
            )
            continue
        if progress is not None:
            progress(measured.MEASUREMENTS[key][0])
        results.append(measure_probe(key, torch, device, sizes, plan, clock))
    return results


def datasheet_value(sheet: Datasheet | None, key: str) -> float | None:
    """The datasheet figure to set beside a measurement (None: no such figure)."""
    if sheet is None:
        return None
    if key == measured.HBM_COPY:
        return sheet.hbm_gbps
    if key in measured.MATMUL_FAMILY:
        value: float | None = getattr(sheet, f"{measured.MATMUL_FAMILY[key]}_tflops")
        return value
    if key in (
        measured.H2D_PINNED,
        measured.D2H_PINNED,
        measured.H2D_PAGEABLE,
        measured.D2H_PAGEABLE,
    ):
        return sheet.pcie_gbps_per_direction
    return None


def measurement_dict(m: measured.Measurement, sheet: Datasheet | None) -> dict[str, Any]:
    figure = datasheet_value(sheet, m.key)
    return {
        "key": m.key,
        "label": m.label,
        "unit": m.unit,
        "value": _round(m.value),
        "worst": _round(m.worst),
        "best": _round(m.best),
        "repetitions": m.repetitions,
        "size": m.size,
        "error": m.error,
        "datasheet": figure,
        "pct_of_datasheet": (
            round(100.0 * m.value / figure, 1) if figure and m.value is not None else None
        ),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def document(
    measurements: list[measured.Measurement],
    gpu: dict[str, Any],
    software: dict[str, Any],
    quick: bool,
    elapsed_s: float,
    measured_at: datetime | None = None,
) -> dict[str, Any]:
    """The JSON document of one bench run.  ``gpu`` has at least ``uuid`` and
    ``name``; ``software`` ``torch``, ``cuda`` and ``driver``."""
    when = (measured_at or datetime.now(timezone.utc)).astimezone(timezone.utc)
    stamp = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    sheet = datasheet_for(gpu.get("name"))
    ceilings = measured.ceilings_from(
        measurements,
        gpu_uuid=str(gpu["uuid"]),
        gpu_name=str(gpu["name"]),
        measured_at=stamp,
        torch_version=software.get("torch"),
        cuda_version=software.get("cuda"),
        driver_version=software.get("driver"),
        gputui_version=__version__,
        quick=quick,
    )
    return {
        "gpu": gpu,
        "software": {**software, "gputui": __version__, "python": platform.python_version()},
        "measured_at": stamp,
        "quick": quick,
        "elapsed_s": round(elapsed_s, 2),
        "measurements": [measurement_dict(m, sheet) for m in measurements],
        "datasheet": None
        if sheet is None
        else {"model": sheet.model, "source": sheet.source, "dense": True},
        "ceilings": ceilings.to_dict(),
    }


def gpu_identity(torch: Any, index: int) -> dict[str, Any]:
    props = torch.cuda.get_device_properties(index)
    from gputui.ceilings.cache import normalize_uuid

    raw_uuid = getattr(props, "uuid", None)
    uuid = normalize_uuid(raw_uuid)
    raw_bytes = getattr(raw_uuid, "bytes", None)
    if uuid is None and raw_bytes is not None and len(raw_bytes) == 16:
        # torch's _CUuuid prints as 8-4-4-4-12 hex; its raw bytes say the same
        h = bytes(raw_bytes).hex()
        uuid = normalize_uuid(f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}")
    if uuid is None:
        raise GputuiError(f"gputui bench: GPU {index} reports no usable UUID ({raw_uuid!r})")
    return {
        "index": index,
        "name": str(props.name),
        "uuid": uuid,
        "compute_capability": f"{props.major}.{props.minor}",
        "memory_bytes": int(props.total_memory),
        "sm_count": int(props.multi_processor_count),
    }


def bench_gpu(
    torch: Any,
    index: int,
    quick: bool,
    driver: str | None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Measure GPU ``index`` (CUDA events, see :mod:`gputui.ceilings.timing`)."""
    from gputui.ceilings import timing

    started = time.perf_counter()
    device = f"cuda:{index}"
    torch.cuda.set_device(index)
    gpu = gpu_identity(torch, index)
    try:
        free, _total = torch.cuda.mem_get_info(index)
    except Exception:
        free = None
    sizes = probes.fit_sizes(probes.QUICK_SIZES if quick else probes.FULL_SIZES, free)
    plan = timing.QUICK if quick else timing.FULL
    clock = probes.CudaEventClock(torch, device)
    measurements = run_probes(torch, device, sizes, plan, clock, progress)
    software = {"torch": str(torch.__version__), "cuda": torch.version.cuda, "driver": driver}
    return document(measurements, gpu, software, quick, time.perf_counter() - started)


def _line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]
