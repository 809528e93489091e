"""Table rows of the cluster screen, built from a :class:`ClusterSnapshot`.

Plain values in, Rich ``Text`` cells out; every label value from Prometheus (a
hostname, a model name, a job id, a phase name) passes ``gputui.fmt.clean``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.text import Text

from gputui import fmt
from gputui.cluster.view import Gpu, Job, Node, Rank, state_label
from gputui.session import container_text, slurm_text
from gputui.snapshot.model import ProcessSnapshot
from gputui.tui.cluster.keyed_table import KeyedRow
from gputui.tui.render import bar, level_style, sparkline

# (label, width): fixed widths, so that new values never make the table re-measure
# its columns (that layout pass was most of a refresh's CPU on a large cluster)
NODE_COLUMNS = (
    ("node", 24),
    ("up", 5),
    ("GPUs", 4),
    ("util", 10),
    ("SM", 4),
    ("tensor", 6),
    ("DRAM", 4),
    ("power", 7),
    ("memory", 17),
    ("notes", 44),
)
GPU_COLUMNS = (
    ("GPU", 3),
    ("model", 28),
    ("util", 10),
    ("SM", 4),
    ("tensor", 6),
    ("DRAM", 4),
    ("power", 6),
    ("memory", 17),
    ("temp", 4),
)
HISTORY_COLUMN = "util, 10 min"
JOB_COLUMNS = (
    ("job / rank", 36),
    ("host", 20),
    ("GPU", 3),
    ("step", 9),
    ("compute", 9),
    ("skew", 13),
    ("phases per step", 44),
)

#: a rank this much slower than the job's median is marked
STRAGGLER_SKEW = 1.1
PHASE_ABBREV = {
    "data": "data",
    "forward": "fwd",
    "backward": "bwd",
    "optimizer": "opt",
    "other": "oth",
}


def _ratio_text(value: float | None) -> Text:
    if value is None:
        return Text(fmt.NA, style="dim", justify="right")
    return Text(fmt.pct(value * 100), style=level_style(value * 100), justify="right")


def _right(text: str, style: str = "") -> Text:
    return Text(text, style=style, justify="right")


def _power(watts: float | None) -> str:
    return fmt.NA if watts is None else f"{watts:.0f}W"


def _memory(used: float | None, total: float | None) -> Text:
    if used is None:
        return _right(fmt.NA, "dim")
    style = level_style(100 * used / total) if total else ""
    return _right(f"{fmt.size(used)}/{fmt.size(total)}", style)


def node_rows(nodes: Sequence[Node], ascii_only: bool) -> list[KeyedRow]:
    rows: list[KeyedRow] = []
    for node in nodes:
        label = state_label(node)
        style = {"DOWN": "bold red", "ERROR": "bold red", "?": "dim", "slow": "yellow"}
        up = Text(label, style=style.get(label, "green"))
        util = bar(node.util_mean, 10, ascii_only, label=fmt.pct(_pct(node.util_mean)))
        notes = Text("")
        if node.throttled_gpus:
            notes.append(
                f"{node.throttled_gpus} GPU{'s' if node.throttled_gpus > 1 else ''} throttled  ",
                style="yellow",
            )
        if node.xid_gpus:
            notes.append(
                f"{node.xid_gpus} GPU{'s' if node.xid_gpus > 1 else ''} with Xid errors  ",
                style="bold red",
            )
        if node.source == "nvidia-smi only":
            notes.append("nvidia-smi only  ", style="dim")
        if node.note:
            notes.append(fmt.clean(node.note, 200), style="red" if node.up is False else "dim")
        rows.append(
            (
                node.hostname,
                (
                    Text(fmt.clean(node.hostname, 24)),
                    up,
                    _right(str(node.gpu_count)),
                    util,
                    _ratio_text(node.sm_active_mean),
                    _ratio_text(node.tensor_active_mean),
                    _ratio_text(node.dram_active_mean),
                    _right(_power(node.power_w)),
                    _memory(node.mem_used_bytes, node.mem_total_bytes),
                    notes,
                ),
            )
        )
    return rows


def _pct(value: float | None) -> float | None:
    return None if value is None else value * 100


def gpu_rows(gpus: Sequence[Gpu], ascii_only: bool, spark_width: int = 30) -> list[KeyedRow]:
    rows: list[KeyedRow] = []
    for gpu in gpus:
        history = [None if v is None else v * 100 for v in gpu.util_history]
        temp = fmt.NA if gpu.temp_c is None else f"{gpu.temp_c:.0f}C"
        name = fmt.gpu_name(gpu.model)[:16]
        if (gpu.throttled_ratio or 0) >= 0.01:
            name += " (throttled)"
        if gpu.xid_last:
            name += f" Xid {gpu.xid_last:.0f}"
        rows.append(
            (
                f"{gpu.hostname}/{gpu.gpu}",
                (
                    _right(fmt.clean(gpu.gpu, 6)),
                    Text(
                        name,
                        style="bold red"
                        if gpu.xid_last
                        else "yellow"
                        if "throttled" in name
                        else "",
                    ),
                    bar(gpu.util_ratio, 10, ascii_only, label=fmt.pct(_pct(gpu.util_ratio))),
                    _ratio_text(gpu.sm_active_ratio),
                    _ratio_text(gpu.tensor_active_ratio),
                    _ratio_text(gpu.dram_active_ratio),
                    _right(_power(gpu.power_w)),
                    _memory(gpu.mem_used_bytes, gpu.mem_total_bytes),
                    _right(temp),
                    sparkline(history, spark_width, 100.0, ascii_only) if history else Text(""),
                ),
            )
        )
    return rows


PROCESS_COLUMNS = (
    ("pid", 8),
    ("GPU", 3),
    ("user", 12),
    ("GPU mem", 9),
    ("SM", 4),
    ("container", 24),
    ("job", 16),
    ("command", 80),
)


def process_rows(processes: Sequence[ProcessSnapshot]) -> list[KeyedRow]:
    """A node's GPU processes, grouped by Slurm job (names and command lines
    chosen by its users: cleaned)."""
    return [
        (
            f"{p.gpu_index}/{p.pid}",
            (
                _right(str(p.pid)),
                _right(str(p.gpu_index)),
                Text(fmt.clean(p.user, 12)),
                _right(fmt.size(p.gpu_mem_bytes)),
                _right(fmt.pct(p.sm_pct)),
                Text(container_text.label(p), style="dim" if p.pid_is_host else ""),
                Text(slurm_text.label(p)),
                Text(fmt.command(p.cmdline, p.name, 300), style="bold" if p.hooked else ""),
            ),
        )
        for p in slurm_text.grouped(processes)
    ]


def _ms_cell(seconds: float | None) -> Text:
    return _right(fmt.ms(seconds, decimals=1, missing=fmt.NA), "" if seconds else "dim")


def _phases(shares: Mapping[str, float]) -> Text:
    items = sorted(shares.items(), key=lambda kv: -kv[1])
    text = Text()
    for name, share in items[:4]:
        label = PHASE_ABBREV.get(name, fmt.clean(name, 10))
        style = "bold yellow" if name == "data" and share > 0.05 else ""
        text.append(f"{label} {share * 100:.0f}%  ", style=style)
    return text


def _skew(rank: Rank) -> Text:
    if rank.skew is None:
        return _right(fmt.NA, "dim")
    style = "bold red" if rank.skew >= 1.25 else "yellow" if rank.skew >= STRAGGLER_SKEW else ""
    return _right(f"{rank.skew:.2f}", style)


def job_rows(jobs: Sequence[Job]) -> list[KeyedRow]:
    rows: list[KeyedRow] = []
    for job in jobs:
        size = f"{len(job.ranks)}/{job.world_size}" if job.world_size else str(len(job.ranks))
        straggler = ""
        if job.straggler is not None and (job.max_skew or 0) >= STRAGGLER_SKEW:
            straggler = f"rank {job.straggler.rank} {job.max_skew:.2f}x"
        rows.append(
            (
                f"job:{job.job_id}",
                (
                    Text(f"{fmt.middle(fmt.clean(job.job_id), 28)} [{size}]", style="bold"),
                    Text(fmt.clean(", ".join(job.hosts), 20)),
                    Text(""),
                    _ms_cell(job.step_s),
                    Text(""),
                    _right(straggler, "bold red") if straggler else Text(""),
                    _phases(job.phase_share),
                ),
            )
        )
        for rank in job.ranks:
            rows.append(
                (
                    f"rank:{job.job_id}/{rank.hostname}/{rank.rank}",
                    (
                        Text(f"  rank {rank.rank}"),
                        Text(fmt.clean(rank.hostname, 20)),
                        _right(fmt.clean(rank.gpu, 6)),
                        _ms_cell(rank.step_s),
                        _ms_cell(rank.compute_s),
                        _skew(rank),
                        _phases(rank.phase_share),
                    ),
                )
            )
    return rows
