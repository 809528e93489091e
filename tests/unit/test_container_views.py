"""A process's container and pod in every view: the monitor's table and detail
screen, ``--once`` (text and JSON), ``ls``, and the exporter's labels."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from rich.text import Text

from gputui.exporter.jobs import JobWatcher
from gputui.exporter.train_metrics import train_families
from gputui.reports import ls as ls_report
from gputui.reports import monitor as once_report
from gputui.session import container_text, process_view
from gputui.snapshot.codec import snapshot_from_json, snapshot_to_json, to_json
from gputui.snapshot.model import ContainerInfo, PodInfo, ProcessSnapshot
from gputui.tui.screens.detail import DetailPanel, DetailValues
from gputui.tui.widgets import process_rows
from tests.helpers.synthetic import make_snapshots, replay_source
from tests.unit.test_exporter import FakeClient, FakeHello, collector_with, parse, samples

ID = "5dace3de0735f73d2b5048f12d41a71741a02e49668de921fdae62f7e65dc498"
UID = "7d4424e6-bb13-42f4-a47a-45a4828bf54d"
HOSTILE = "evil\x1b[2J\nname\u202e"
POD = ContainerInfo("cri-o", ID, name="train", pod=PodInfo(UID, "trainer-0", "ml", "burstable"))
HOSTILE_POD = dataclasses.replace(POD, name=HOSTILE, pod=PodInfo(UID, HOSTILE, "ns", "burstable"))
DOCKER = ContainerInfo("docker", ID, note="not permitted to use /var/run/docker.sock: ids only")


def _snapshot(*extra: ProcessSnapshot) -> Any:
    snap = make_snapshots(n_gpus=1, n_procs=2, n_steps=1)[0]
    return dataclasses.replace(snap, processes=(*snap.processes, *extra))


def _proc(pid: int, **fields: Any) -> ProcessSnapshot:
    return ProcessSnapshot(
        pid=pid, gpu_index=0, gpu_uuid="GPU-0", type="compute", gpu_mem_bytes=1 << 30, **fields
    )


def _plain(value: Any) -> str:
    return value.plain if isinstance(value, Text) else str(value)


def test_labels() -> None:
    assert container_text.label(_proc(1, container=POD)) == "ml/trainer-0"
    assert container_text.label(_proc(1, container=DOCKER)) == f"docker {ID[:12]}"
    unnamed_pod = ContainerInfo("containerd", ID, pod=PodInfo(UID, qos="besteffort"))
    assert container_text.label(_proc(1, container=unnamed_pod)) == "pod 7d4424e6"
    assert container_text.label(_proc(1, host_pid=1)) == "host pid"
    assert container_text.label(_proc(1)) == ""
    shown = container_text.label(_proc(1, container=HOSTILE_POD))
    assert "\x1b" not in shown and "\n" not in shown and "\u202e" not in shown
    assert container_text.label_of(to_json(POD)) == "ml/trainer-0"
    assert container_text.label_of(None) == "" and container_text.label_of({"bogus": 1}) == ""


def test_table_column_only_with_containers() -> None:
    host = [_proc(1), _proc(2)]
    assert "container" not in process_view.shown_columns(200, host)
    placed = [*host, _proc(3, container=POD)]
    assert "container" in process_view.shown_columns(200, placed)
    assert "container" in process_view.shown_columns(80, placed)
    rows = process_view.build_rows(
        placed, process_view.SortSpec("container"), process_view.ProcFilter(), False, 0.0
    )
    # sorted by container: the one in a pod first, the host's processes (no value) last
    assert [r.pid for r in rows] == [3, 1, 2]
    index = process_view.COLUMN_KEYS.index("container")
    assert _plain(process_rows.cells(rows[0], 0.0)[index]) == "ml/trainer-0"
    assert len(process_rows.cells(rows[1], 0.0)) == len(process_view.COLUMNS)
    parent = process_view.Row("parent|9", None, 9)
    assert len(process_rows.cells(parent, 0.0)) == len(process_view.COLUMNS)


def test_a_host_pid_is_keyed_apart_from_a_local_pid_of_the_same_number() -> None:
    local, host = _proc(42), _proc(42, host_pid=42)
    assert local.key != host.key
    rows = process_view.build_rows(
        [local, host], process_view.SortSpec(), process_view.ProcFilter(), False, 0.0
    )
    assert len({r.key for r in rows}) == 2


def test_filter_matches_pod_namespace_and_id() -> None:
    procs = [_proc(1), _proc(3, container=POD), _proc(4, host_pid=4)]
    for text, pids in [
        ("trainer-0", [3]),
        ("ml", [3]),
        (ID[:8], [3]),
        ("cri-o", [3]),
        ("host", [4]),
    ]:
        shown = [p.pid for p in procs if process_view.ProcFilter.parse(text).matches(p)]
        assert shown == pids, text


def test_detail_facts_are_cleaned_and_say_what_is_missing() -> None:
    facts = dict(container_text.facts(_proc(3, container=HOSTILE_POD, host_pid=9000)))
    assert facts["host pid"] == "9000"
    assert "\x1b" not in facts["pod"] and UID in facts["pod"]
    assert facts["QoS class"] == "burstable"
    docker = dict(container_text.facts(_proc(3, container=DOCKER)))
    assert docker["container"].startswith("(name not known)")
    assert "not permitted" in docker["names"]
    host = dict(container_text.facts(_proc(4, host_pid=4)))
    assert "host pid" in host["pid"]
    assert container_text.facts(_proc(1)) == []
    panel = DetailPanel(DetailValues(_proc(3, container=HOSTILE_POD)), ascii_only=False)
    text = panel.build(100).plain
    assert "Container" in text and "trainer" not in text and "\x1b" not in text


def test_once_text_and_json() -> None:
    snap = _snapshot(_proc(3, container=HOSTILE_POD), _proc(4, host_pid=4))
    lines = once_report.render(snap, replay_source([snap]), None, width=140)
    text = "\n".join(lines)
    assert "Container" in text and "host pid" in text and "\x1b" not in text
    assert "ns/evil" in text
    host_only = "\n".join(once_report.render(_snapshot(), replay_source([snap]), None, width=140))
    assert "Container" not in host_only
    doc = json.loads(json.dumps(snapshot_to_json(snap)))
    assert doc["schema"] == 2
    placed = doc["processes"][-2]
    assert placed["container"]["pod"]["name"] == HOSTILE  # JSON keeps the exact string
    assert placed["container"]["pod"]["uid"] == UID and placed["host_pid"] is None
    assert doc["processes"][-1]["host_pid"] == doc["processes"][-1]["pid"] == 4
    assert snapshot_from_json(doc) == snap


def test_once_fits_80_columns_with_containers() -> None:
    long_pod = dataclasses.replace(
        POD, pod=PodInfo(UID, "trainer-with-a-very-long-name-0", "research")
    )
    snap = _snapshot(
        dataclasses.replace(_proc(3, container=long_pod), user="averylonguser"),
        _proc(4, host_pid=4),
    )
    for width in (80, 100, 140):
        lines = once_report.render(snap, replay_source([snap]), None, width=width)
        assert max(map(len, lines)) <= width
        assert any("Container" in line for line in lines)


def test_ls_column() -> None:
    job = {
        "pid": 5,
        "command": ["python", "t.py"],
        "steps": 3,
        "recent_step_s": 0.1,
        "rank": None,
        "world_size": 1,
    }
    plain = "\n".join(ls_report.render([dict(job, container=None)], width=120))
    assert "CONTAINER" not in plain
    placed = "\n".join(
        ls_report.render([dict(job, container=to_json(POD)), {"pid": 6, "error": "x"}], width=120)
    )
    assert "CONTAINER" in placed and "ml/trainer-0" in placed


def test_exporter_process_labels() -> None:
    snap = _snapshot(_proc(3, container=POD), _proc(4))
    families = parse(collector_with([snap], processes=True).render())
    by_pid = {
        s.labels["pid"]: s.labels for s in samples(families, "gputui_process_gpu_memory_bytes")
    }
    assert (by_pid["3"]["pod"], by_pid["3"]["namespace"], by_pid["3"]["container"]) == (
        "trainer-0",
        "ml",
        "train",
    )
    assert "pod" not in by_pid["4"] and "host_pid" not in by_pid["4"]
    # gputui in a container: a host pid and a pid of its own namespace with the same number
    pair = _snapshot(_proc(42, host_pid=9000), _proc(42, host_pid=42))
    families = parse(collector_with([pair], processes=True).render())
    mem = [s.labels for s in samples(families, "gputui_process_gpu_memory_bytes")]
    assert sorted(lab["host_pid"] for lab in mem if lab["pid"] == "42") == ["42", "9000"]
    # per-process values stay per process: two processes of one pod keep their own
    twin = dataclasses.replace(_proc(5, container=POD), gpu_mem_bytes=7 << 30)
    families = parse(
        collector_with([_snapshot(_proc(3, container=POD), twin)], processes=True).render()
    )
    mem = {s.labels["pid"]: s.value for s in samples(families, "gputui_process_gpu_memory_bytes")}
    assert mem["3"] == 1 << 30 and mem["5"] == 7 << 30


def test_exporter_training_labels() -> None:
    client = FakeClient(7, FakeHello(pid=7, rank=0))
    watcher = JobWatcher(
        "n1",
        connect=lambda pid, t: client,
        list_jobs=lambda: {7: "/x"},
        container_of=lambda pid: POD,
    )
    watcher.scan()
    (job,) = watcher.snapshot()
    watcher.stop()
    assert job.container == POD
    families = train_families([job], "n1", cmdline=False)
    for family in families:
        for sample in family.samples:
            lab = sample[1].as_dict()
            assert (lab["pod"], lab["namespace"], lab["container"]) == ("trainer-0", "ml", "train")
    bare = train_families([dataclasses.replace(job, container=None)], "n1", cmdline=False)
    assert all("pod" not in s[1].as_dict() for f in bare for s in f.samples)
