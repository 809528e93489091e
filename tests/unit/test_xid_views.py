"""A GPU's Xid errors in every view: the monitor's GPU panel, ``--once``, the
device finding (the catalogue's meaning and action), the exporter's counters
and dcgm-exporter's last Xid, and the cluster views."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from gputui.analysis import monitor_findings
from gputui.analysis.xid import CATALOGUE, RECENT_S, meaning_of
from gputui.cluster.ssh import HostView
from gputui.cluster.ssh_view import node_of
from gputui.cluster.view import build_nodes
from gputui.reports import cluster as cluster_report
from gputui.reports import monitor as once_report
from gputui.session import xid_text
from gputui.snapshot.model import DeviceSnapshot, Snapshot, XidCount, XidEvent
from gputui.tui.cluster.rows import gpu_rows, node_rows
from gputui.tui.widgets.devices import compact_line, full_block
from tests.helpers.synthetic import make_snapshots, replay_source
from tests.unit.test_exporter import collector_with, parse, samples

NOW = 1_760_000_000.0
HOSTILE = "x\x1b[2J\nname"
FELL = XidEvent(79, NOW - 60, None, None, "GPU has fallen off the bus.", "kernel log")
FAULT = XidEvent(13, NOW - 120, 4242, HOSTILE, "Graphics SM Warp Exception\x07", "nvml+kernel log")


def _device(*events: XidEvent, sources: tuple[str, ...] | None = ("nvml",), **kw: Any) -> Any:
    base = make_snapshots(n_gpus=1, n_procs=1, n_steps=1)[0].devices[0]
    counts: dict[int, int] = {}
    for e in events:
        counts[e.xid] = counts.get(e.xid, 0) + 1
    return dataclasses.replace(
        base,
        xid_errors=events,
        xid_counts=tuple(XidCount(c, n) for c, n in sorted(counts.items())),
        xid_sources=sources,
        **kw,
    )


def _snapshot(*devices: DeviceSnapshot) -> Snapshot:
    snap = make_snapshots(n_gpus=1, n_procs=1, n_steps=1)[0]
    return dataclasses.replace(snap, timestamp_s=NOW, devices=devices)


def test_the_catalogue_says_whose_problem_it_is() -> None:
    for code in (79, 48, 95):
        assert meaning_of(code).severity == "crit" and meaning_of(code).cause == "hardware"
    for code in (13, 31, 43):
        assert meaning_of(code).cause == "job" and "a job's fault" in meaning_of(code).action
    assert meaning_of(94).severity == "warn" and "contained" in meaning_of(94).meaning
    unknown = meaning_of(4000)
    assert unknown.severity == "warn" and "docs.nvidia.com" in unknown.action
    assert all(m.code == code for code, m in CATALOGUE.items())


def test_the_panel_flags_the_worst_and_says_it() -> None:
    device = _device(FELL, FAULT)
    assert xid_text.flag(device) == ("Xid 79", "crit")  # the hardware fault, not the newest
    head, *_rest, line4 = full_block(device, 160, ascii_only=False)
    assert "⚠ Xid 79" in head.plain
    assert "Xid 79 (fell off the bus)" in line4.plain and "2 Xid errors" in line4.plain
    only_fault = full_block(_device(FAULT), 160, ascii_only=True)
    assert "! Xid 13" in only_fault[0].plain
    said = only_fault[-1].plain
    assert "pid 4242" in said and "\x1b" not in said and "\n" not in said
    assert "Xid" in compact_line(device, 100, ascii_only=False).plain
    lost = full_block(_device(FELL, lost=True), 160, ascii_only=False)
    assert "LOST" in lost[0].plain and "fell off the bus" in lost[0].plain
    # neither source readable: said, dim; not known (a recording): nothing
    assert "not watched" in full_block(_device(sources=()), 160, False)[-1].plain
    assert "Xid" not in full_block(_device(sources=None), 160, False)[-1].plain
    assert "Xid" not in full_block(_device(), 160, False)[-1].plain


def test_once_says_the_xids_and_when_they_are_not_watched() -> None:
    snap = _snapshot(_device(FELL, FAULT))
    text = "\n".join(once_report.render(snap, replay_source([snap]), None, width=100))
    assert "Xid 79 (fell off the bus)" in text
    assert "Xid 79: fell off the bus" in text  # the finding's title
    assert "\x1b" not in text and "\x07" not in text
    lost = _snapshot(_device(FELL, lost=True))
    text = "\n".join(once_report.render(lost, replay_source([lost]), None, width=100))
    assert "GPU 0" in text and "Xid 79 (fell off the bus)" in text
    blind = _snapshot(_device(sources=()))
    text = "\n".join(once_report.render(blind, replay_source([blind]), None, width=100))
    assert xid_text.NOT_WATCHED in text.replace("\n       ", " ")
    for width in (40, 60, 80):
        # the Xid lines fit (the device table's own width is another matter)
        lines = once_report.render(snap, replay_source([snap]), None, width=width)
        said = [line for line in lines if "Xid" in line or "fell off" in line]
        assert said and max(map(len, said)) <= width


def test_the_finding_has_the_meaning_and_the_action() -> None:
    found = [
        f
        for f in monitor_findings.findings(_snapshot(_device(FELL, FAULT)))
        if f.rule == "device.xid"
    ]
    by_title = {f.title: f for f in found}
    fell = by_title["Xid 79: fell off the bus"]
    assert fell.severity == "crit" and fell.gpu_index == 0
    assert "stopped answering on PCIe" in fell.evidence and "reset" in fell.fix
    fault = by_title["Xid 13: job's kernel faulted"]
    assert fault.severity == "warn" and "a job's fault" in fault.fix
    assert "pid 4242" in fault.evidence and "\x1b" not in fault.evidence
    # another user's process: its pid alone
    theirs = dataclasses.replace(FAULT, process_name=None, detail=None)
    (only,) = [
        f for f in monitor_findings.findings(_snapshot(_device(theirs))) if f.rule == "device.xid"
    ]
    assert "pid 4242" in only.evidence and "Warp" not in only.evidence
    # a day-old error (the kernel log's since boot) is information
    old = dataclasses.replace(FELL, time_s=NOW - RECENT_S - 60)
    (history,) = [
        f for f in monitor_findings.findings(_snapshot(_device(old))) if f.rule == "device.xid"
    ]
    assert history.severity == "info"
    # counted errors whose events were not kept still say how many
    many = dataclasses.replace(_device(FELL), xid_counts=(XidCount(79, 12),))
    (counted,) = [f for f in monitor_findings.findings(_snapshot(many)) if f.rule == "device.xid"]
    assert "12 times" in counted.evidence


def test_exporter_counts_by_code_and_serves_the_last_xid() -> None:
    devices = (
        _device(FELL, FAULT, FAULT),
        dataclasses.replace(_device(sources=()), index=1, uuid="GPU-1"),
        dataclasses.replace(_device(sources=None), index=2, uuid="GPU-2"),
    )
    families = parse(collector_with([_snapshot(*devices)]).render())
    counts = {
        (s.labels["gpu"], s.labels["xid"]): s.value for s in samples(families, "gputui_xid_errors")
    }
    assert counts[("0", "79")] == 1 and counts[("0", "13")] == 2
    # every catalogue code from 0 on a watched GPU: increase() sees a first error
    assert counts[("0", "48")] == 0 and len([k for k in counts if k[0] == "0"]) == len(CATALOGUE)
    assert not any(k[0] in ("1", "2") for k in counts)  # not watched, not known
    last = {s.labels["gpu"]: s.value for s in samples(families, "DCGM_FI_DEV_XID_ERRORS")}
    assert last == {"0": 13}  # the newest
    assert samples(families, "DCGM_FI_DEV_XID_ERRORS")[0].labels["UUID"]
    # a lost GPU still has them
    lost = parse(collector_with([_snapshot(_device(FELL, lost=True))]).render())
    assert {s.value for s in samples(lost, "DCGM_FI_DEV_XID_ERRORS")} == {79}


def _view(snapshot: Snapshot) -> HostView:
    return HostView(
        host="n1", state="up", reason=None, mode="gputui", answered=True, snapshot=snapshot
    )


def test_cluster_views_show_the_xids() -> None:
    node = node_of(_view(_snapshot(_device(FAULT, FELL))))
    (gpu,) = node.gpus
    assert (gpu.xid_last, gpu.xid_count, node.xid_gpus) == (79.0, 2.0, 1)
    text = "\n".join(cluster_report.node_lines(node, 100))
    assert "XID" in text and " 79" in text
    table = "\n".join(cluster_report.node_table((node,), 100))
    assert "Xid errors: n1 (1 GPU)" in table
    (row,) = gpu_rows(node.gpus, ascii_only=False)
    assert "Xid 79" in row[1][1].plain
    (nrow,) = node_rows((node,), ascii_only=False)
    assert "1 GPU with Xid errors" in nrow[1][-1].plain
    quiet = node_of(_view(_snapshot(_device())))
    assert (quiet.gpus[0].xid_last, quiet.xid_gpus) == (0.0, 0)
    assert "XID" not in "\n".join(cluster_report.node_lines(quiet, 100))
    unknown = node_of(_view(_snapshot(_device(sources=None))))
    assert unknown.gpus[0].xid_last is None
    # the Prometheus path: per-node counts from the GPUs
    (built,) = build_nodes(node.gpus, {}, {})
    assert built.xid_gpus == 1


@pytest.mark.parametrize("width", [40, 60, 80])
def test_cluster_lines_fit(width: int) -> None:
    node = node_of(_view(_snapshot(_device(FAULT, FELL))))
    # the Xid lines fit (the tables' own widths are another matter)
    lines = cluster_report.node_table((node,), width)
    said = [line for line in lines if "Xid" in line or line.startswith("  ")]
    assert said and max(map(len, said)) <= width


def test_a_node_that_is_down_has_no_memory_figures() -> None:
    """A node that did not answer: its memory cell says N/A once (it said
    N/A/N/A); a node that answered shows used/total."""
    down = node_of(
        HostView(host="n2", state="down", reason="ssh: refused", mode=None, answered=False)
    )
    row = next(line for line in cluster_report.node_table((down,), 100) if line.startswith("n2"))
    assert row.split()[-1] == "N/A" and "N/A/N/A" not in row
    up = node_of(_view(_snapshot(_device(FAULT, FELL))))
    row = next(line for line in cluster_report.node_table((up,), 100) if line.startswith("n1"))
    assert "/" in row.split()[-1] and "N/A" not in row.split()[-1]
