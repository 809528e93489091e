"""The cluster view's process tables name each process's container or pod
(``cluster --ssh``: the snapshot a node serves carries them), cleaned."""

from __future__ import annotations

import dataclasses

from gputui.cluster.view import Node
from gputui.reports.cluster import node_lines
from gputui.snapshot.model import ContainerInfo, PodInfo
from gputui.tui.cluster.rows import PROCESS_COLUMNS, process_rows
from tests.helpers.synthetic import make_snapshots

POD = ContainerInfo(
    "cri-o", "c" * 64, name="train", pod=PodInfo("7d44-bb13", "trainer-0", "ml", "burstable")
)
HOSTILE = ContainerInfo("docker", "d" * 64, name="x\x1b[31mred\x07")


def _node(container: bool) -> Node:
    procs = list(make_snapshots(n_gpus=1, n_procs=3, n_steps=1)[0].processes)
    if container:
        procs[0] = dataclasses.replace(procs[0], container=POD)
        procs[1] = dataclasses.replace(procs[1], container=HOSTILE)
    return Node(
        "n01",
        None,
        True,
        "ssh",
        (),
        1,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        0,
        state="up",
        processes=tuple(procs),
    )


def test_the_text_report_has_a_container_column_while_one_is_in_a_container() -> None:
    text = "\n".join(node_lines(_node(True), 120))
    assert "CONTAINER" in text and "ml/trainer-0" in text
    assert "\x1b" not in text and "\x07" not in text
    assert "CONTAINER" not in "\n".join(node_lines(_node(False), 120))


def test_the_screen_rows_name_the_container() -> None:
    rows = process_rows(_node(True).processes)
    at = [name for name, _w in PROCESS_COLUMNS].index("container")
    shown = [str(cells[at]) for _key, cells in rows]
    assert "ml/trainer-0" in shown and "" in shown
    assert not any("\x1b" in s or "\x07" in s for s in shown)
