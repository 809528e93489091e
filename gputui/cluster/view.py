"""The cluster as values: nodes -> GPUs (with history) -> jobs and their ranks.

Pure functions over query results (label mappings and numbers): no I/O, no UI.
GPU values come from gputui's series where a node has them, else from
dcgm-exporter's (``Hostname`` label, percent utilization); a GPU is keyed by
(host, gpu index), so a node that runs both exporters is counted once.

Stragglers: a rank's compute time per step is its step time minus the time it
waited: data loading, communication phases (named like ``comm``, ``nccl``,
``allreduce``) and, under DDP, the part of backward spent waiting in the
gradient all-reduce (:func:`compute_times`); its skew is that time over the
median of the job's ranks.  A
skew of 1.3 says the rank computes 30% longer per step than the typical rank,
and the other ranks wait for it at every collective.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from gputui.snapshot.model import ProcessSnapshot

#: phases whose time is waiting on other ranks, not computing
COMM_PHASE_PREFIXES = ("comm", "nccl", "allreduce", "all_reduce", "allgather", "barrier")
DATA_PHASE = "data"


@dataclass(frozen=True)
class Gpu:
    hostname: str
    gpu: str  # the index, as labelled
    uuid: str
    model: str
    source: str  # "gputui", "dcgm" or (over SSH) "nvidia-smi"
    util_ratio: float | None = None
    sm_active_ratio: float | None = None
    tensor_active_ratio: float | None = None
    dram_active_ratio: float | None = None
    power_w: float | None = None
    mem_used_bytes: float | None = None
    mem_total_bytes: float | None = None
    temp_c: float | None = None
    #: fraction of the last minute a costly clock-event reason held the clocks
    throttled_ratio: float | None = None
    #: the last Xid error's code (0: none; None: not watched or not known)
    xid_last: float | None = None
    #: every Xid error counted for the GPU (None: not known)
    xid_count: float | None = None
    #: utilization over the history window, oldest first (None: no sample)
    util_history: tuple[float | None, ...] = ()


@dataclass(frozen=True)
class Node:
    hostname: str
    instance: str | None
    up: bool | None
    source: str | None
    #: the GPUs read one by one (the selected node's in the viewer; every node's
    #: with ``--once --json``); the aggregates below cover all of the node's GPUs
    gpus: tuple[Gpu, ...]
    gpu_count: int
    util_mean: float | None
    sm_active_mean: float | None
    tensor_active_mean: float | None
    dram_active_mean: float | None
    power_w: float | None
    mem_used_bytes: float | None
    mem_total_bytes: float | None
    throttled_gpus: int
    #: GPUs whose driver reported an Xid error (their last Xid is not 0)
    xid_gpus: int = 0
    # read over SSH (``gputui cluster --ssh``); the defaults for Prometheus
    #: "connecting", "up", "slow", "down" or "protocol error" (None: Prometheus' up)
    state: str | None = None
    #: why the node is down, slow or shows no GPU, in one line (untrusted text)
    note: str | None = None
    #: the node's GPU processes, every field the snapshot has
    processes: tuple[ProcessSnapshot, ...] = ()
    #: the name the node gives itself (the hostname above is the one ssh was given)
    remote_hostname: str | None = None
    #: seconds since the node's newest data arrived
    age_s: float | None = None


def state_label(node: Node) -> str:
    """The node's state in a word: up, slow, DOWN, ERROR (a protocol error) or ?."""
    if node.state == "protocol error":
        return "ERROR"
    if node.state == "slow":
        return "slow"
    return {True: "up", False: "DOWN", None: "?"}[node.up]


@dataclass(frozen=True)
class Rank:
    hostname: str
    job_id: str
    rank: int
    local_rank: int | None
    world_size: int | None
    pid: str
    gpu: str
    steps_per_s: float | None
    step_s: float | None
    #: seconds of each phase per step
    phase_s: Mapping[str, float] = field(default_factory=dict)
    #: each phase's share of the step, 0-1
    phase_share: Mapping[str, float] = field(default_factory=dict)
    compute_s: float | None = None
    skew: float | None = None
    last_step_age_s: float | None = None


@dataclass(frozen=True)
class Job:
    job_id: str
    ranks: tuple[Rank, ...]
    world_size: int | None
    hosts: tuple[str, ...]
    step_s: float | None  # median over ranks
    phase_share: Mapping[str, float]  # mean over ranks
    straggler: Rank | None  # the rank with the largest skew, when there are two or more
    max_skew: float | None


