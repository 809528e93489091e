"""A process's Slurm job in every view: the monitor's table (a JOB column,
sortable and matched by the filter) and detail screen, ``--once`` (text and
JSON), ``ls``, the exporter's ``hpc_job`` labels and the cluster views."""

from __future__ import annotations

import dataclasses
import io
import json
from typing import Any

from rich.text import Text

from gputui.cluster.view import Node
from gputui.exporter.jobs import JobWatcher
from gputui.exporter.train_metrics import train_families
from gputui.reports import cluster as cluster_report
from gputui.reports import ls as ls_report
from gputui.reports import monitor as once_report
from gputui.session import process_view, slurm_text
from gputui.snapshot.codec import print_document, snapshot_from_json, to_json
from gputui.snapshot.model import ContainerInfo, ProcessSnapshot, SlurmJob
from gputui.tui.cluster.rows import PROCESS_COLUMNS, process_rows
from gputui.tui.screens.detail import DetailPanel, DetailValues
from gputui.tui.widgets import process_rows as table_rows
from tests.helpers.synthetic import make_snapshots, replay_source
from tests.unit.test_exporter import FakeClient, FakeHello, collector_with, parse, samples

HOSTILE = "evil\x1b[2J\nname\u202e"
TRAIN = SlurmJob(4242, "0", name="train")
ARRAY = SlurmJob(38, "batch", uid=1000, name="sweep", array_job_id=36, array_task_id=2)
HOSTILE_JOB = SlurmJob(77, "0", name=HOSTILE, note="scontrol did not answer in 1 s")
DOCKER = ContainerInfo("docker", "ab" * 32)


def _snapshot(*extra: ProcessSnapshot) -> Any:
    snap = make_snapshots(n_gpus=2, n_procs=2, n_steps=1)[0]
    return dataclasses.replace(snap, processes=(*snap.processes, *extra))


def _proc(pid: int, gpu: int = 0, **fields: Any) -> ProcessSnapshot:
    return ProcessSnapshot(
        pid=pid,
        gpu_index=gpu,
        gpu_uuid=f"GPU-{gpu}",
        type="compute",
        gpu_mem_bytes=1 << 30,
        **fields,
    )


def _plain(value: Any) -> str:
    return value.plain if isinstance(value, Text) else str(value)


def test_labels() -> None:
    assert slurm_text.label(_proc(1, slurm=TRAIN)) == "4242.0 train"
    assert slurm_text.label(_proc(1, slurm=ARRAY)) == "36_2.batch sweep"
    assert slurm_text.label(_proc(1, slurm=SlurmJob(9))) == "9"
    assert slurm_text.label(_proc(1)) == ""
    shown = slurm_text.label(_proc(1, slurm=HOSTILE_JOB))
    assert "\x1b" not in shown and "\n" not in shown and "\u202e" not in shown
    assert slurm_text.label_of(to_json(ARRAY)) == "36_2.batch sweep"
    assert slurm_text.label_of(None) == "" and slurm_text.label_of({"bogus": 1}) == ""


def test_table_column_only_with_jobs_sorted_and_filtered() -> None:
    host = [_proc(1), _proc(2)]
    assert "job" not in process_view.shown_columns(200, host)
    procs = [*host, _proc(3, slurm=TRAIN), _proc(4, slurm=ARRAY), _proc(5, slurm=ARRAY)]
    assert "job" in process_view.shown_columns(200, procs)
    assert "job" in process_view.shown_columns(80, procs)
    assert "container" not in process_view.shown_columns(200, procs)
    rows = process_view.build_rows(
        procs, process_view.SortSpec("job"), process_view.ProcFilter(), False, 0.0
    )
    # by job (the array's task before job 4242), those in no job last
    assert [r.pid for r in rows] == [4, 5, 3, 1, 2]
    index = process_view.COLUMN_KEYS.index("job")
    assert _plain(table_rows.cells(rows[0], 0.0)[index]) == "36_2.batch sweep"
    assert len(table_rows.cells(rows[0], 0.0)) == len(process_view.COLUMNS)
    parent = process_view.Row("parent|9", None, 9)
    assert len(table_rows.cells(parent, 0.0)) == len(process_view.COLUMNS)
    for text, pids in [
        ("4242", [3]),
        ("36_2", [4, 5]),
        ("38.batch", [4, 5]),
        ("sweep", [4, 5]),
        ("slurm", [3, 4, 5]),
    ]:
        shown = [p.pid for p in procs if process_view.ProcFilter.parse(text).matches(p)]
        assert shown == pids, text


def test_detail_facts_are_cleaned_and_say_what_is_missing() -> None:
    facts = dict(slurm_text.facts(_proc(3, slurm=ARRAY)))
    assert facts["Slurm job"] == "38 (array 36, task 2)  sweep"
    assert facts["step"] == "36_2.batch: the batch script"
    assert facts["owner uid"] == "1000"
    hostile = dict(slurm_text.facts(_proc(3, slurm=HOSTILE_JOB)))
    assert "\x1b" not in hostile["Slurm job"] and hostile["step"].endswith("a step of srun")
    assert hostile["job name"] == "scontrol did not answer in 1 s"
    assert dict(slurm_text.facts(_proc(3, slurm=SlurmJob(5, "0+1"))))["step"].endswith("component")
    assert slurm_text.facts(_proc(1)) == []
    panel = DetailPanel(DetailValues(_proc(3, slurm=HOSTILE_JOB)), ascii_only=False)
    text = panel.build(100).plain
    assert "Slurm" in text and "77" in text and "\x1b" not in text


