"""The cluster view's source: the PromQL it sends and the snapshot it builds.

Every GPU query asks for gputui's series ``or`` dcgm-exporter's, so one round
trip serves clusters that run either (the model keeps gputui's where both
exist).  Queries run a few at a time on a small thread pool; the whole refresh
is one :meth:`ClusterSource.fetch` call, made off the UI thread.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from gputui.analysis.severity import INFO
from gputui.analysis.throttle import THROTTLES
from gputui.cluster.client import (
    PrometheusClient,
    PrometheusError,
    RangeSeries,
    escape_label,
)
from gputui.cluster.view import (
    NODE_FIELDS,
    THROTTLED_MIN_RATIO,
    ClusterSnapshot,
    GpuKey,
    build_gpus,
    build_jobs,
    build_nodes,
    host_of,
    pick_gpu_values,
    pick_node_values,
)

#: rates are taken over this window (PromQL range)
RATE_WINDOW = "1m"
#: the GPU history window and its resolution
HISTORY_S = 600.0
HISTORY_STEP_S = 10.0
#: at most this many queries in flight at once
PARALLEL_QUERIES = 4

COSTLY_REASONS = "|".join(t.reason for t in THROTTLES.values() if t.severity != INFO)


def normalize_selector(selector: str | None) -> str:
    """``{cluster="a"}`` or ``cluster="a"`` -> ``cluster="a"``; refuses braces inside."""
    text = (selector or "").strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1].strip()
    if "{" in text or "}" in text:
        raise PrometheusError(
            "gputui cluster: --selector takes label matchers, e.g. 'cluster=\"a\"', "
            f"not {selector!r}"
        )
    return text


def _sel(selector: str, *more: str) -> str:
    parts = [p for p in (selector, *more) if p]
    return "{" + ",".join(parts) + "}"


def gpu_queries(selector: str, hosts: Sequence[str] | None = None) -> dict[str, str]:
    """Field -> PromQL: gputui's name, or dcgm-exporter's converted to base units;
    with ``hosts``, only those nodes' GPUs."""
    s, d = _sel(selector, _hosts("hostname", hosts)), _sel(selector, _hosts("Hostname", hosts))
    throttled = _sel(selector, _hosts("hostname", hosts), f'reason=~"{COSTLY_REASONS}"')
    return {
        "util_ratio": f"gputui_gpu_utilization_ratio{s} or DCGM_FI_DEV_GPU_UTIL{d} / 100",
        "sm_active_ratio": f"gputui_gpu_sm_active_ratio{s} or DCGM_FI_PROF_SM_ACTIVE{d}",
        "tensor_active_ratio": (
            f"gputui_gpu_tensor_active_ratio{s} or DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{d}"
        ),
        "dram_active_ratio": f"gputui_gpu_dram_active_ratio{s} or DCGM_FI_PROF_DRAM_ACTIVE{d}",
        "power_w": f"gputui_gpu_power_watts{s} or DCGM_FI_DEV_POWER_USAGE{d}",
        # dcgm-exporter reports frame-buffer memory in MiB
        "mem_used_bytes": f"gputui_gpu_memory_used_bytes{s} or DCGM_FI_DEV_FB_USED{d} * 1048576",
        "mem_total_bytes": (
            f"gputui_gpu_memory_total_bytes{s} or "
            f"(DCGM_FI_DEV_FB_USED{d} + DCGM_FI_DEV_FB_FREE{d}) * 1048576"
        ),
        "temp_c": f"gputui_gpu_temperature_celsius{s} or DCGM_FI_DEV_GPU_TEMP{d}",
        "throttled_ratio": (
            "sum without (reason) "
            f"(rate(gputui_gpu_clock_event_seconds_total{throttled}[{RATE_WINDOW}]))"
        ),
        # gputui serves dcgm-exporter's name for the last Xid too (with its hostname label)
        "xid_last": f"DCGM_FI_DEV_XID_ERRORS{s} or DCGM_FI_DEV_XID_ERRORS{d}",
        "xid_count": f"sum without (xid) (gputui_xid_errors_total{s})",
    }


def _hosts(label: str, hosts: Sequence[str] | None) -> str:
    if hosts is None:
        return ""
    pattern = "|".join(_regex_escape(h) for h in hosts)
    return f'{label}=~"{escape_label(pattern)}"'


#: node field -> how its GPUs' values combine
NODE_AGGREGATES = {
    "util_mean": ("avg", "util_ratio"),
    "sm_active_mean": ("avg", "sm_active_ratio"),
    "tensor_active_mean": ("avg", "tensor_active_ratio"),
    "dram_active_mean": ("avg", "dram_active_ratio"),
    "power_w": ("sum", "power_w"),
    "mem_used_bytes": ("sum", "mem_used_bytes"),
    "mem_total_bytes": ("sum", "mem_total_bytes"),
    "gpu_count": ("count", "util_ratio"),
}


