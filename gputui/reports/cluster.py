"""``gputui cluster --once``: the snapshot as text, or as JSON.

Text: every label value from Prometheus passes :func:`gputui.fmt.clean` (a
hostname or job id is chosen by whoever runs the node).  JSON keeps the exact
strings and plain numbers in base units.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gputui import fmt
from gputui.cluster.view import ClusterSnapshot, Job, Node, state_label
from gputui.reports import jsondoc
from gputui.reports.jsondoc import finite
from gputui.reports.text import emit, indented_table, output_width, plural, table, wrap, wrap_items
from gputui.session import container_text, slurm_text

#: 2: nodes read over SSH (state, note, processes, remote_hostname, age_s)
JSON_SCHEMA = 2


def to_json(snapshot: ClusterSnapshot) -> dict[str, Any]:
    doc = dataclasses.asdict(snapshot)
    doc = finite(doc)
    return {"schema": JSON_SCHEMA, "type": "gputui-cluster", **doc}


def print_json(snapshot: ClusterSnapshot) -> None:
    jsondoc.print_json(to_json(snapshot), indent=1)


def _ratio(value: float | None) -> str:
    return fmt.pct(None if value is None else value * 100)


def _power(watts: float | None) -> str:
    return fmt.NA if watts is None else f"{watts:.0f}W"


def _memory(used: float | None, total: float | None) -> str:
    """``12.3GiB/80.0GiB``; ``N/A`` for a node that said neither (a node down)."""
    if used is None and total is None:
        return fmt.NA
    return f"{fmt.size(used)}/{fmt.size(total)}"


#: the indent of a job's rank table
_TAB = "  "


def node_table(nodes: tuple[Node, ...], width: int) -> list[str]:
    """One row per node; the hostname gives way (elided in the middle)."""
    rows = [
        [
            fmt.clean(n.hostname, 128),
            state_label(n),
            str(n.gpu_count),
            _ratio(n.util_mean),
            _ratio(n.sm_active_mean),
            _ratio(n.tensor_active_mean),
            _ratio(n.dram_active_mean),
            _power(n.power_w),
            _memory(n.mem_used_bytes, n.mem_total_bytes),
        ]
        for n in nodes
    ]
    out = table(
        ["NODE", "UP", "GPUS", "UTIL", "SM", "TENSOR", "DRAM", "POWER", "MEMORY"],
        rows,
        width,
        right=[False, *[True] * 8],
        flexible=0,
        optional=(5, 6, 4, 7),  # narrower: tensor, DRAM, SM and power give way
    )
    throttled = [
        f"{fmt.clean(n.hostname, 128)} ({plural(n.throttled_gpus, 'GPU')})"
        for n in nodes
        if n.throttled_gpus
    ]
    if throttled:
        out.extend(wrap("throttled: " + ", ".join(throttled), width, "", _TAB))
    xids = [
        f"{fmt.clean(n.hostname, 128)} ({plural(n.xid_gpus, 'GPU')})" for n in nodes if n.xid_gpus
    ]
    if xids:
        out.extend(wrap("Xid errors: " + ", ".join(xids), width, "", _TAB))
    return out


def job_lines(job: Job, width: int) -> list[str]:
    """A job's step and phase shares, then its ranks (the straggler marked)."""
    head = [
        f"job {fmt.clean(job.job_id, 48)}",
        f"ranks {len(job.ranks)}" + (f"/{job.world_size}" if job.world_size else ""),
        f"step {fmt.ms(job.step_s, decimals=1, missing=fmt.NA)}",
        *(
            f"{fmt.clean(p, 16)} {v * 100:.0f}%"
            for p, v in sorted(job.phase_share.items(), key=lambda kv: -kv[1])
        ),
    ]
    lines = wrap_items(head, width, subsequent=_TAB)
    rows = []
    for r in job.ranks:
        straggler = job.straggler is r and (r.skew or 0) >= 1.1
        rows.append(
            [
                str(r.rank),
                fmt.clean(r.hostname, 128),
                fmt.clean(r.gpu, 16),
                fmt.ms(r.step_s, decimals=1, missing=fmt.NA),
                fmt.ms(r.compute_s, decimals=1, missing=fmt.NA),
                "N/A" if r.skew is None else f"{r.skew:.2f}",
                "<- straggler" if straggler else "",
            ]
        )
    headers = ["rank", "host", "gpu", "step", "compute", "skew", ""]
    right = [True, False, True, True, True, True, False]
    return lines + indented_table(headers, rows, width, right=right, flexible=1)


