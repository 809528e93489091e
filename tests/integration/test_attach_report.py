"""``attach --once`` and the multi-rank ``--once`` as printed, from recordings: the
kernel table, the rank table at 80 columns, where a recorded trace lives, and
``--ascii``."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from gputui import cli
from gputui.analysis.finding import Finding
from gputui.reports import findings as findings_text
from gputui.reports import text

TESTS = Path(__file__).resolve().parents[1]
RANKS = TESTS / "samples" / "attach-ranks-v2.jsonl.gz"
ANALYSIS = TESTS.parent / "gputui" / "analysis"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    capsys.readouterr()
    assert cli.main(list(args)) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("width", [80, 200])
def test_kernel_table_is_one_line_per_kernel_named_as_analyze_names_them(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    """Demangled names wrapped over lines ("void" alone on one) at 80 columns and
    were cut at 70 characters at 200, so rows read the same; now every row is
    one line with the short name analyze shows, elided in the middle to fit."""
    monkeypatch.setenv("COLUMNS", str(width))
    out = run(capsys, "attach", "--demo", "--once")
    kernels = json.loads(run(capsys, "attach", "--demo", "--once", "--json"))["capture"]["kernels"]
    lines = out.splitlines()
    head = lines.index(next(line for line in lines if line.endswith("  kernel")))
    start = lines[head].rindex("kernel")
    rows = lines[head + 1 : head + 1 + 15]
    assert len(rows) == min(15, len(kernels))
    assert all(row.startswith("  ") and len(row) <= width for row in rows)
    assert "void" not in out and "…" not in out
    names = [row[start:] for row in rows]
    assert len(set(names)) == len(names)
    shown = kernels[: len(rows)]
    shorts = text.elide_all((k["name"] for k in shown), 1 << 30, short=text.kernel_name)
    for name, k in zip(names, shown, strict=True):
        full = shorts[k["name"]]
        if width == 200:
            assert name == full  # whole at 200 columns
        else:
            assert name == full or (text.MARKER in name and name[:8] == full[:8])


def test_rank_table_at_80_columns_keeps_headers_states_and_units(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    out = run(capsys, "attach", "--replay", str(RANKS), "--once")
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines) and "…" not in out
    header = next(line for line in lines if line.startswith("rank "))
    assert header.split() == [
        "rank", "pid", "state", "step", "behind", "p50", "p90", "comm", "comm%", "compute",
    ]  # fmt: skip
    row0 = lines[lines.index(header) + 1].split()
    assert row0 == [
        "0",
        "14400",
        "running",
        "781",
        "1",
        "27.0ms",
        "33.2ms",
        "23.6ms",
        "84%",
        "4.53ms",
    ]
    flat = " ".join(out.split())
    assert "comm%: its share of the step" in flat  # the % column says of what


def test_a_recordings_trace_is_said_to_be_on_the_recording_machine(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = " ".join(run(capsys, "attach", "--demo", "--once").split())
    assert "trace, on the machine that recorded this session: /root/.cache/gputui/traces/" in out
    assert "ui.perfetto.dev)" not in out.split("trace, on the machine")[1].split("findings")[0]
    ranks = " ".join(run(capsys, "attach", "--replay", str(RANKS), "--once").split())
    assert ranks.count("trace, on the machine that recorded this session:") == 2


@pytest.mark.parametrize("width", ["80", "200"])
def test_ascii_reports_are_ascii(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, width: str
) -> None:
    monkeypatch.setenv("COLUMNS", width)
    for args in (
        ["--demo", "--once", "--ascii"],
        ["attach", "--demo", "--once", "--ascii"],
        ["attach", "--replay", str(TESTS / "data" / "h100" / "transformer_flops.jsonl.gz"),
         "--once", "--ascii"],
        ["attach", "--replay", str(RANKS), "--once", "--ascii"],
        ["--ascii", "attach", "--replay", str(RANKS), "--once"],
    ):  # fmt: skip
        out = run(capsys, *args)
        assert out.isascii(), (args, [line for line in out.splitlines() if not line.isascii()])


def test_cluster_once_ascii_is_ascii(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from gputui.cluster.source import ClusterSource
    from tests.integration.test_report_widths import cluster_snapshot

    snapshot = cluster_snapshot()
    snapshot = type(snapshot)(**{**snapshot.__dict__, "url": "http://prométhée:9090"})
    monkeypatch.setattr(ClusterSource, "fetch", lambda self, hosts=(): snapshot)
    out = run(capsys, "cluster", "--prometheus", "http://p:9090", "--once", "--ascii")
    assert out.isascii() and "http://prom?th?e:9090" in out


# -- advice said the way the printed report's reader can follow it ----------------------------
def _strings(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.append(node.value)
        elif isinstance(node, ast.JoinedStr):
            found.append("".join(v.value for v in node.values if isinstance(v, ast.Constant)))
    return found


SCREEN_KEY = ("(p)", "press p", "(m on", "(p on", "(l)", "screen: l")


def test_no_screen_key_in_printed_advice() -> None:
    """Every piece of advice in the rules that names a key of a screen prints,
    in a report, as the command line that does the same."""
    keyed = [
        s for p in ANALYSIS.rglob("*.py") for s in _strings(p) if any(k in s for k in SCREEN_KEY)
    ]
    assert keyed  # the rules do name keys: the screens show the same advice
    for said in keyed:
        printed = findings_text.printed(said)
        assert not any(k in printed for k in SCREEN_KEY), said
        assert "gputui attach PID" in printed


def test_a_printed_finding_says_capture_on_the_command_line() -> None:
    f = Finding(
        "steps.coarse_phases",
        "info",
        "job",
        "phase times are coarse (compiled code)",
        "torch.compile runs code the hook cannot see into",
        "use a capture (p) for the GPU-side breakdown; phases of eager code stay exact",
    )
    out = " ".join(" ".join(findings_text.text_block(f, 80)).split())
    assert "(p)" not in out
    assert "use a capture (gputui attach PID --once --capture N) for the GPU-side" in out
