"""`gputui analyze` on traces other projects published (tests/data/thirdparty,
their sources and licenses in its README): what a reading of each trace
found, held.  Their figures agree with Holistic Trace Analysis'."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

import pytest

from gputui.analysis.mfu import NO_GPU_WORK
from gputui.cli import main
from tests.integration.test_hta_truth import check, quiet_hta  # noqa: F401 (autouse)

DATA = Path(__file__).resolve().parents[1] / "data" / "thirdparty"
DLRM = sorted(DATA.glob("param-dlrm-8xv100-rank*.trace.json.gz"))
SWITCH = DATA / "switchtransformers-a100-moe.trace.json.gz"
PARTICLE = DATA / "particle-transformer-a100-fp16.trace.json.gz"
PARTICLE_CPU = DATA / "particle-transformer-cpu-on-a100-machine.trace.json.gz"
SIMPLE_ADD = DATA / "hta-simple-add-benchmark.trace.json.gz"
ALEXNET = DATA / "hta-alexnet-benchmark.trace.json.gz"
B200_EAGER = DATA / "tracelens-b200-eager.trace.json.gz"
BERT_SMALL = DATA / "tracelens-h100-bert-small.trace.json.gz"
TOKENOMICS = sorted(DATA.glob("tokenomics-2x4090-llama-rank*.trace.json.gz"))
OPENPI = DATA / "openpi-h200-policy-inference.trace.json.gz"


def analyze(capsys: pytest.CaptureFixture[str], *paths: Path) -> dict[str, Any]:
    assert main(["analyze", "--json", *map(str, paths)]) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def rules(rank: dict[str, Any]) -> list[str]:
    return [f["rule"] for f in rank["findings"]]


@pytest.mark.parametrize(
    "path", [DLRM[0], SWITCH, PARTICLE], ids=lambda p: p.name.removesuffix(".trace.json.gz")
)
def test_agrees_with_hta(path: Path) -> None:
    check(path)


def test_dlrm_on_eight_v100s_exchanges_embeddings_all_to_all(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """DLRM on eight V100s (torch 2.1, events at their Unix time): a 14.5 ms
    step of small kernels, the embeddings exchanged all-to-all and the dense
    part's gradients all-reduced by DDP."""
    assert len(DLRM) == 8
    doc = analyze(capsys, *DLRM)
    rank0 = next(r for r in doc["ranks"] if r["rank"] == 0)
    assert rules(rank0)[0] == "launch.overhead"
    # its optimizer is Adagrad: the fused one named is its own, not AdamW
    assert "torch.optim.Adagrad(..., fused=True)" in rank0["findings"][0]["fix"]
    assert rank0["markers"]["optimizer_class"] == "Adagrad"
    comm = next(f for f in rank0["findings"] if f["rule"] == "comm.share")
    assert "all-to-all exchange" in comm["fix"] and "gradient all-reduce" in comm["fix"]
    # its ops carry shapes: the MFU is counted, against the V100 SXM2's fp32
    # peak (its GEMMs run fp32: no tensor cores)
    util = rank0["utilisation"]
    assert util is not None and util["model_flops_per_step"] > 0
    assert (util["peak"], util["peak_tflops"], util["note"]) == ("fp32", 15.7, None)
    across = {f["rule"]: f for f in doc["across_ranks"]}
    assert list(across) == ["ranks.poor_overlap", "ranks.uneven_start"]
    assert across["ranks.poor_overlap"]["fix"].startswith("the all-to-all exchange")


