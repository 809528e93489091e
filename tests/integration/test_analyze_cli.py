"""``gputui analyze``: the report, its JSON, hostile names, bad files."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

from gputui.cli import main
from tests.helpers.tracegen import GEMM, TraceBuilder, reference_trace

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["analyze", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_text_report_of_a_real_trace(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, str(DATA / "dataloader.pt.trace.json.gz"))
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80  # piped: 80 columns
    assert lines[0].startswith("── rank 0")
    assert "NVIDIA H100 80GB HBM3" in lines[1]
    assert "3 steps (ProfilerStep#10–12)" in out
    flat = " ".join(out.split())
    assert "window of every section but HTA's: the 3 profiled steps, 274ms" in flat
    assert "HTA's window: ProfilerStep#10–11, the last step left out" in flat
    assert 'kernels ran 6.7% of the steps (the plugin\'s "GPU utilization": kernels only)' in flat
    dataloader = next(line for line in lines if line.strip().startswith("DataLoader"))
    assert "DataLoader, GPU idle" in dataloader and "72.9%" in dataloader
    assert "compute 6.7%   non-compute 0.1%   idle 93.2%" in out
    assert "host wait 99.3%" in out
    assert "no communication kernels" in out
    assert "Top GPU activities" in out and "GEMM" in out
    assert "cudaLaunchKernel" in out


def test_json_per_rank(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for rank in (1, 0):
        t = reference_trace()
        t.meta["distributedInfo"] = {"rank": rank, "world_size": 2}
        t.write(tmp_path / f"worker{1 - rank}.pt.trace.json.gz")
    code, out, _ = run(capsys, str(tmp_path), "--json")
    assert code == 0
    doc = json.loads(out)
    ranks = doc["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert [Path(r["path"]).name for r in ranks] == [
        "worker1.pt.trace.json.gz",
        "worker0.pt.trace.json.gz",
    ]
    r = ranks[0]
    assert r["rank_from"] == "distributedInfo" and r["world_size"] == 2
    assert r["temporal"]["idle_pct"] == 51.18 and r["temporal"]["compute_pct"] == 40.0
    assert r["temporal"]["non_compute_pct"] == 8.82
    assert r["idle_breakdown"]["host_wait_pct"] == 54.35
    assert r["idle_breakdown"]["kernel_wait_pct"] == 2.17
    assert r["idle_breakdown"]["other_pct"] == 43.48
    assert r["comm_compute_overlap_pct"] == 75.0
    assert r["launch"]["launches"] == 6
    assert r["step_breakdown"]["steps"] == 2 and r["step_breakdown"]["gpu_utilization_pct"] == 36.5
    gemm = next(k for k in r["kernels"] if k["class"] == "gemm")
    assert gemm["short_name"] == "ampere_sgemm_128x64_tn"
    # a tiny synthetic trace, half idle with 2-us kernels, whose host spends most of
    # each step outside torch ops: that, not launching, is what the step waits for
    rules = {f["rule"] for f in r["findings"]}
    assert "cpu.python" in rules and "launch.overhead" not in rules
    assert all(f["fix"] and f["source"] for f in r["findings"])
    assert r["steps"] == [1, 2, 3]


def test_files_without_rank_are_numbered_in_order(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    a = reference_trace().write(tmp_path / "b.json")
    b = reference_trace().write(tmp_path / "a.json")
    _, out, _ = run(capsys, str(a), str(b), "--json")
    ranks = json.loads(out)["ranks"]
    assert [(r["rank"], r["rank_from"], Path(r["path"]).name) for r in ranks] == [
        (0, "order", "b.json"),
        (1, "order", "a.json"),
    ]


def test_hostile_names_are_shown_escaped_and_kept_exact_in_json(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    evil = "\x1b]0;pwned\x07\x1b[2J\nkernel\u202e"
    t = TraceBuilder()
    t.step(1, 0.0, 100.0)
    t.op(evil + "op", 1.0, 50.0)
    t.launch(2.0, 5.0, evil, 10.0, 20.0)
    path = t.write(tmp_path / ("name\x1b[31m.json"))
    code, out, _ = run(capsys, str(path))
    assert code == 0
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "\\x1b" in out
    assert all(len(line) <= 100 for line in out.splitlines())
    _, out, _ = run(capsys, str(path), "--json")
    rank = json.loads(out)["ranks"][0]
    assert rank["kernels"][0]["name"] == evil
    assert any(o["name"] == evil + "op" for o in rank["cpu_ops"])


def test_cpu_only_trace(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    t = TraceBuilder()
    t.step(1, 0.0, 100.0)
    t.op("aten::mm", 10.0, 50.0)
    code, out, _ = run(capsys, str(t.write(tmp_path / "cpu.json")))
    assert code == 0
    assert "no GPU activity in the trace" in out
    assert "CPU op" in out


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"traceEvents": [{"ph": "X"', "truncated"),
        (b"<html>", "not a JSON trace"),
    ],
)
def test_bad_file_is_one_line_and_status_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "bad.pt.trace.json"
    path.write_bytes(content)
    code, out, err = run(capsys, str(path))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err and "bad.pt.trace.json" in err


@pytest.mark.parametrize(
    ("sample", "command"),
    [
        ("attach-v1.jsonl.gz", "gputui attach --replay FILE --once"),
        ("monitor-v1.jsonl.gz", "gputui --replay FILE"),
        ("attach-ranks-v2.jsonl.gz", "gputui attach --replay FILE --once"),
    ],
)
def test_a_gputui_recording_is_pointed_at_what_reads_it(
    capsys: pytest.CaptureFixture[str], sample: str, command: str
) -> None:
    """A recording given to ``analyze`` is named, with the command that reads it
    (a ranks recording is an attach recording too); other JSON without
    ``traceEvents`` keeps the words of before."""
    path = Path(__file__).parents[1] / "samples" / sample
    code, out, err = run(capsys, str(path))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and command in err and sample in err


def test_the_recordings_named_are_gputuis_own() -> None:
    """The reader names a recording by the header type its writers use."""
    from gputui.recording.attach import ATTACH_RECORDING_TYPE
    from gputui.recording.writer import RECORDING_TYPE
    from gputui.tracefile.json_stream import _RECORDINGS

    assert set(_RECORDINGS) == {ATTACH_RECORDING_TYPE, RECORDING_TYPE}


def test_json_without_trace_events_is_not_a_trace(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "other.json"
    path.write_text('{"type": "something-else", "rows": []}')
    code, _, err = run(capsys, str(path))
    assert code == 2 and "no traceEvents: not a Chrome trace" in err


def test_bad_arguments(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, str(tmp_path / "missing"))
    assert code == 2 and "no such file or directory" in err
    code, _, err = run(capsys, str(DATA), "--top", "0")
    assert code == 2 and "--top" in err


def test_copies_keep_their_kind(capsys: pytest.CaptureFixture[str]) -> None:
    """A pageable copy says so in the table: its name is not shortened."""
    _, out, _ = run(capsys, str(DATA / "hook-pageable_copy.pt.trace.json.gz"), "--top", "3")
    assert "memcpy  Memcpy HtoD (Pageable -> Device)" in out


PLANTED = {
    "dataloader": "data.loader_wait",
    "elementwise": "kernels.elementwise_bound",
    "fp32_matmul": "precision.fp32_matmul",
    "launch_bound": "launch.overhead",
    "pageable_copy": "copy.pageable",
    "hook-pageable_copy": "copy.pageable",
}
#: the host-sync job's traces (recorded with TF32 off, so FP32 GEMMs too): 14
#: synchronizations per step, but what they directly cost (the CPU's wait and
#: the gaps they leave the GPU: 14% and 17% of the step) is less than what
#: issuing its ops costs (kernel launch + torch dispatch 68% of the step, the
#: GPU idle while the host dispatches): launch-bound first, the syncs second
#: with their own cost, and the FP32 GEMMs held to the time the host waits for
#: the GPU (the syncs keep it from running ahead)
HOST_SYNC = ("host_sync", "hook-host_sync")


@pytest.mark.parametrize("name", HOST_SYNC)
def test_the_host_sync_traces_name_the_syncs_with_their_own_cost(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["analyze", str(DATA / f"{name}.pt.trace.json.gz"), "--json"]) == 0
    (rank,) = json.loads(capsys.readouterr().out)["ranks"]
    rules = [f["rule"] for f in rank["findings"]]
    assert rules[:2] == ["launch.overhead", "sync.host_sync"], rules
    sync = rank["findings"][1]
    assert sync["bucket"] == "sync" and 5 <= sync["impact_pct"] <= 20
    # the syncs serialize the step: a GPU-side fix recovers at most the host's wait
    fp32 = next(f for f in rank["findings"] if f["rule"] == "precision.fp32_matmul")
    assert fp32["impact_pct"] <= rank["account"]["sync_pct"] + rank["account"]["ahead_pct"] + 0.1


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_analyze_ranks_the_planted_cause_first(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The analyzer's own rules on H100 traces of the planted-bottleneck jobs
    (torch.profiler's and gputui's captures alike): the planted cause first."""
    assert main(["analyze", str(DATA / f"{name}.pt.trace.json.gz"), "--json"]) == 0
    (rank,) = json.loads(capsys.readouterr().out)["ranks"]
    top = rank["findings"][0]
    assert top["rule"] == PLANTED[name], [f["rule"] for f in rank["findings"]]
    assert top["severity"] in ("warn", "crit") and 10 <= top["impact_pct"] <= 100