@dataclass(frozen=True)
class ClusterSnapshot:
    url: str
    selector: str
    taken_at_s: float
    latency_s: float
    nodes: tuple[Node, ...]
    jobs: tuple[Job, ...]
    #: history window and step of Gpu.util_history
    history_s: float = 0.0
    history_step_s: float = 0.0


# -- GPUs and nodes ---------------------------------------------------------------------
GpuKey = tuple[str, str]


def host_of(labels: Mapping[str, str]) -> str | None:
    return labels.get("hostname") or labels.get("Hostname")


def source_of(labels: Mapping[str, str]) -> str:
    return "gputui" if "hostname" in labels else "dcgm"


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def pick_gpu_values(
    series: Iterable[tuple[Mapping[str, str], float]],
) -> dict[GpuKey, tuple[Mapping[str, str], float | None]]:
    """(host, gpu) -> (labels, value), gputui's series winning over dcgm-exporter's."""
    out: dict[GpuKey, tuple[Mapping[str, str], float | None]] = {}
    for labels, value in series:
        host = host_of(labels)
        gpu = labels.get("gpu")
        if host is None or gpu is None:
            continue
        key = (host, gpu)
        if key in out and source_of(out[key][0]) == "gputui" and source_of(labels) == "dcgm":
            continue
        out[key] = (labels, _finite(value))
    return out


GPU_FIELDS = (
    "util_ratio",
    "sm_active_ratio",
    "tensor_active_ratio",
    "dram_active_ratio",
    "power_w",
    "mem_used_bytes",
    "mem_total_bytes",
    "temp_c",
    "throttled_ratio",
    "xid_last",
    "xid_count",
)


def build_gpus(
    values: Mapping[str, Mapping[GpuKey, tuple[Mapping[str, str], float | None]]],
    history: Mapping[GpuKey, tuple[float | None, ...]] | None = None,
    identity: Mapping[GpuKey, tuple[Mapping[str, str], float | None]] | None = None,
) -> list[Gpu]:
    """GPUs from per-field picks (``values[field][key]``); every GPU any field saw.
    ``identity`` has each GPU's labels (UUID, modelName) where the fields were
    reduced to their node and index."""
    keys: dict[GpuKey, Mapping[str, str]] = {}
    for name in GPU_FIELDS:
        for key, (labels, _) in values.get(name, {}).items():
            if key not in keys or source_of(labels) == "gputui":
                keys[key] = labels
    for key, (labels, _) in (identity or {}).items():
        if key in keys and (source_of(labels) == source_of(keys[key])):
            keys[key] = labels
    gpus = []
    for key in sorted(keys, key=lambda k: (k[0], _index(k[1]))):
        labels = keys[key]
        fields: dict[str, float | None] = {}
        for name in GPU_FIELDS:
            picked = values.get(name, {}).get(key)
            fields[name] = picked[1] if picked is not None else None
        gpus.append(
            Gpu(
                hostname=key[0],
                gpu=key[1],
                uuid=labels.get("UUID", ""),
                model=labels.get("modelName", ""),
                source=source_of(labels),
                util_history=(history or {}).get(key, ()),
                **fields,  # type: ignore[arg-type]
            )
        )
    return gpus


def _index(gpu: str) -> tuple[int, str]:
    return (int(gpu), "") if gpu.isdigit() else (1 << 30, gpu)


def mean_of(values: Iterable[float | None]) -> float | None:
    """The mean of the values that are there (None: none is)."""
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def sum_of(values: Iterable[float | None]) -> float | None:
    """The sum of the values that are there (None: none is)."""
    present = [v for v in values if v is not None]
    return sum(present) if present else None


#: a GPU counts as throttled when costly reasons held its clocks this much of the time
THROTTLED_MIN_RATIO = 0.01


NODE_FIELDS = (
    "util_mean",
    "sm_active_mean",
    "tensor_active_mean",
    "dram_active_mean",
    "power_w",
    "mem_used_bytes",
    "mem_total_bytes",
    "gpu_count",
    "throttled_gpus",
    "xid_gpus",
)
NodeValues = Mapping[str, tuple[Mapping[str, str], float | None]]