def test_dlrm_ranks_wait_at_the_first_all_to_all_for_the_rank_that_began_last(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """DLRM's eight ranks each captured one step (ProfilerStep#10), begun up to
    7.5 ms apart (Unix times of one host) and ended within 1 ms of each other.
    At the step's first all-to-all, rank 7's kernel ran 10 us and rank 1's
    7.6 ms: rank 1 waited for rank 7 there, as long as it began earlier.  That
    wait was rank 1's comm.share and ranks 4's and 5's sync.host_sync (a
    pageable copy after it); the uneven start says so, at no cost, and asks
    for several steps."""
    doc = analyze(capsys, *DLRM)
    (uneven,) = [f for f in doc["across_ranks"] if f["rule"] == "ranks.uneven_start"]
    assert (uneven["scope"], uneven["severity"], uneven["impact_pct"]) == ("rank 7", "info", 0.0)
    assert "rank 7's kernel ran 0.01ms" in uneven["evidence"]
    assert (
        "(rank 1 7.62ms, rank 3 6.12ms, rank 4 4.87ms, rank 5 4.67ms and 3 more)"
        in (uneven["evidence"])
    )
    # every rank reached it 3.0-3.9 ms into its step: the lag came before
    assert "3.01ms-3.91ms into its window" in uneven["evidence"]
    assert "one step cannot tell" in uneven["evidence"]
    diag = doc["diagnosis"]
    assert (diag["cause"], diag["entered_last"]) == ("launch.overhead", 7)
    waiting = {o["rank"]: o["rule"] for o in diag["outliers"]}
    assert waiting == {1: "comm.share", 3: "comm.share", 4: "sync.host_sync", 5: "sync.host_sync"}
    # the wait, from the raw events: each rank's step start against the last one's
    starts = {}
    for path in DLRM:
        with gzip.open(path) as fh:
            trace = json.load(fh)
        (step,) = [e for e in trace["traceEvents"] if e.get("name") == "ProfilerStep#10"]
        starts[trace["distributedInfo"]["rank"]] = step["ts"]
    assert max(starts, key=lambda r: starts[r]) == 7
    assert 7400 < starts[7] - starts[1] < 7700  # rank 1's wait, 7.62 ms


def test_ranks_that_wait_each_step_are_no_uneven_start(capsys: pytest.CaptureFixture[str]) -> None:
    """Real pairs whose waits recur at every collective (two H100s: a data
    straggler, an all-reduce without overlap; two 4090s warming up; HTA's
    sampled pair): not an uneven start."""
    h100x2 = DATA.parent / "h100x2-nccl"
    for pair in (
        sorted(h100x2.glob("healthy-rank*.pt.trace.json.gz")),
        sorted(h100x2.glob("slow-rank*.pt.trace.json.gz")),
        sorted(h100x2.glob("nooverlap-rank*.pt.trace.json.gz")),
        TOKENOMICS,
    ):
        assert len(pair) == 2
        doc = analyze(capsys, *pair)
        assert "ranks.uneven_start" not in [f["rule"] for f in doc["across_ranks"]], pair
        assert doc["diagnosis"]["entered_last"] is None


def test_switch_transformer_runs_its_matmuls_in_fp32(capsys: pytest.CaptureFixture[str]) -> None:
    """A switch-transformer's forward on an A100 with ampere_sgemm kernels: FP32
    on the CUDA cores, 93% of kernel time."""
    (rank,) = analyze(capsys, SWITCH)["ranks"]
    assert rules(rank)[0] == "precision.fp32_matmul"
    assert "93% of kernel time" in rank["findings"][0]["evidence"]
    # Its calls give their correlation ids as External ids: the GPU time reaches
    # the ops that enclose the launches, the GEMMs, not ops whose ids are equal
    # to those numbers (an aten::view "memory-bound" at 1% of its roof).
    top = rank["roofline"]["ops"][:2]
    assert [op["name"] for op in top] == ["aten::addmm", "aten::addmm"]
    assert all(op["bound"] == "compute" for op in top)
    assert "roofline.memory_bound" not in rules(rank)


def test_a_cold_first_launch_is_not_launch_overhead(capsys: pytest.CaptureFixture[str]) -> None:
    """Particle Transformer's fp16 forward on an A100, its first: one launch call
    takes 1337 ms (the other 548 a median 8.6 us)."""
    (rank,) = analyze(capsys, PARTICLE)["ranks"]
    assert rank["warnings"][0].startswith("1 launch call took 1337ms in the window")
    assert "launch.overhead" not in rules(rank)
    assert rules(rank)[0] == "launch.idle_gaps"


def test_a_model_run_on_the_cpu_of_a_gpu_machine_gets_no_gpu_peak(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The same model in eval mode on the CPU (mkldnn convolutions) of a machine
    whose A100 the trace names: no launch, no GPU activity."""
    (rank,) = analyze(capsys, PARTICLE_CPU)["ranks"]
    assert rank["gpu_activities"] == 0 and rank["sanity"]["kernel_launch_calls"] == 0
    util = rank["utilisation"]
    assert util["note"] == NO_GPU_WORK and util["mfu"] is None and util["peak_tflops"] is None
    assert rank["roofline"] is None


def test_a_benchmark_that_computes_on_the_cpu_between_syncs_is_told_its_host_ops_first(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """HTA's simple-add benchmark: between its adds it flushes caches with torch
    ops on host tensors (88 ms of its 109 ms window) and calls
    cudaDeviceSynchronize five times (7.7 ms).  The GPU idles nearly the whole
    window, and would idle as much without the syncs: the host ops come first,
    and the syncs own no more of the GPU's idle time than the CPU waited in
    them."""
    (rank,) = analyze(capsys, SIMPLE_ADD)["ranks"]
    assert rules(rank)[:2] == ["cpu.host_ops", "sync.host_sync"]
    with gzip.open(SIMPLE_ADD) as fh:
        events = json.load(fh)["traceEvents"]
    syncs = [e for e in events if e.get("name") == "cudaDeviceSynchronize"]
    waited = sum(e["dur"] for e in syncs)
    account = rank["account"]
    idle = {b: us * account["steps"] for b, us in account["gpu_idle_us"].items()}
    assert idle["sync"] <= waited + len(syncs)  # (each call's ends to whole microseconds)
    assert idle["dispatch"] > 5 * idle["sync"]


def test_alexnet_warm_up_is_set_up_not_a_launch_bound_step(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """HTA's alexnet benchmark: a trace without step marks whose window (the span
    of GPU activity, 13 s) is nearly all the warm-up forward: its first
    convolution frees cuDNN's trial workspaces (cudaFree, 6.5 s), the caching
    allocator reserves (cudaMalloc) and cuDNN makes its streams while the GPU
    idles, and CUDA loads a module on a first launch (3 s).  It read as a
    launch-bound step (crit, 71%)."""
    (rank,) = analyze(capsys, ALEXNET)["ranks"]
    assert "launch.overhead" not in rules(rank)
    assert "launch.idle_gaps" not in rules(rank)
    # the set-up calls, counted from the raw events: the long ones in the window
    lo, hi = rank["window"]["start_us"], rank["window"]["end_us"]
    with gzip.open(ALEXNET) as fh:
        events = json.load(fh)["traceEvents"]
    made = {"cudaFree", "cudaMalloc", "cudaStreamCreateWithFlags"}
    long = [
        e
        for e in events
        if e.get("name") in made
        and e["dur"] >= 100_000
        and e["ts"] < hi
        and e["ts"] + e["dur"] > lo
    ]
    sanity = rank["sanity"]
    assert sanity["setup_calls"] == len(long) == 7
    assert sanity["setup_call_us"] == pytest.approx(sum(e["dur"] for e in long), abs=len(long))
    assert [s["name"] for s in sanity["setup_by_name"]] == [
        "cudaFree",
        "cudaMalloc",
        "cudaStreamCreateWithFlags",
    ]
    warning = next(w for w in rank["warnings"] if "set-up calls" in w)
    assert warning.startswith("7 set-up calls took 9133ms of the 13.0s window")


def test_the_share_of_tiny_kernels_is_counted_kernel_by_kernel(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """DLRM rank 0: the launch finding's share of kernels under 10 us is the
    kernels' own, counted from the raw events of the window (it was taken
    from the kernel table's per-name means, which HTA's df_index trace showed
    at 12% where its kernels were 51%)."""
    (rank,) = analyze(capsys, DLRM[0])["ranks"]
    lo, hi = rank["window"]["start_us"], rank["window"]["end_us"]
    with gzip.open(DLRM[0]) as fh:
        events = json.load(fh)["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel" and lo <= e["ts"] < hi]
    tiny = [e for e in kernels if e["dur"] < 10]
    sanity = rank["sanity"]
    assert (sanity["kernels_in_window"], sanity["kernels_under_10us"]) == (len(kernels), len(tiny))
    launch = next(f for f in rank["findings"] if f["rule"] == "launch.overhead")
    assert f", {round(100 * len(tiny) / len(kernels))}% of them under 10us" in launch["evidence"]


def test_one_small_compiled_region_does_not_make_an_eager_model_compiled(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """TraceLens' B200 "eager" trace: one Torch-Compiled Region of 0.6 ms (one
    Triton kernel) among 768 kernel launches of an 84 ms window.  The launch
    advice was the compiled job's ("the model is already compiled"); it runs
    eager, and the advice says how little the compiled region issues."""
    (rank,) = analyze(capsys, B200_EAGER)["ranks"]
    lo, hi = rank["window"]["start_us"], rank["window"]["end_us"]
    with gzip.open(B200_EAGER) as fh:
        events = json.load(fh)["traceEvents"]
    regions = [e for e in events if e.get("name", "").startswith("Torch-Compiled Region")]
    launches = [
        e
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver")
        and e["name"].startswith(("cudaLaunchKernel", "cuLaunchKernel"))
        and lo <= e["ts"] < hi
    ]
    inside = [
        c
        for c in launches
        if any(r["tid"] == c["tid"] and r["ts"] <= c["ts"] < r["ts"] + r["dur"] for r in regions)
    ]
    markers = rank["markers"]
    assert markers["compiled"] is True
    assert markers["compiled_launch_share"] == pytest.approx(len(inside) / len(launches))
    assert len(inside) == 1 and len(launches) == 768
    (launch,) = [f for f in rank["findings"] if f["rule"] == "launch.overhead"]
    assert not launch["fix"].startswith("the model is already compiled")
    assert launch["fix"].startswith("launch fewer, larger kernels: torch.compile(model)")
    assert "its regions made under 1% of the kernel launches" in launch["fix"]


def _covered(spans: list[tuple[float, float]], lo: float, hi: float) -> list[tuple[float, float]]:
    """The union of ``spans`` clipped to [lo, hi), merged; each span in whole
    microseconds, as the account reads them (its start up, its end down)."""
    out: list[tuple[float, float]] = []
    whole = [(math.ceil(s), max(math.ceil(s), math.floor(e))) for s, e in spans]
    for s, e in sorted((max(s, lo), min(e, hi)) for s, e in whole if e > lo and s < hi):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _minus(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """The length of merged spans ``a`` outside merged spans ``b``."""
    total = 0.0
    for s, e in a:
        total += e - s - sum(max(0.0, min(e, y) - max(s, x)) for x, y in b)
    return total


def test_a_small_models_python_in_its_module_calls_is_what_issuing_it_costs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """TraceLens' H100 BERT-small inference (recorded with Python stacks): 54%
    of its one step is host time outside torch ops, and nearly all of it runs
    inside the model's module calls: Hugging Face's forward code and
    nn.Module's call machinery around 60 kernels of 5 us.  It was told to move
    host-side work out of its inference loop (cpu.python); the model's Python is
    the cost of issuing its ops, and compiling the model (or CUDA graphs, or a
    larger batch) is the fix.  The model's Python is checked against the raw
    events: the module-call frames' time in the step outside every op and
    runtime call (``_call_impl`` and torch's "nn.Module: NAME" frames)."""
    (rank,) = analyze(capsys, BERT_SMALL)["ranks"]
    with gzip.open(BERT_SMALL) as fh:
        events = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
    (step,) = [
        e for e in events if e["name"].startswith("ProfilerStep#") and e["cat"] == "user_annotation"
    ]
    lo, hi = math.ceil(step["ts"]), math.floor(step["ts"] + step["dur"])
    module = _covered(
        [
            (e["ts"], e["ts"] + e["dur"])
            for e in events
            if e["cat"] == "python_function"
            and (e["name"].endswith("): _call_impl") or e["name"].startswith("nn.Module: "))
        ],
        lo,
        hi,
    )
    busy = _covered(
        [
            (e["ts"], e["ts"] + e["dur"])
            for e in events
            if e["cat"] in ("cpu_op", "cuda_runtime", "cuda_driver")
        ],
        lo,
        hi,
    )
    acct = rank["account"]
    assert acct["model_python_us"] == pytest.approx(_minus(module, busy), abs=1)
    assert acct["model_python_us"] > 0.8 * acct["python_us"]
    found = rules(rank)
    assert found[0] == "launch.overhead" and "cpu.python" not in found
    launch = rank["findings"][0]
    assert "the model's Python in its module calls" in launch["evidence"]
    assert launch["fix"].startswith("launch fewer, larger kernels: torch.compile(model)")
    assert "batch more requests into each call" in launch["fix"]  # inference: no optimizer


def test_two_ranks_profiled_cold_lag_by_one_off_work_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A 4-layer Llama's forward sharded over two RTX 4090s (all-gathers and
    reduce-scatters, no backward), each rank profiled from its first call.
    Rank 0's window holds 373 ms of launch calls that load kernels on first
    use; rank 1 made its own before its first GPU activity.  Rank 0 lags by
    that one-off work, no straggler of the loop: an info that says so.  The
    communication advice speaks of inference, not of FSDP's backward, and no
    rank is told its GPU idles for host-side work: its idle time is the
    all-gathers waiting for the peer, which comm.share already counts."""
    assert len(TOKENOMICS) == 2
    doc = analyze(capsys, *TOKENOMICS)
    (straggler,) = [f for f in doc["across_ranks"] if f["rule"] == "ranks.straggler"]
    assert straggler["severity"] == "info" and straggler["impact_pct"] == 0
    assert "one-off work" in straggler["evidence"]
    assert "past its warm-up" in straggler["fix"]
    assert "CPU contention" not in straggler["fix"]
    for rank in doc["ranks"]:
        assert rules(rank)[0] == "comm.share"
        comm = rank["findings"][0]
        assert "with no backward here" in comm["fix"]
        assert "backward_prefetch" not in comm["fix"]
        assert "launch.idle_gaps" not in rules(rank)
        shares = [f["impact_pct"] or 0 for f in rank["findings"]]
        assert sum(shares) <= 100


def test_a_while_loop_on_a_gpu_tensor_is_told_by_its_truth_reads(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """pi0's policy inference on an H200 (openpi, torch.compile replaying CUDA
    graphs): its flow-matching loop runs ``while time >= -dt / 2`` on a GPU
    tensor, so each of its denoising steps ends in a read-back (aten::is_nonzero,
    its .item() inside, counted here from the raw events) and the GPU waits for
    the next step's launches.  The finding names the loop's condition, not an
    .item() of the job's own, and its fix is a Python number for it."""
    with gzip.open(OPENPI) as fh:
        events = json.load(fh)["traceEvents"]
    truths = sum(1 for e in events if e.get("cat") == "cpu_op" and e["name"] == "aten::is_nonzero")
    items = sum(1 for e in events if e.get("cat") == "cpu_op" and e["name"] == "aten::item")
    assert truths == items == 11
    (rank,) = analyze(capsys, OPENPI)["ranks"]
    top = rank["findings"][0]
    assert top["rule"] == "sync.host_sync"
    assert f"{truths} of them `if`/`while` on a tensor (aten::is_nonzero)" in top["evidence"]
    assert top["fix"].startswith("a Python `if` or `while` on a GPU tensor")
