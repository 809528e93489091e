"""``gputui cluster --once``: the snapshot as text, or as JSON.

Text: every label value from Prometheus passes :func:`gputui.fmt.clean` (a
hostname or job id is chosen by whoever runs the node).  JSON keeps the exact
strings and plain numbers in base units.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gputui import fmt
from gputui.cluster.view import ClusterSnapshot, Job, Node
from gputui.reports import jsondoc
from gputui.reports.jsondoc import finite

JSON_SCHEMA = 1


def to_json(snapshot: ClusterSnapshot) -> dict[str, Any]:
    doc = dataclasses.asdict(snapshot)
    doc = finite(doc)
    return {"schema": JSON_SCHEMA, "type": "gputui-cluster", **doc}


def print_json(snapshot: ClusterSnapshot) -> None:
    jsondoc.print_json(to_json(snapshot), indent=1)


def _ratio(value: float | None) -> str:
    return fmt.pct(None if value is None else value * 100)


def _ms(seconds: float | None) -> str:
    return fmt.NA if seconds is None else f"{seconds * 1000:.1f}ms"


def node_line(node: Node) -> str:
    state = {True: "up", False: "DOWN", None: "?"}[node.up]
    throttled = f"{node.throttled_gpus} throttled" if node.throttled_gpus else ""
    return (
        f"{fmt.clean(node.hostname, 24):<24} {state:>4} {node.gpu_count:>4} "
        f"{_ratio(node.util_mean):>5} {_ratio(node.sm_active_mean):>5} "
        f"{_ratio(node.tensor_active_mean):>6} {_ratio(node.dram_active_mean):>5} "
        f"{_power(node.power_w):>7} "
        f"{fmt.size(node.mem_used_bytes):>8}/{fmt.size(node.mem_total_bytes):<8} "
        f"{throttled}"
    ).rstrip()


def _power(watts: float | None) -> str:
    return fmt.NA if watts is None else f"{watts:.0f}W"


def job_lines(job: Job) -> list[str]:
    share = "  ".join(
        f"{fmt.clean(p, 16)} {v * 100:.0f}%"
        for p, v in sorted(job.phase_share.items(), key=lambda kv: -kv[1])
    )
    head = (
        f"job {fmt.clean(job.job_id, 48)}  ranks {len(job.ranks)}"
        + (f"/{job.world_size}" if job.world_size else "")
        + f"  step {_ms(job.step_s)}  {share}"
    )
    lines = [head.rstrip()]
    for r in job.ranks:
        straggler = "  <- straggler" if job.straggler is r and (r.skew or 0) >= 1.1 else ""
        lines.append(
            f"  rank {r.rank:>3} {fmt.clean(r.hostname, 20):<20} gpu {fmt.clean(r.gpu, 3):>3} "
            f"step {_ms(r.step_s):>9} compute {_ms(r.compute_s):>9} "
            f"skew {'N/A' if r.skew is None else f'{r.skew:.2f}':>5}{straggler}"
        )
    return lines


def print_text(snapshot: ClusterSnapshot) -> None:
    out = [
        f"{fmt.clean(snapshot.url)}"
        + (f"  {{{fmt.clean(snapshot.selector)}}}" if snapshot.selector else "")
        + f"  {len(snapshot.nodes)} nodes, {sum(n.gpu_count for n in snapshot.nodes)} GPUs,"
        f" {len(snapshot.jobs)} jobs  (read in {snapshot.latency_s * 1000:.0f} ms)",
        f"{'NODE':<24} {'UP':>4} {'GPUS':>4} {'UTIL':>5} {'SM':>5} {'TENSOR':>6} {'DRAM':>5} "
        f"{'POWER':>7} {'MEMORY':>17}",
    ]
    out += [node_line(n) for n in snapshot.nodes]
    for job in snapshot.jobs:
        out.append("")
        out += job_lines(job)
    print("\n".join(out))
