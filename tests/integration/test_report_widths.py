"""Every printed report fits the output's width, in whole words and with units.

Each report is rendered as its command prints it, with ``COLUMNS`` at 40, 60,
80 and 200 (and piped without ``COLUMNS``: 80), from the real recordings and
traces in tests/: no line is wider than the width (in terminal cells: a wide
character is two), no line ends in a space, nothing is cut with "…" (long
kernel and op names are elided in the middle with an ASCII marker instead), two
different kernels never print the same, and every finding's title, evidence,
fix and follow-up is printed whole.  At 40 and 60 columns, tables leave columns
out (and say which) or print each row as its own lines, as ``ps`` and nvitop
do.  Every printed command, help texts included, is run at 40, 60 and 80.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rich.cells import cell_len

from gputui import cli
from gputui.reports import findings as findings_text
from gputui.reports import text

TESTS = Path(__file__).resolve().parents[1]
H100 = sorted(p for p in (TESTS / "data" / "h100").glob("*.jsonl.gz") if "monitor" not in p.name)
TRACES = [
    *sorted((TESTS / "data" / "traces").glob("*.gz")),
    *sorted((TESTS / "data").glob("h100_*.gz")),
]
RANKS = TESTS / "samples" / "attach-ranks-v2.jsonl.gz"
WIDTHS = (40, 60, 80, 200)

Run = Callable[..., str]


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Run:
    """``gputui ARGS`` in this process at a width (None: piped, no COLUMNS)."""

    def go(*args: str, width: int | None) -> str:
        if width is None:
            monkeypatch.delenv("COLUMNS", raising=False)
        else:
            monkeypatch.setenv("COLUMNS", str(width))
        capsys.readouterr()
        assert cli.main(list(args)) == 0
        return capsys.readouterr().out

    return go


def check_fits(out: str, width: int) -> None:
    lines = out.splitlines()
    assert lines, "nothing printed"
    long = [line for line in lines if cell_len(line) > width]
    assert not long, f"{len(long)} lines over {width}: {long[:3]}"
    assert not [line for line in lines if line != line.rstrip()], "trailing spaces"
    assert "…" not in out, [line for line in lines if "…" in line][:3]


def squeeze(value: str) -> str:
    return "".join(value.split())


def check_findings_whole(out: str, findings: list[dict[str, Any]]) -> None:
    """Each finding's fields are in the text whole (wrapping changes only spaces)."""
    flat = squeeze(out)
    for f in findings:
        for key in ("title", "evidence", "fix", "confirm"):
            if f[key]:
                assert squeeze(findings_text.printed(f[key])) in flat, (f["rule"], key)


def kernel_cells(out: str, header: str) -> list[list[str]]:
    """The name cells of each table whose header line ends with ``header``."""
    tables: list[list[str]] = []
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if not line.rstrip().endswith(f"  {header}"):
            continue
        start = line.rindex(header)
        cells = []
        for row in lines[i + 1 :]:
            if not row.startswith("  ") or len(row) <= start or row[start - 2 : start] != "  ":
                break
            cells.append(row[start:])
        tables.append(cells)
    return tables


@pytest.mark.parametrize("width", WIDTHS)
def test_monitor_once(run: Run, width: int) -> None:
    for args in (["--demo", "--once"], ["--replay", str(H100_MONITOR), "--once"]):
        check_fits(run(*args, width=width), width)
    check_fits(
        run("--replay", str(TESTS / "samples" / "monitor-v1.jsonl.gz"), "--once", width=width),
        width,
    )


H100_MONITOR = TESTS / "data" / "h100" / "monitor-scenarios.jsonl.gz"


