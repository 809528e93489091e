"""The cluster over SSH as the view's values: host views in, a ClusterSnapshot out.

Pure functions: a node's snapshot (from ``gputui serve`` or nvidia-smi) becomes
a :class:`Node` with its :class:`Gpu` rows in the units the Prometheus source
uses (ratios 0-1, bytes, watts), its processes as the snapshot has them, and
its hooked ranks grouped into jobs across nodes by their job id.
"""

from __future__ import annotations

from collections.abc import Sequence

from gputui.cluster.ssh import HISTORY_S, HISTORY_STEP_S, MODE_SMI, HostView
from gputui.cluster.view import (
    THROTTLED_MIN_RATIO,
    ClusterSnapshot,
    Gpu,
    Node,
    Rank,
    group_jobs,
    mean_of,
    sum_of,
)
from gputui.snapshot.model import DeviceSnapshot

SSH_URL = "ssh"


def _ratio(pct: float | None) -> float | None:
    return None if pct is None else pct / 100.0


def gpu_of(host: str, d: DeviceSnapshot, view: HostView) -> Gpu:
    gpm = d.gpm
    history = view.history.get(d.index, ())
    return Gpu(
        hostname=host,
        gpu=str(d.index),
        uuid=d.uuid,
        model=d.name,
        source="nvidia-smi" if view.mode == MODE_SMI else "gputui",
        util_ratio=_ratio(d.util_gpu_pct),
        sm_active_ratio=_ratio(gpm.sm_activity_pct) if gpm else None,
        tensor_active_ratio=_ratio(gpm.tensor_activity_pct) if gpm else None,
        dram_active_ratio=_ratio(gpm.dram_bw_util_pct) if gpm else None,
        power_w=d.power_w,
        mem_used_bytes=None if d.mem_used_bytes is None else float(d.mem_used_bytes),
        mem_total_bytes=None if d.mem_total_bytes is None else float(d.mem_total_bytes),
        temp_c=d.temp_gpu_c,
        throttled_ratio=view.throttled.get(d.index),
        xid_last=_xid_last(d),
        xid_count=float(sum(c.count for c in d.xid_counts)) if d.xid_sources else None,
        util_history=tuple(None if v is None else v / 100.0 for v in history),
    )


def _xid_last(d: DeviceSnapshot) -> float | None:
    """The GPU's last Xid (0: none), as the exporter serves it; None where its
    Xid errors are not watched."""
    if d.xid_errors:
        return float(d.xid_errors[-1].xid)
    return 0.0 if d.xid_sources else None


def _note(view: HostView) -> str | None:
    if view.state in ("down", "protocol error", "slow", "connecting") and view.reason:
        return view.reason
    if view.gpu_unavailable:
        return f"no GPU: {view.gpu_unavailable}"
    if view.state == "up" and view.snapshot is not None and view.snapshot.error:
        return view.snapshot.error
    return None


def node_of(view: HostView) -> Node:
    # a node that is down shows no values: the last ones it sent are not its values now
    snapshot = view.snapshot if view.state in ("up", "slow") else None
    devices = snapshot.devices if snapshot is not None else ()
    gpus = tuple(gpu_of(view.host, d, view) for d in devices)
    up = {"up": True, "slow": True, "down": False, "protocol error": False}.get(view.state)
    return Node(
        hostname=view.host,
        instance=None,
        up=up,
        source=view.mode,
        gpus=gpus,
        gpu_count=len(gpus),
        util_mean=mean_of([g.util_ratio for g in gpus]),
        sm_active_mean=mean_of([g.sm_active_ratio for g in gpus]),
        tensor_active_mean=mean_of([g.tensor_active_ratio for g in gpus]),
        dram_active_mean=mean_of([g.dram_active_ratio for g in gpus]),
        power_w=sum_of([g.power_w for g in gpus]),
        mem_used_bytes=sum_of([g.mem_used_bytes for g in gpus]),
        mem_total_bytes=sum_of([g.mem_total_bytes for g in gpus]),
        throttled_gpus=sum(1 for g in gpus if (g.throttled_ratio or 0.0) >= THROTTLED_MIN_RATIO),
        xid_gpus=sum(1 for g in gpus if g.xid_last),
        state=view.state,
        note=_note(view),
        processes=snapshot.processes if snapshot is not None else (),
        remote_hostname=view.remote_host,
        age_s=view.age_s,
    )


def ranks_of(view: HostView) -> list[Rank]:
    return [
        Rank(
            hostname=view.host,
            job_id=r.job_id,
            rank=r.rank if r.rank is not None else 0,
            local_rank=r.local_rank,
            world_size=r.world_size,
            pid=str(r.pid),
            gpu="" if r.gpu is None else str(r.gpu),
            steps_per_s=None,
            step_s=r.recent_step_s,
        )
        for r in view.ranks
    ]


def build_snapshot(
    views: Sequence[HostView], taken_at_s: float, latency_s: float = 0.0
) -> ClusterSnapshot:
    """Every node in the order given, and the jobs of all their hooked ranks."""
    ranks = [rank for view in views if view.state in ("up", "slow") for rank in ranks_of(view)]
    return ClusterSnapshot(
        url=SSH_URL,
        selector="",
        taken_at_s=taken_at_s,
        latency_s=latency_s,
        nodes=tuple(node_of(v) for v in views),
        jobs=tuple(group_jobs(ranks)),
        history_s=HISTORY_S,
        history_step_s=HISTORY_STEP_S,
    )