def test_once_text() -> None:
    snap = _snapshot(_proc(3, slurm=HOSTILE_JOB), _proc(4, 1, slurm=ARRAY))
    text = "\n".join(once_report.render(snap, replay_source([snap]), None, width=140))
    assert "Job" in text and "36_2.batch sweep" in text and "\x1b" not in text
    host_only = "\n".join(once_report.render(_snapshot(), replay_source([snap]), None, width=140))
    assert "Job" not in host_only
    for width in (80, 100, 140):
        lines = once_report.render(snap, replay_source([snap]), None, width=width)
        assert max(map(len, lines)) <= width


def test_once_json_with_a_job_and_a_container() -> None:
    """--once --json writes processes in a job or a container (it failed on a
    container: the process's encoder met a value it could not write)."""
    snap = _snapshot(_proc(3, slurm=HOSTILE_JOB), _proc(4, container=DOCKER, slurm=TRAIN))
    out = io.StringIO()
    print_document(snap, "live", False, out=out)
    doc = json.loads(out.getvalue())
    jobs = {p["pid"]: p["slurm"] for p in doc["processes"]}
    assert jobs[3]["name"] == HOSTILE  # JSON keeps the exact string
    assert jobs[4] == {
        "job_id": 4242,
        "step": "0",
        "uid": None,
        "name": "train",
        "array_job_id": None,
        "array_task_id": None,
        "note": None,
    }
    assert doc["processes"][-1]["container"]["id"] == "ab" * 32
    assert all(p["slurm"] is None for p in doc["processes"][:-2])
    assert snapshot_from_json(doc) == snap


def test_a_recording_without_jobs_still_reads() -> None:
    snap = _snapshot()
    out = io.StringIO()
    print_document(snap, "live", False, out=out)
    doc = json.loads(out.getvalue())
    for process in doc["processes"]:
        del process["slurm"]  # as gputui wrote them before
    assert snapshot_from_json(doc) == snap


def test_ls_column() -> None:
    job = {
        "pid": 5,
        "command": ["python", "t.py"],
        "steps": 3,
        "recent_step_s": 0.1,
        "rank": None,
        "world_size": 1,
    }
    plain = "\n".join(ls_report.render([dict(job, container=None, slurm=None)], width=120))
    assert "JOB" not in plain
    placed = "\n".join(
        ls_report.render(
            [dict(job, container=None, slurm=to_json(ARRAY)), {"pid": 6, "error": "x"}],
            width=120,
        )
    )
    assert "JOB" in placed and "36_2.batch sweep" in placed


def test_exporter_process_and_gpu_labels() -> None:
    snap = _snapshot(
        _proc(3, slurm=TRAIN), _proc(4, slurm=ARRAY), _proc(5, slurm=TRAIN), _proc(6, 1)
    )
    families = parse(collector_with([snap], processes=True).render())
    by_pid = {
        s.labels["pid"]: s.labels for s in samples(families, "gputui_process_gpu_memory_bytes")
    }
    assert by_pid["3"]["hpc_job"] == "4242" and by_pid["4"]["hpc_job"] == "38"
    assert "hpc_job" not in by_pid["6"]
    # a GPU's gauges: one series per job on it (dcgm-exporter's mapping), none without
    util = [s.labels for s in samples(families, "gputui_gpu_utilization_ratio")]
    gpu0 = sorted(lab.get("hpc_job", "") for lab in util if lab["gpu"] == "0")
    gpu1 = [lab.get("hpc_job") for lab in util if lab["gpu"] == "1"]
    assert gpu0 == ["38", "4242"] and gpu1 == [None]
    # its counters and identity are one series whatever the jobs
    for name in ("gputui_gpu_ecc_errors", "gputui_gpu_info", "gputui_gpu_lost"):
        series = samples(families, name)
        assert series and all("hpc_job" not in s.labels for s in series), name


def test_exporter_training_labels() -> None:
    client = FakeClient(7, FakeHello(pid=7, rank=0))
    watcher = JobWatcher(
        "n1",
        connect=lambda pid, t: client,
        list_jobs=lambda: {7: "/x"},
        container_of=lambda pid: None,
        slurm_of=lambda pid: ARRAY,
    )
    watcher.scan()
    (job,) = watcher.snapshot()
    watcher.stop()
    assert job.slurm == ARRAY
    for family in train_families([job], "n1", cmdline=False):
        for sample in family.samples:
            assert sample[1].as_dict()["hpc_job"] == "38"


def _node(*processes: ProcessSnapshot) -> Node:
    return Node(
        hostname="n1",
        instance=None,
        up=True,
        source="gputui",
        gpus=(),
        gpu_count=0,
        util_mean=None,
        sm_active_mean=None,
        tensor_active_mean=None,
        dram_active_mean=None,
        power_w=None,
        mem_used_bytes=None,
        mem_total_bytes=None,
        throttled_gpus=0,
        state="up",
        processes=processes,
    )


def test_cluster_views_group_processes_by_job() -> None:
    node = _node(_proc(1), _proc(3, slurm=TRAIN), _proc(2, 1, slurm=ARRAY), _proc(4, slurm=ARRAY))
    lines = cluster_report.node_lines(node, 120)
    text = "\n".join(lines)
    assert "JOB" in text
    order = [line.split()[0] for line in lines if line.strip()[:1].isdigit()]
    assert order == ["4", "2", "3", "1"]  # job 36_2's on GPU 0 then 1, job 4242's, none
    rows = process_rows(node.processes)
    assert [key for key, _cells in rows] == ["0/4", "1/2", "0/3", "0/1"]
    job_at = [name for name, _w in PROCESS_COLUMNS].index("job")
    assert _plain(rows[2][1][job_at]) == "4242.0 train"
    plain = "\n".join(cluster_report.node_lines(_node(_proc(1)), 120))
    assert "JOB" not in plain