def pick_node_values(series: Iterable[tuple[Mapping[str, str], float]]) -> NodeValues:
    """host -> (labels, value), gputui's series winning over dcgm-exporter's."""
    out: dict[str, tuple[Mapping[str, str], float | None]] = {}
    for labels, value in series:
        host = host_of(labels)
        if host is None:
            continue
        if host in out and source_of(out[host][0]) == "gputui" and source_of(labels) == "dcgm":
            continue
        out[host] = (labels, _finite(value))
    return out


def build_nodes(
    gpus: Sequence[Gpu],
    instances: Mapping[str, str],
    up: Mapping[str, bool],
    aggregates: Mapping[str, NodeValues] | None = None,
) -> list[Node]:
    """Nodes from their GPUs, or from per-node ``aggregates`` (``[field][host]``) where
    given; ``instances`` maps a scrape target to its hostname, ``up`` a target to
    its up state, so a node whose exporter is down still shows."""
    by_host: dict[str, list[Gpu]] = {}
    for gpu in gpus:
        by_host.setdefault(gpu.hostname, []).append(gpu)
    for values in (aggregates or {}).values():
        for host in values:
            by_host.setdefault(host, [])
    host_instance: dict[str, str] = {}
    for instance, host in sorted(instances.items()):
        host_instance.setdefault(host, instance)
    for host in host_instance:
        by_host.setdefault(host, [])
    nodes = []
    for host in sorted(by_host):
        members = by_host[host]
        target = host_instance.get(host)
        state = up.get(target) if target is not None else None
        if aggregates is not None:
            fields = {f: _agg(aggregates, f, host) for f in NODE_FIELDS}
            source = next((source_of(v[host][0]) for v in aggregates.values() if host in v), None)
        else:
            fields = {
                "util_mean": mean_of(g.util_ratio for g in members),
                "sm_active_mean": mean_of(g.sm_active_ratio for g in members),
                "tensor_active_mean": mean_of(g.tensor_active_ratio for g in members),
                "dram_active_mean": mean_of(g.dram_active_ratio for g in members),
                "power_w": sum_of(g.power_w for g in members),
                "mem_used_bytes": sum_of(g.mem_used_bytes for g in members),
                "mem_total_bytes": sum_of(g.mem_total_bytes for g in members),
                "gpu_count": len(members),
                "throttled_gpus": sum(
                    1 for g in members if (g.throttled_ratio or 0.0) >= THROTTLED_MIN_RATIO
                ),
                "xid_gpus": sum(1 for g in members if g.xid_last),
            }
            source = members[0].source if members else None
        count = int(fields.pop("gpu_count") or 0)
        throttled = int(fields.pop("throttled_gpus") or 0)
        xids = int(fields.pop("xid_gpus") or 0)
        nodes.append(
            Node(
                hostname=host,
                instance=target,
                up=state if state is not None else (True if count else None),
                source=source,
                gpus=tuple(members),
                gpu_count=count,
                throttled_gpus=throttled,
                xid_gpus=xids,
                **fields,  # type: ignore[arg-type]
            )
        )
    return nodes


def _agg(aggregates: Mapping[str, NodeValues], field_name: str, host: str) -> float | None:
    picked = aggregates.get(field_name, {}).get(host)
    return picked[1] if picked is not None else None


# -- jobs and ranks ---------------------------------------------------------------------
RankKey = tuple[str, str, str]  # (hostname, job_id, rank)


def rank_key(labels: Mapping[str, str]) -> RankKey | None:
    host, job, rank = labels.get("hostname"), labels.get("job_id"), labels.get("rank")
    if host is None or job is None or rank is None:
        return None
    return (host, job, rank)