def node_query(selector: str) -> str:
    """Every node's aggregates in one query (the node table needs no per-GPU series).
    Each GPU counts once: a GPU shared by two Slurm jobs has a series of each
    gauge per job (``hpc_job``, gputui's and dcgm-exporter's), reduced to one
    per GPU before the node's sum, mean and count."""
    by = "hostname, Hostname"
    q = gpu_queries(selector)
    parts = [
        tagged(f, f"{op} by ({by}) (max by ({by}, gpu) ({q[field]}))")
        for f, (op, field) in NODE_AGGREGATES.items()
    ]
    parts.append(
        tagged(
            "throttled_gpus",
            f"count by ({by}) ({q['throttled_ratio']} >= {THROTTLED_MIN_RATIO})",
        )
    )
    parts.append(tagged("xid_gpus", f"count by ({by}) (max by ({by}, gpu) ({q['xid_last']}) > 0)"))
    return " or ".join(parts)


#: the label that says which field a series of a combined query answers
FIELD = "gputui_field"


def tagged(field: str, expr: str) -> str:
    return f'label_replace({expr}, "{FIELD}", "{field}", "__name__", ".*")'


def gpu_query(selector: str, hosts: Sequence[str] | None) -> str:
    """Every GPU field in one query: each reduced to (node, gpu) and tagged with
    its field, plus one series per GPU that carries its UUID and model."""
    s, d = _sel(selector, _hosts("hostname", hosts)), _sel(selector, _hosts("Hostname", hosts))
    by = "hostname, Hostname, gpu"
    parts = [tagged(f, f"max by ({by}) ({q})") for f, q in gpu_queries(selector, hosts).items()]
    ident = f"group by ({by}, UUID, modelName) (gputui_gpu_info{s} or DCGM_FI_DEV_GPU_UTIL{d})"
    parts.append(tagged("id", ident))
    return " or ".join(parts)


def meta_query(selector: str) -> str:
    """The scrape targets' up, and which of them served GPU series in the last hour."""
    return f"{tagged('up', f'up{_sel(selector)}')} or {tagged('target', target_query(selector))}"


def job_query(selector: str) -> str:
    s = _sel(selector)
    w = RATE_WINDOW
    key = "hostname, job_id, rank"
    return " or ".join(
        [
            tagged("info", f"gputui_train_info{s}"),
            tagged("steps_rate", f"sum by ({key}) (rate(gputui_train_steps_total{s}[{w}]))"),
            tagged(
                "step_sum_rate",
                f"sum by ({key}) (rate(gputui_train_step_duration_seconds_sum{s}[{w}]))",
            ),
            tagged(
                "phase_rate",
                f"sum by ({key}, phase) (rate(gputui_train_phase_seconds_total{s}[{w}]))",
            ),
            tagged("last_step", f"max by ({key}) (gputui_train_last_step_timestamp_seconds{s})"),
        ]
    )


def target_query(selector: str) -> str:
    """Scrape targets that served GPU series in the last hour, with their hostname."""
    s = _sel(selector)
    return (
        f"group by (instance, hostname) (last_over_time(gputui_exporter_build_info{s}[1h])) or "
        f"group by (instance, Hostname) (last_over_time(DCGM_FI_DEV_GPU_UTIL{s}[1h]))"
    )


def job_queries(selector: str) -> dict[str, str]:
    s = _sel(selector)
    w = RATE_WINDOW
    return {
        "info": f"gputui_train_info{s}",
        "steps_rate": f"rate(gputui_train_steps_total{s}[{w}])",
        "step_sum_rate": f"rate(gputui_train_step_duration_seconds_sum{s}[{w}])",
        "phase_rate": f"rate(gputui_train_phase_seconds_total{s}[{w}])",
        "last_step": f"gputui_train_last_step_timestamp_seconds{s}",
    }


def history_query(selector: str, hosts: Sequence[str] | None) -> str:
    return gpu_queries(selector, hosts)["util_ratio"]


def _regex_escape(text: str) -> str:
    # RE2 metacharacters; re.escape would also escape characters RE2 rejects escaped
    return "".join("\\" + c if c in ".^$*+?()[]{}|\\" else c for c in text)


class NoSeries(PrometheusError):
    """Prometheus answered, but holds no gputui or dcgm-exporter series."""