@pytest.mark.parametrize("width", WIDTHS)
def test_attach_once_of_every_recording(run: Run, width: int) -> None:
    for path in [None, *H100]:
        source = ["--demo"] if path is None else ["--replay", str(path)]
        out = run("attach", *source, "--once", width=width)
        check_fits(out, width)
        doc = json.loads(run("attach", *source, "--once", "--json", width=width))
        check_findings_whole(out, doc["findings"])
        for cells in kernel_cells(out, "kernel"):
            kernels = doc["capture"]["kernels"][: len(cells)]
            assert len(cells) == len(kernels), "one line per kernel"
            assert len(set(cells)) == len(cells), cells
            shown = text.elide_all([k["name"] for k in kernels], 1 << 30, short=text.kernel_name)
            for cell, k in zip(cells, kernels, strict=True):
                name = shown[k["name"]]
                # the short name, elided in the middle only where it does not fit
                assert cell == name or (text.MARKER in cell and len(cell) < len(name))


@pytest.mark.parametrize("width", WIDTHS)
def test_ranks_once(run: Run, width: int) -> None:
    out = run("attach", "--replay", str(RANKS), "--once", width=width)
    check_fits(out, width)
    doc = json.loads(run("attach", "--replay", str(RANKS), "--once", "--json", width=width))
    check_findings_whole(out, doc["job"]["findings"])


@pytest.mark.parametrize("width", WIDTHS)
def test_analyze_every_trace(run: Run, width: int) -> None:
    paths = [str(p) for p in TRACES]
    out = run("analyze", *paths, "--top", "30", width=width)  # the JSON's rows too
    check_fits(out, width)
    doc = json.loads(run("analyze", *paths, "--json", width=width))
    for rank in doc["ranks"]:
        check_findings_whole(out, rank["findings"])
    for cells in kernel_cells(out, "KERNEL"):
        assert len(set(cells)) == len(cells), cells


def test_piped_reports_are_80_columns(run: Run) -> None:
    for args in (
        ["analyze", str(TRACES[0])],
        ["--demo", "--once"],
        ["attach", "--demo", "--once"],
        ["attach", "--replay", str(RANKS), "--once"],
    ):
        out = run(*args, width=None)
        check_fits(out, 80)
        assert max(len(line) for line in out.splitlines()) > 70, args  # laid out for 80