def is_comm(phase: str) -> bool:
    return phase.lower().startswith(COMM_PHASE_PREFIXES)


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def build_jobs(
    info: Sequence[tuple[Mapping[str, str], float]],
    steps_rate: Sequence[tuple[Mapping[str, str], float]],
    step_sum_rate: Sequence[tuple[Mapping[str, str], float]],
    phase_rate: Sequence[tuple[Mapping[str, str], float]],
    last_step: Sequence[tuple[Mapping[str, str], float]],
    now_s: float,
) -> list[Job]:
    """Jobs and ranks from the training series (rates over the same window)."""
    infos: dict[RankKey, Mapping[str, str]] = {}
    for labels, _ in info:
        key = rank_key(labels)
        if key is not None:
            infos[key] = labels

    def by_key(rows: Sequence[tuple[Mapping[str, str], float]]) -> dict[RankKey, float]:
        out: dict[RankKey, float] = {}
        for labels, value in rows:
            key = rank_key(labels)
            if key is not None and math.isfinite(value):
                out[key] = value
        return out

    rates, sums, lasts = by_key(steps_rate), by_key(step_sum_rate), by_key(last_step)
    phases: dict[RankKey, dict[str, float]] = {}
    for labels, value in phase_rate:
        key = rank_key(labels)
        phase = labels.get("phase")
        if key is not None and phase is not None and math.isfinite(value):
            phases.setdefault(key, {})[phase] = value
    ranks: list[Rank] = []
    # only ranks whose info series is there now: a finished job leaves at once
    for key in sorted(infos, key=lambda k: (k[1], _index(k[2]), k[0])):
        labels = infos.get(key, {})
        per_s = rates.get(key)
        step_s = sums[key] / per_s if per_s and key in sums else None
        phase_s = {p: v / per_s for p, v in phases.get(key, {}).items()} if per_s else {}
        total = sum(phase_s.values())
        share = {p: v / total for p, v in phase_s.items()} if total > 0 else {}
        last = lasts.get(key)
        ranks.append(
            Rank(
                hostname=key[0],
                job_id=key[1],
                rank=_int_or_none(key[2]) or 0,
                local_rank=_int_or_none(labels.get("local_rank")),
                world_size=_int_or_none(labels.get("world_size")),
                pid=labels.get("pid", ""),
                gpu=labels.get("gpu", ""),
                steps_per_s=per_s,
                step_s=step_s,
                phase_s=phase_s,
                phase_share=share,
                last_step_age_s=max(0.0, now_s - last) if last is not None else None,
            )
        )
    return group_jobs(ranks)


def compute_times(ranks: Sequence[Rank]) -> list[float | None]:
    """Compute time per step of each rank of one job: its step time less the time
    it waited.  Waiting is data loading, communication phases, and the backward
    time beyond the job's shortest backward: the hook does not time collectives
    on their own, and under DDP the gradient all-reduce runs inside backward, so
    a rank that waits there for a slower peer shows it as a longer backward."""
    backwards = [r.phase_s["backward"] for r in ranks if "backward" in r.phase_s]
    fastest = min(backwards) if len(backwards) == len(ranks) and len(ranks) > 1 else None
    out: list[float | None] = []
    for r in ranks:
        if r.step_s is None:
            out.append(None)
            continue
        waiting = sum(v for p, v in r.phase_s.items() if p == DATA_PHASE or is_comm(p))
        if fastest is not None:
            waiting += max(0.0, r.phase_s["backward"] - fastest)
        out.append(max(0.0, r.step_s - waiting))
    return out


def group_jobs(ranks: Sequence[Rank]) -> list[Job]:
    """Ranks grouped by job id: each job's step, phase shares and straggler."""
    by_job: dict[str, list[Rank]] = {}
    for rank in ranks:
        by_job.setdefault(rank.job_id, []).append(rank)
    jobs = []
    for job_id in sorted(by_job):
        members = [
            replace(r, compute_s=c)
            for r, c in zip(by_job[job_id], compute_times(by_job[job_id]), strict=True)
        ]
        computes = [r.compute_s for r in members if r.compute_s is not None]
        median = statistics.median(computes) if computes else None
        with_skew = []
        for r in members:
            skew = r.compute_s / median if median and r.compute_s is not None else None
            with_skew.append(_replace_skew(r, skew))
        skewed = [r for r in with_skew if r.skew is not None]
        straggler = max(skewed, key=lambda r: r.skew or 0.0) if len(skewed) >= 2 else None
        steps = [r.step_s for r in with_skew if r.step_s is not None]
        phase_names = sorted({p for r in with_skew for p in r.phase_share})
        share = {
            p: sum(r.phase_share.get(p, 0.0) for r in with_skew if r.phase_share)
            / max(1, sum(1 for r in with_skew if r.phase_share))
            for p in phase_names
        }
        sizes = [r.world_size for r in with_skew if r.world_size is not None]
        jobs.append(
            Job(
                job_id=job_id,
                ranks=tuple(with_skew),
                world_size=max(sizes) if sizes else None,
                hosts=tuple(sorted({r.hostname for r in with_skew})),
                step_s=statistics.median(steps) if steps else None,
                phase_share=share,
                straggler=straggler,
                max_skew=straggler.skew if straggler is not None else None,
            )
        )
    return jobs


def _replace_skew(rank: Rank, skew: float | None) -> Rank:
    return replace(rank, skew=skew)