class ClusterSource:
    """Reads the cluster from one Prometheus server."""

    def __init__(
        self,
        client: PrometheusClient,
        selector: str = "",
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.client = client
        self.selector = normalize_selector(selector)
        #: the evaluation time of every query: now, or a fixed moment (``--at``)
        self._clock = clock or time.time
        self.fixed_time = clock is not None
        self._pool = ThreadPoolExecutor(PARALLEL_QUERIES, thread_name_prefix="gputui-prom")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def fetch(self, hosts: Sequence[str] | None = ()) -> ClusterSnapshot:
        """One refresh: every node's aggregates and every job, and the GPUs (with
        their history) of ``hosts`` (None: every node's; empty: none).  Raises
        PrometheusError, NoSeries."""
        start = time.perf_counter()
        now = self._clock()
        queries = {
            "meta": meta_query(self.selector),
            "node": node_query(self.selector),
            "job": job_query(self.selector),
        }
        if hosts is None or hosts:
            queries["gpu"] = gpu_query(self.selector, hosts)
        futures = {
            name: self._pool.submit(self.client.query, q, now) for name, q in queries.items()
        }
        history_future = None
        # the history's grid is aligned to its step, so that it moves (and its rows
        # are redrawn) once per step, not at every refresh
        history_end = math.floor(now / HISTORY_STEP_S) * HISTORY_STEP_S
        if hosts is None or hosts:
            history_future = self._pool.submit(
                self.client.query_range,
                history_query(self.selector, hosts),
                history_end - HISTORY_S,
                history_end,
                HISTORY_STEP_S,
            )
        rows: dict[str, list[tuple[dict[str, str], float]]] = {}
        for name, future in futures.items():
            for labels, value in future.result():
                field = labels.pop(FIELD, None)
                if field is not None:
                    rows.setdefault(f"{name}:{field}", []).append((labels, value))
        history = (
            _history(history_future.result(), history_end) if history_future is not None else {}
        )
        values = {k: pick_gpu_values(rows.get(f"gpu:{k}", ())) for k in gpu_queries("")}
        gpus = build_gpus(values, history, identity=pick_gpu_values(rows.get("gpu:id", ())))
        instances: dict[str, str] = {}
        for labels, _ in rows.get("meta:target", ()):
            host = host_of(labels)
            if host is not None and "instance" in labels:
                instances[labels["instance"]] = host
        up = {
            labels["instance"]: value == 1
            for labels, value in rows.get("meta:up", ())
            if "instance" in labels
        }
        jobs = build_jobs(
            rows.get("job:info", []),
            rows.get("job:steps_rate", []),
            rows.get("job:step_sum_rate", []),
            rows.get("job:phase_rate", []),
            rows.get("job:last_step", []),
            now,
        )
        aggregates = {f: pick_node_values(rows.get(f"node:{f}", ())) for f in NODE_FIELDS}
        nodes = build_nodes(gpus, instances, up, aggregates)
        if not nodes and not jobs:
            where = f" matching {{{self.selector}}}" if self.selector else ""
            raise NoSeries(
                f"gputui cluster: {self.client.base} holds no gputui or dcgm-exporter "
                f"series{where} "
                "(is 'gputui exporter' scraped?)"
            )
        return ClusterSnapshot(
            url=self.client.base,
            selector=self.selector,
            taken_at_s=now,
            latency_s=time.perf_counter() - start,
            nodes=tuple(nodes),
            jobs=tuple(jobs),
            history_s=HISTORY_S if history_future is not None else 0.0,
            history_step_s=HISTORY_STEP_S if history_future is not None else 0.0,
        )


def _history(
    series: Sequence[RangeSeries], now: float
) -> Mapping[GpuKey, tuple[float | None, ...]]:
    """(host, gpu) -> values on the fixed grid ending now (None where absent)."""
    n = int(HISTORY_S / HISTORY_STEP_S) + 1
    start = now - HISTORY_S
    picked: dict[GpuKey, tuple[dict[str, str], tuple[tuple[float, float], ...]]] = {}
    for s in series:
        host, gpu = host_of(s.labels), s.labels.get("gpu")
        if host is None or gpu is None:
            continue
        key = (host, gpu)
        if key in picked and "hostname" in picked[key][0] and "hostname" not in s.labels:
            continue
        picked[key] = (dict(s.labels), s.points)
    out: dict[GpuKey, tuple[float | None, ...]] = {}
    for key, (_, points) in picked.items():
        grid: list[float | None] = [None] * n
        for t, v in points:
            i = round((t - start) / HISTORY_STEP_S)
            if 0 <= i < n and v == v:
                grid[i] = v
        out[key] = tuple(grid)
    return out