FLOPS_TRACE = DATA.parent / "h100_healthy_flops_step11.pt.trace.json.gz"
#: every trace of a job run as it should be (a bf16 transformer, traced without
#: and with shapes and FLOPs).  The two-H100 DDP pair in h100x2-nccl/ named
#: "healthy" is the rank view's control without a straggler: its loader sleeps
#: 2 ms of every 6 ms step on purpose (bench/gpu_ranks_nccl.sh), which
#: data.loader_wait rightly names, so it is not a healthy job.
HEALTHY = sorted(
    p for p in DATA.parent.rglob("*healthy*.pt.trace.json*") if "h100x2-nccl" not in p.parts
)


def test_the_healthy_traces_are_here() -> None:
    assert DATA / "healthy.pt.trace.json.gz" in HEALTHY and FLOPS_TRACE in HEALTHY


@pytest.mark.parametrize("path", HEALTHY, ids=lambda p: p.name)
def test_analyze_finds_nothing_costly_in_a_healthy_trace(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["analyze", str(path), "--json"]) == 0
    (rank,) = json.loads(capsys.readouterr().out)["ranks"]
    assert [(f["rule"], f["severity"]) for f in rank["findings"] if f["severity"] != "info"] == []


def test_the_profilers_own_cost_is_not_reported_as_idle_gaps(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The healthy transformer traced with shapes and FLOPs does idle 41% of its one
    step in the trace (HTA: 40.8%, 93% of it host wait) -- with torch dispatch 64%
    of the step, which profiling with shapes inflates.  With launch and dispatch
    taken back to the job's own speed, its CPU side no longer outruns the GPU's
    busy time by enough to be a finding: no crit launch.idle_gaps any more."""
    assert main(["analyze", str(FLOPS_TRACE), "--json"]) == 0
    (rank,) = json.loads(capsys.readouterr().out)["ranks"]
    assert rank["temporal"]["idle_pct"] == pytest.approx(40.8, abs=0.1)
    assert rank["account"]["dispatch_pct"] > 60
    assert "launch.idle_gaps" not in [f["rule"] for f in rank["findings"]]


def test_roofline_of_a_trace_with_shapes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real H100 trace recorded with shapes: the top ops on the H100 datasheet's
    roof (no gputui bench results here), the same numbers in text and JSON."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # no measured ceilings
    code, out, _ = run(capsys, str(FLOPS_TRACE))
    assert code == 0
    assert "Roofline: the top ops against H100 SXM5 80GB datasheet" in out
    line = next(x for x in out.splitlines() if "aten::mm 8192x1024 · 1024x4096" in x)
    assert "bf16" in line and "compute" in line
    code, out, _ = run(capsys, "--json", str(FLOPS_TRACE))
    roof = json.loads(out)["ranks"][0]["roofline"]
    assert roof["roof"]["source"] == "datasheet" and roof["roof"]["bandwidth_gbps"] == 3350.0
    mm = next(o for o in roof["ops"] if o["shapes"] == "8192x1024 · 1024x4096")
    # achieved = FLOPs / GPU time of its kernels, and it is what the text shows
    assert mm["achieved_tflops"] == pytest.approx(mm["flops"] / mm["device_us"] / 1e6)
    assert f"{mm['achieved_tflops']:8.1f}" in line
    assert mm["bound"] == "compute" and 60 < mm["pct_of_ceiling"] < 90


def test_roofline_uses_the_measured_ceilings_of_a_gpu_of_that_name(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gputui.ceilings import cache
    from tests.unit.test_ceilings import UUID, _document

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cache.save(_document(), UUID)  # an H100 of the trace's name: 2,950 GB/s, bf16 780
    _, out, _ = run(capsys, "--json", str(FLOPS_TRACE))
    roof = json.loads(out)["ranks"][0]["roofline"]["roof"]
    assert roof["source"] == "measured" and roof["bandwidth_gbps"] == 2950.0
    assert roof["compute_tflops"]["bf16"] == 780.0


def test_trace_without_shapes_says_how_to_get_a_roofline(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, str(DATA / "healthy.pt.trace.json.gz"))
    assert code == 0 and "Roofline: the trace has no input shapes (profile with" in out


def test_a_trace_without_gpu_activity_places_no_op_on_the_roof(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same H100 trace as recorded without ProfilerActivity.CUDA: the ops
    and their launches, no kernel.  No op has GPU time, so no table of ops at
    0% is printed: the line says why and how to record it."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    doc = json.loads(gzip.decompress(FLOPS_TRACE.read_bytes()))
    on_gpu = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in on_gpu]
    path = tmp_path / "no-gpu.pt.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    code, out, _ = run(capsys, str(path))
    flat = " ".join(out.split())
    assert code == 0 and "Roofline: the GPU's activity was not recorded" in flat
    assert "ProfilerActivity.CUDA" in flat and "Roofline: the top ops" not in flat
    # its launches say it ran on a GPU: torch's ops dispatch there, they are not
    # the compute of a job on the CPU
    assert "torch dispatch" in flat and "torch ops (compute)" not in flat
    from gputui.analysis.trace_evidence import trace_evidence
    from gputui.analysis.trace_summary import summarize
    from gputui.tracefile.reader import read_trace

    summary = summarize(read_trace(path).timeline, 0, "order", str(path))
    assert summary.kernel_total_us == 0 and trace_evidence(summary).cuda  # the rules' too


# -- several files: the ranks of one job, or not ---------------------------------------------
def _ranked(tmp_path: Path, name: str, rank: int | None, world: int = 2, pid: int = 100) -> str:
    t = reference_trace()
    for ev in t.events:  # the host events' process
        if ev["pid"] == t.pid:
            ev["pid"] = pid
    t.pid = pid
    if rank is not None:
        t.meta["distributedInfo"] = {"rank": rank, "world_size": world}
    return str(t.write(tmp_path / name))


def _warned(
    capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[list[dict[str, object]], list[str], list[str]]:
    """The ranks and warnings of --json, and the stderr lines (each warning
    wrapped to the output's width under its first word)."""
    from gputui.reports.text import output_width, wrap

    code, out, err = run(capsys, *args, "--json")
    assert code == 0
    doc = json.loads(out)
    width = output_width(sys.stderr)
    said = [f"gputui analyze: warning: {w}" for w in doc["warnings"]]
    assert err.splitlines() == [line for w in said for line in wrap(w, width, "", "  ")]
    return doc["ranks"], doc["warnings"], err.splitlines()


def test_a_directory_says_which_json_files_its_traces_leave_out(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A directory is read by its profiler traces; its other .json files are
    not read, and the warning says how many, where there are any."""
    _ranked(tmp_path, "w0.pt.trace.json", 0)
    _ranked(tmp_path, "w1.pt.trace.json", 1)
    ranks, warnings, _ = _warned(capsys, str(tmp_path))
    assert len(ranks) == 2 and warnings == []
    _ranked(tmp_path, "trace.json", None, pid=200)
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "notes.txt").write_text("not a trace")
    ranks, warnings, _ = _warned(capsys, str(tmp_path))
    assert len(ranks) == 2
    assert warnings == [
        f"{tmp_path}: 2 other .json files left out (a directory is read by its "
        "*.pt.trace.json[.gz] files; name a file to read it)"
    ]


def test_the_same_file_twice_is_read_once(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    a = _ranked(tmp_path, "a.json", None)
    ranks, warnings, _ = _warned(capsys, a, a)
    assert len(ranks) == 1 and warnings == [f"{a}: given twice; read once"]
    ranks, warnings, _ = _warned(capsys, a, str(tmp_path))  # the file, and its directory
    assert len(ranks) == 1 and warnings == [f"{a}: given twice; read once"]
    link = tmp_path / "link.json"
    link.symlink_to(a)
    ranks, warnings, _ = _warned(capsys, a, str(link))
    assert len(ranks) == 1 and warnings == [f"{link}: the same file as {a}; read once"]


def test_a_copy_of_a_trace_is_read_once(capsys: pytest.CaptureFixture[str]) -> None:
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory() as where:
        copy = str(shutil.copy(DATA / "healthy.pt.trace.json.gz", Path(where) / "copy.json.gz"))
        ranks, warnings, _ = _warned(capsys, str(DATA / "healthy.pt.trace.json.gz"), copy)
    assert len(ranks) == 1
    (line,) = warnings
    assert line.startswith(f"{copy}: a copy of ") and "(the same trace_id); read once" in line


def test_traces_of_unrelated_processes_are_not_called_one_job(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    files = [_ranked(tmp_path, f"{pid}.json", None, pid=pid) for pid in (4001, 4002, 4003)]
    ranks, warnings, _ = _warned(capsys, *files)
    assert [r["rank"] for r in ranks] == [0, 1, 2]
    assert warnings == [
        "3 traces without distributedInfo, of 3 processes (pids 4001, 4002, 4003): "
        "not ranks of one job; numbered by file order"
    ]
    code, out, _ = run(capsys, *files)  # the diagnosis is of all files, not of a job
    assert code == 0 and out.startswith("All files: ") and "Job: " not in out


def test_captures_of_one_process_are_not_ranks(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    a, b = _ranked(tmp_path, "a.json", None), _ranked(tmp_path, "b.json", None)
    _, warnings, _ = _warned(capsys, a, b)
    assert warnings == [
        "2 traces of one process (pid 100), without distributedInfo: captures at different "
        "times, not ranks; numbered by file order"
    ]


def test_two_traces_of_one_rank_and_other_world_sizes_are_said(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    a = _ranked(tmp_path, "a.json", 1, pid=1)
    b = _ranked(tmp_path, "b.json", 1, pid=2)
    c = _ranked(tmp_path, "c.json", 5, world=4, pid=3)
    d = _ranked(tmp_path, "d.json", None, pid=4)
    ranks, warnings, _ = _warned(capsys, a, b, c, d)
    assert [r["rank"] for r in ranks] == [1, 1, 3, 5]
    assert warnings == [
        f"1 trace without distributedInfo beside 3 traces with it ({d}): not ranks of one "
        "job; those are numbered by file order",
        "the traces say different world sizes (2, 4): not ranks of one job",
        f"rank 1 is in 2 traces ({a}, {b}): two runs, or copies; each is shown as rank 1",
    ]
    assert _warned(capsys, c, _ranked(tmp_path, "e.json", 6, world=4, pid=5))[1] == [
        "ranks 5, 6 are outside the world size of 4"
    ]


def test_the_ranks_of_one_job_give_no_warning(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    files = [_ranked(tmp_path, f"w{k}.json", k, world=3, pid=10 + k) for k in range(3)]
    ranks, warnings, err = _warned(capsys, *files)
    assert [r["rank"] for r in ranks] == [0, 1, 2] and warnings == [] and err == []
    code, out, err_text = run(capsys, *files)
    assert code == 0 and err_text == "" and out.startswith("Job: ")


def test_text_follows_the_width_and_prints_findings_whole(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """COLUMNS sets the width (it was 100, whatever the terminal), and a finding's
    title, evidence, fix and follow-up wrap whole under their labels: the advice
    reads in the text, not only in --json."""
    path = str(DATA / "launch_bound.pt.trace.json.gz")
    doc = json.loads(run(capsys, path, "--json")[1])
    (fix,) = [f["fix"] for f in doc["ranks"][0]["findings"] if f["rule"] == "launch.overhead"]
    for width in (80, 120):
        monkeypatch.setenv("COLUMNS", str(width))
        out = run(capsys, path)[1]
        lines = out.splitlines()
        assert max(len(line) for line in lines) <= width and "…" not in out
        assert " ".join(fix.split()) in " ".join(out.split())
        said = next(i for i, line in enumerate(lines) if line.startswith("   fix   launch fewer"))
        assert lines[said + 1].startswith(" " * 9 + lines[said + 1].strip())  # hanging indent
    assert max(len(line) for line in lines) > 100  # the 120 columns are used


def test_counts_of_one_are_singular(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    t = TraceBuilder()
    t.step(1, 0.0, 100.0)
    t.launch(10.0, 5.0, GEMM, 20.0, 30.0)
    _, out, _ = run(capsys, str(t.write(tmp_path / "one.pt.trace.json")))
    out = " ".join(out.split())
    assert "1 GPU activity" in out and "in 1 name)" in out and "1 step (ProfilerStep#1)" in out
    assert "window of every section but HTA's: the 1 profiled step," in out
    assert (
        "breakdown: each moment goes to the first of these that ran then), the 1 profiled step,"
        in out
    )
    assert "1 launch call per step" in out
    assert "Findings (" not in out or "over the 1 profiled step" in out
    for wrong in ("1 steps", "1 names", "1 GPU activities", "1 events", "1 streams"):
        assert wrong not in out, wrong


# -- MFU during the trace ------------------------------------------------------------------
FP32_TRACE = DATA.parent / "h100_fp32_matmul_flops.pt.trace.json.gz"


def _mfu(capsys: pytest.CaptureFixture[str], path: Path) -> tuple[dict, str, int]:
    """(the rank's ``utilisation`` and ``utilisation_note`` in --json, the text
    report, the JSON version)."""
    code, out, _ = run(capsys, "--json", str(path))
    assert code == 0
    doc = json.loads(out)
    (rank,) = doc["ranks"]
    code, text, _ = run(capsys, str(path))
    assert code == 0
    return {k: rank[k] for k in ("utilisation", "utilisation_note")}, text, doc["version"]


def test_mfu_of_an_fp32_trace_against_a_hand_count(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """h100_fp32_matmul_flops: six Linear(4096, 4096) layers and a Linear(4096, 1)
    head on a 4096-row fp32 batch, 3 steps traced with shapes on an H100 80GB
    HBM3 (SXM).  By hand: a 4096-square product is 2·4096³ FLOPs; a step runs 6
    in the forward and 11 in the backward (every layer's weight gradient, the
    input gradient of all but the first), and the head 3 products of 2·4096²
    (forward, input and weight gradients): 17·2·4096³ + 3·2·4096² = 2.33656e12
    FLOPs (the trace's addmm and mm over its 3 steps).  The trace's steps (the
    report's step time, the TensorBoard plugin's): 49,536, 49,675 and 49,587
    us, 49,599.3 us on average: 47.11 TFLOP/s, under the fp32 peak (67 TFLOP/s),
    so no TF32.  MFU = 2.33656e12 / 0.0495993 s / 67e12 = 70.31%."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # no measured ceilings
    doc, text, version = _mfu(capsys, FP32_TRACE)
    assert version == 6
    u, hand_flops = doc["utilisation"], 17 * 2 * 4096**3 + 3 * 2 * 4096**2
    assert doc["utilisation_note"] is None
    assert u["model_flops_per_step"] == hand_flops == u["hardware_flops_per_step"]
    assert u["steps_per_s"] == pytest.approx(1e6 / ((49536 + 49675 + 49587) / 3))
    assert (u["dtype"], u["peak"], u["peak_tflops"]) == ("fp32", "fp32", 67.0)
    assert u["mfu"] == pytest.approx(hand_flops / 0.0495993 / 67e12, rel=1e-5)
    assert u["mfu"] == pytest.approx(0.7031, abs=5e-5)
    assert u["measured_share"] is None and u["note"] is None
    flat = " ".join(text.split())
    assert "MFU over the 3 profiled steps: MFU 70.3%, HFU 70.3%, 47.1 TFLOP/s fp32" in flat
    assert "2.34 TFLOP per step at 20.16 steps/s during the trace" in flat
    assert "the profiler slows the steps it records" in flat


def test_mfu_of_fp32_on_tf32_kernels_is_of_the_tf32_peak(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same trace with its GEMM kernels named as cuBLAS's and CUTLASS's TF32
    ones (``f32f32_tf32f32``, ``tensorop_s1688``), as with
    torch.set_float32_matmul_precision('high'): the same FLOPs and rate, now a
    share of the TF32 peak, though under what FP32 reaches."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    text = gzip.decompress(FP32_TRACE.read_bytes()).decode()
    assert "f32f32_f32f32_f32" in text and "simt_sgemm" in text
    text = text.replace("f32f32_f32f32_f32", "f32f32_tf32f32_f32")
    tf32 = tmp_path / "tf32.pt.trace.json.gz"
    tf32.write_bytes(gzip.compress(text.replace("simt_sgemm", "tensorop_s1688gemm").encode()))
    before, _, _ = _mfu(capsys, FP32_TRACE)
    after, report, _ = _mfu(capsys, tf32)
    u, fp32 = after["utilisation"], before["utilisation"]
    assert u["achieved_tflops"] == pytest.approx(fp32["achieved_tflops"])
    assert u["achieved_tflops"] < 67.0  # under the FP32 peak: the names alone tell
    assert (u["dtype"], u["peak"], u["peak_tflops"]) == ("fp32", "tf32", 494.5)
    assert u["mfu"] == pytest.approx(fp32["achieved_tflops"] / 494.5)
    assert "tf32" in report and "494.5 TFLOP/s" in report


def test_mfu_of_a_bf16_transformer_trace_against_a_hand_count(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """h100_healthy_flops_step11: a bf16 transformer (B 16, T 512, d 1024, 8
    layers of 16 heads, MLP 4096, vocabulary 32000; cuDNN attention with a
    mask: full, not causal), one step traced with shapes.  By hand, forward:
    per layer 24·BT·d² (q, k, v, output and MLP products) + 4·B·T²·d
    (attention), and the LM head 2·BT·d·V; backward twice the forward:
    3·(8·(24·8192·1024² + 4·16·512²·1024) + 2·8192·1024·32000) = 6.9707e12
    FLOPs.  Its one step: 47,783 us.  MFU = 6.9707e12 / 0.047783 s / 989.5e12
    (the bf16 dense peak) = 14.74%; HFU adds the scores the fused attention
    backward computes again."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    doc, text, _ = _mfu(capsys, FLOPS_TRACE)
    u = doc["utilisation"]
    bt, d, layers = 16 * 512, 1024, 8
    forward = layers * (24 * bt * d * d + 4 * 16 * 512 * 512 * d) + 2 * bt * d * 32000
    assert u["model_flops_per_step"] == 3 * forward
    assert (u["dtype"], u["peak_tflops"]) == ("bf16", 989.5)
    assert u["mfu"] == pytest.approx(3 * forward / 0.047783 / 989.5e12, rel=1e-5)
    assert u["hfu"] > u["mfu"]
    assert "MFU over the 1 profiled step: MFU 14.7%" in " ".join(text.split())


def test_a_trace_without_shapes_has_no_mfu_and_says_why(
    capsys: pytest.CaptureFixture[str],
) -> None:
    doc, text, _ = _mfu(capsys, DATA / "healthy.pt.trace.json.gz")
    assert doc["utilisation"] is None
    assert (
        doc["utilisation_note"] == "the trace has no input shapes (profile with record_shapes=True)"
    )
    assert "MFU over the trace: unknown: the trace has no input shapes" in " ".join(text.split())


def test_a_trace_of_an_unknown_gpu_gives_its_rate_without_mfu(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same trace on a GPU the datasheet table does not know: the FLOP rate,
    and the MFU unknown, with why."""
    import gzip

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    doc = json.loads(gzip.decompress(FP32_TRACE.read_bytes()))
    for dev in doc["deviceProperties"]:
        dev["name"] = "NVIDIA Made-up 9000"
    path = tmp_path / "unknown.pt.trace.json"
    path.write_text(json.dumps(doc))
    found, text, _ = _mfu(capsys, path)
    u = found["utilisation"]
    assert u["mfu"] is None and u["achieved_tflops"] == pytest.approx(47.11, abs=0.01)
    assert u["note"] == "peak unknown for NVIDIA Made-up 9000"
    assert "47.1 TFLOP/s fp32 (MFU: peak unknown for NVIDIA Made-up 9000)" in " ".join(text.split())


def test_an_expert_parallel_exchange_is_communication(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DeepEP's dispatch and combine kernels (as in DeepSeek-V3's published
    training trace) are communication, an all-to-all: the communication finding
    names them and gives the all-to-all advice, not DDP's all-reduce; the HTA
    section, whose communication is NCCL's, says where they went there."""
    monkeypatch.setenv("COLUMNS", "100")
    t = TraceBuilder()
    exchange = (
        "void deep_ep::internode::dispatch<false, 8, true, 8>(int4*, float*)",
        "void deep_ep::internode::combine<false, 8, __nv_bfloat16>(int4*, float*)",
    )
    for n in range(1, 4):
        start = (n - 1) * 10_000.0
        t.step(n, start, 10_000.0)
        t.launch(start + 100, 10.0, GEMM, start + 200, 6000.0)
        for i, name in enumerate(exchange):  # on their own stream, half exposed
            t.launch(start + 150 + i, 5.0, name, start + 3000 + 3000 * i, 3000.0, stream=27)
    path = t.write(tmp_path / "ep.pt.trace.json.gz")
    code, out, _ = run(capsys, "--json", str(path))
    assert code == 0
    (rank,) = json.loads(out)["ranks"]
    (comm,) = [f for f in rank["findings"] if f["rule"] == "comm.share"]
    assert comm["evidence"].startswith(
        "communication kernels (DeepEP's expert-parallel dispatch and combine)"
    )
    assert comm["fix"].startswith("the all-to-all exchange") and "DDP(" not in comm["fix"]
    code, out, _ = run(capsys, str(path))
    flat = " ".join(out.split())
    assert code == 0
    assert "no communication kernels by HTA's definition (NCCL's); the 18.0ms of other" in flat


def test_the_command_leaves_without_teardown_and_loses_no_output(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``gputui analyze`` as a command ends with ``os._exit`` (no interpreter
    teardown, the last trace's records left to the kernel): its whole report
    still reaches a pipe, the same as the in-process run's, and a bad file
    still gets one line and status 2."""
    import subprocess

    path = DATA / "dataloader.pt.trace.json.gz"
    code, expected, _err = run(capsys, str(path), "--json", "--top", "1000")
    assert code == 0
    done = subprocess.run(
        [sys.executable, "-m", "gputui", "analyze", str(path), "--json", "--top", "1000"],
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0 and done.stderr == b""
    assert json.loads(done.stdout) == json.loads(expected)
    bad = tmp_path / "bad.pt.trace.json"
    bad.write_bytes(b"{")
    done = subprocess.run(
        [sys.executable, "-m", "gputui", "analyze", str(bad)],
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 2 and done.stdout == b""
    assert done.stderr.count(b"\n") == 1 and b"bad.pt.trace.json" in done.stderr


@pytest.mark.parametrize("leaving", [True, False])
def test_only_a_leaving_load_holds_its_last_trace(leaving: bool) -> None:
    """The records of the last trace read are held to the process's end only
    where it ends right after (the command); a caller that goes on (the tests,
    a long-lived process) gets them freed."""
    from gputui.commands import analyze_load

    analyze_load.LEFT_TO_EXIT.clear()
    paths = [str(DATA / "dataloader.pt.trace.json.gz"), str(DATA / "healthy.pt.trace.json.gz")]
    try:
        summaries = analyze_load.load(paths, jobs=1, leaving=leaving)
        assert len(summaries) == 2
        held = [tf.path for tf in analyze_load.LEFT_TO_EXIT]
        assert held == ([paths[1]] if leaving else [])
    finally:
        analyze_load.LEFT_TO_EXIT.clear()