def render(snapshot: ClusterSnapshot, width: int | None = None) -> list[str]:
    """The snapshot as lines of at most ``width`` characters (the output's width
    by default)."""
    width = output_width() if width is None else width
    head = [fmt.clean(snapshot.url)]
    if snapshot.selector:
        head.append(f"{{{fmt.clean(snapshot.selector)}}}")
    head += [
        f"{plural(len(snapshot.nodes), 'node')},",
        f"{plural(sum(n.gpu_count for n in snapshot.nodes), 'GPU')},",
        f"{plural(len(snapshot.jobs), 'job')}",
        f"(read in {fmt.ms(snapshot.latency_s, decimals=0, space=True)})",
    ]
    out = wrap_items(head, width, " ", subsequent=_TAB)
    out += node_table(snapshot.nodes, width)
    for node in snapshot.nodes:
        if node.state is not None:  # read over SSH: each node's GPUs and processes
            out.append("")
            out += node_lines(node, width)
    for job in snapshot.jobs:
        out.append("")
        out += job_lines(job, width)
    return out


def node_lines(node: Node, width: int) -> list[str]:
    """A node read over SSH: its state and why, its GPUs, its GPU processes."""
    head = [f"{fmt.clean(node.hostname, 128)}:", node.state or "?"]
    if node.source:
        head.append(f"({node.source})")
    if node.remote_hostname and node.remote_hostname != node.hostname:
        head.append(f"host {fmt.clean(node.remote_hostname, 128)}")
    out = wrap_items(head, width, " ", subsequent=_TAB)
    if node.note:
        out += wrap(fmt.clean(node.note, 400), width, _TAB, _TAB)
    if node.gpus:
        # an XID column (the last Xid's code) while a GPU's driver reported one
        xid = any(g.xid_last for g in node.gpus)
        gpus = [
            [
                fmt.clean(g.gpu, 6),
                fmt.gpu_name(g.model),
                _ratio(g.util_ratio),
                f"{fmt.size(g.mem_used_bytes)}/{fmt.size(g.mem_total_bytes)}",
                _power(g.power_w),
                fmt.NA if g.temp_c is None else f"{g.temp_c:.0f}C",
                *([f"{g.xid_last:.0f}" if g.xid_last else "-"] if xid else []),
            ]
            for g in node.gpus
        ]
        headers = ["GPU", "MODEL", "UTIL", "MEMORY", "POWER", "TEMP", *(["XID"] if xid else [])]
        out += _indented(headers, gpus, width, 1)
    if node.processes:
        # a container column while some process runs in one (or is a host pid),
        # a job column while one runs in a Slurm job (the processes grouped by job)
        placed = any(p.container is not None or p.pid_is_host for p in node.processes)
        in_job = any(p.slurm is not None for p in node.processes)
        procs = [
            [
                str(p.pid),
                str(p.gpu_index),
                fmt.clean(p.user, 32),
                fmt.size(p.gpu_mem_bytes),
                *([container_text.label(p)] if placed else []),
                *([slurm_text.label(p)] if in_job else []),
                fmt.command(p.cmdline, p.name),
            ]
            for p in (slurm_text.grouped(node.processes) if in_job else node.processes)
        ]
        headers = [
            "PID",
            "GPU",
            "USER",
            "GPU MEM",
            *(["CONTAINER"] if placed else []),
            *(["JOB"] if in_job else []),
            "COMMAND",
        ]
        out += _indented(headers, procs, width, len(headers) - 1)
    return out


def _indented(headers: list[str], rows: list[list[str]], width: int, flexible: int) -> list[str]:
    """A table under a node, its flexible column a name (left), the others numbers."""
    words = ("USER", "MODEL", "CONTAINER", "JOB")
    right = [i != flexible and h not in words for i, h in enumerate(headers)]
    return indented_table(headers, rows, width, right=right, flexible=flexible)


def print_text(snapshot: ClusterSnapshot, ascii_only: bool = False) -> None:
    emit(render(snapshot), ascii_only)