@pytest.mark.parametrize("width", WIDTHS)
def test_bench_table(run: Run, width: int, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from gputui.commands import bench
    from tests.unit.test_bench_cli import _doc

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(bench, "measure", lambda args: _doc())
    check_fits(run("bench", "--no-cache", width=width), width)


def cluster_snapshot() -> Any:
    from gputui.cluster.view import (
        ClusterSnapshot,
        build_gpus,
        build_jobs,
        build_nodes,
        pick_gpu_values,
    )

    hosts = ["node-a", "gpu-node-with-a-rather-long-hostname-017.cluster.example.org"]
    labels = [
        {"hostname": h, "gpu": str(g), "UUID": f"GPU-{h}-{g}", "modelName": "NVIDIA H100"}
        for h in hosts
        for g in range(8)
    ]
    gpus = build_gpus(
        {
            "util_ratio": pick_gpu_values([(lab, 0.93) for lab in labels]),
            "power_w": pick_gpu_values([(lab, 612.0) for lab in labels]),
            "mem_used_bytes": pick_gpu_values([(lab, 61.5 * 2**30) for lab in labels]),
            "mem_total_bytes": pick_gpu_values([(lab, 79.6 * 2**30) for lab in labels]),
        }
    )

    def lab(host: str, r: str, **more: str) -> dict[str, str]:
        return {"hostname": host, "job_id": "llm-pretrain-7b", "rank": r, **more}

    info = [(lab(h, str(r), world_size="2"), 1.0) for r, h in enumerate(hosts)]
    steps = [(lab(h, str(r)), 2.0) for r, h in enumerate(hosts)]
    sums = [(lab(h, str(r)), 1.0) for r, h in enumerate(hosts)]
    phases = [
        (lab(h, str(r), phase=phase), share)
        for r, h in enumerate(hosts)
        for phase, share in (("data", 0.1 + 0.3 * r), ("forward", 0.3), ("backward", 0.4))
    ]
    jobs = build_jobs(info, steps, sums, phases, [], now_s=100.0)
    nodes = build_nodes(gpus, {}, {})
    return ClusterSnapshot(
        "http://prometheus.example:9090", "", 0.0, 0.012, tuple(nodes), tuple(jobs)
    )


@pytest.mark.parametrize("width", WIDTHS)
def test_cluster_once(run: Run, width: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from gputui.cluster.source import ClusterSource

    monkeypatch.setattr(ClusterSource, "fetch", lambda self, hosts=(): cluster_snapshot())
    out = run("cluster", "--prometheus", "http://prometheus.example:9090", "--once", width=width)
    check_fits(out, width)
    assert "gpu-node-with-a-rather-long-hostname-017.cluster.example.org" in out or width < 100
    assert "<- straggler" in out


@pytest.mark.parametrize("width", WIDTHS)
def test_ls(run: Run, width: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from gputui.commands import ls

    argv = ["python", "train.py", "--data", "/datasets/imagenet/train/shards/part-0001-of-1024"]
    jobs = [
        {
            "pid": 4242,
            "command": [*argv, "--epochs", "90"],
            "steps": 1,
            "recent_step_s": 0.0534,
            "rank": None,
            "world_size": None,
        },
        {"pid": 99, "error": "the hook did not answer within 2 s"},
        {
            "pid": 2001,
            "launcher_pid": 2000,
            "command": ["torchrun", "--nproc-per-node", "8", *argv],
            "steps": 10,
            "recent_step_s": 0.2,
            "rank": 0,
            "world_size": 16,
            "missing_ranks": 8,
            "ranks": [{"pid": 2001 + i, "rank": i} for i in range(8)],
        },
    ]
    monkeypatch.setattr(ls, "collect", lambda: jobs)
    out = run("ls", width=width)
    check_fits(out, width)
    assert squeeze(" ".join(argv)) in squeeze(out)  # the command whole
    assert "2001,2002,2003,2004,2005,2006,2007,2008" in squeeze(out)


@pytest.mark.parametrize("width", WIDTHS)
def test_memory_snapshot_report(width: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from gputui.reports import memory
    from gputui.session.oneshot import memsnap_findings
    from tests.helpers import memsnap as h

    monkeypatch.setenv("COLUMNS", str(width))
    result = h.result(h.planted_leak())
    found = memsnap_findings(result)
    out = "\n".join(memory.render(result, found))
    check_fits(out, width)
    check_findings_whole(out, [f.to_json() for f in found])


NCCL = TESTS / "data" / "h100x2-nccl"
#: every command that prints, as a user types it: its output (and what it says
#: on stderr) fits 40, 60 and 80 columns, counted in terminal cells
PRINTED: dict[str, list[str]] = {
    "monitor": ["--demo", "--once"],
    "monitor-ddp": ["--demo", "ddp", "--once"],
    "monitor-replay": ["--replay", str(H100_MONITOR), "--once"],
    "attach": ["attach", "--demo", "--once"],
    "attach-ddp": ["attach", "--demo", "ddp", "--once"],
    "attach-cpu": ["attach", "--replay", str(TESTS / "data" / "cpu_python.jsonl.gz"), "--once"],
    "attach-flops": [
        "attach",
        "--replay",
        str(TESTS / "data" / "h100" / "transformer_flops.jsonl.gz"),
        "--once",
    ],
    "analyze": ["analyze", str(TESTS / "data" / "traces" / "dataloader.pt.trace.json.gz")],
    "analyze-flops": [
        "analyze",
        str(TESTS / "data" / "h100_healthy_flops_step11.pt.trace.json.gz"),
    ],
    "analyze-ranks": [
        "analyze",
        str(NCCL / "bigslow-rank0.pt.trace.json.gz"),
        str(NCCL / "bigslow-rank1.pt.trace.json.gz"),
    ],
    "ls": ["ls"],
    "help": ["--help"],
    **{f"help-{name}": [name, "--help"] for name in cli.SUBCOMMANDS},
}


@pytest.mark.parametrize("width", (40, 60, 80))
@pytest.mark.parametrize("args", list(PRINTED.values()), ids=list(PRINTED))
def test_every_printed_command_fits_the_width(
    args: list[str],
    width: int,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    capsys.readouterr()
    try:
        code = cli.main(list(args))
    except SystemExit as exc:  # --help
        code = exc.code
    assert code in (0, None), args
    captured = capsys.readouterr()
    printed = captured.out + captured.err
    assert printed.strip(), "nothing printed"
    long = [line for line in printed.splitlines() if cell_len(line) > width]
    assert not long, f"{len(long)} lines over {width} cells: {long[:3]}"
    assert not [line for line in printed.splitlines() if line != line.rstrip()], "trailing spaces"


@pytest.mark.parametrize("width", (40, 60, 80))
def test_a_node_read_over_ssh_fits_the_width(width: int) -> None:
    import dataclasses

    from gputui.reports.cluster import node_lines
    from tests.unit.test_cluster_containers import _node

    node = dataclasses.replace(
        _node(True),
        hostname="gpu-node-with-a-rather-long-hostname-017.cluster.example.org",
        gpus=cluster_snapshot().nodes[1].gpus,
        note="nvidia-smi only: gputui is not installed on this node (exit status 127)",
    )
    check_fits("\n".join(node_lines(node, width)), width)


#: every other trace in tests/data (the cases of H100 and H200 jobs, the NCCL
#: ranks), in one command: what it says on stderr of files that are not ranks of
#: one job fits as well
OTHER_TRACES = sorted(
    set((TESTS / "data").rglob("*.pt.trace.json.gz")) - {p.resolve() for p in TRACES}
)


@pytest.mark.parametrize("width", (40, 60, 80))
def test_analyze_every_other_trace_in_tests_data(
    width: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert len(OTHER_TRACES) >= 30
    monkeypatch.setenv("COLUMNS", str(width))
    capsys.readouterr()
    assert cli.main(["analyze", *map(str, OTHER_TRACES)]) == 0
    captured = capsys.readouterr()
    assert "warning" in captured.err  # traces of several jobs: said on stderr
    for printed in (captured.out, captured.err):
        # (a rule's text may name a family of kernels with "…": only the width)
        long = [line for line in printed.splitlines() if cell_len(line) > width]
        assert not long, f"{len(long)} lines over {width}: {long[:3]}"
        assert not [line for line in printed.splitlines() if line != line.rstrip()]


@pytest.mark.parametrize("width", (40, 60, 80))
def test_records_messages_fit_the_width(
    width: int,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gputui.commands import record
    from gputui.recording.io import embedded_bytes

    monkeypatch.setenv("COLUMNS", str(width))
    data = embedded_bytes("demo.jsonl.gz")
    source = tmp_path / "the-demo-recording-cut-off-while-it-was-written.jsonl.gz"
    source.write_bytes(data[: len(data) // 3])
    folder = tmp_path / "a-folder-with-a-rather-long-name-for-recordings"
    folder.mkdir()
    out = folder / "the-demo-recording-re-recorded-from-what-it-holds.jsonl.gz"
    capsys.readouterr()
    assert cli.main(["record", "-o", str(out), "--replay", str(source)]) == 0
    err = capsys.readouterr().err
    assert "recorded" in err and "ends early" in err
    check_fits(err, width)
    # on a terminal: the progress redrawn in place stays within one line of it
    monkeypatch.setattr(record, "_on_terminal", lambda: True)
    monkeypatch.setattr(record, "PROGRESS_EVERY_S", 0.0)
    out.unlink()
    assert cli.main(["record", "-o", str(out), "--demo"]) == 0
    err = capsys.readouterr().err
    redrawn = [part for line in err.split("\n") for part in line.split("\r") if part]
    assert len(redrawn) > 2 and all("recorded" in part for part in redrawn[:-1])
    long = [part for part in redrawn if cell_len(part) >= width]
    assert not long, long[:3]
