"""The analyzer on real H100 and H200 jobs it was not tuned on, each with a
planted cause (bench/jobs/analyzer_cases.py; tests/data/h100-cases,
tests/data/h200-cases): the first warn or crit finding names the planted cause,
the look-alike stays quiet, and the text report and ``--json`` name the same
findings."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from gputui.cli import main
from gputui.protocol.trace_metrics import ACCOUNT_BUCKETS

CASES = Path(__file__).resolve().parents[1] / "data" / "h100-cases"
H200 = CASES.parent / "h200-cases"
#: the attention rules: none speaks above info on a job whose attention is fine
ATTENTION = {"attention.hand_written", "attention.sdpa_math", "attention.sdpa_efficient"}

#: case -> (the first warn/crit rule, rules that must stay quiet or below warn)
PLANTED = {
    "numpy_preproc": ("cpu.python", {"launch.overhead", "launch.idle_gaps"}),
    "numpy_workers": (None, {"cpu.python"}),
    "hand_attention": ("attention.hand_written", {"attention.sdpa_math"}),
    "sdpa_math": (
        "attention.sdpa_math",
        {"attention.hand_written", "precision.fp32_matmul", "kernels.elementwise_bound"},
    ),
    "lightning": (None, set()),
    "compiled": (None, set()),
    # a random tensor made on the CPU every step: its op is CPU work, not launch cost
    "cpu_randn": ("cpu.tensor_creation", {"launch.overhead"}),
    # images resized with torch ops on the host: CPU work, not launch cost
    "cpu_resize": ("cpu.host_ops", {"launch.overhead"}),
    # .item() in forward where the GPU is busy 89% of the step: the syncs leave it
    # little idle time under the profiler (live, NVML sees 13%: below)
    "item_in_forward_wide": (None, {"launch.overhead"}),
    # recorded on an H200
    "sdpa_mem_efficient": ("attention.sdpa_efficient", {"attention.sdpa_math"}),
    "inference": (None, ATTENTION),  # fp32 SDPA, 8% of kernel time: info
    "hf_trainer": (None, ATTENTION),  # bf16 on cuDNN
    # H200: torch.compile skipped the frame (a graph break in a loop): eager and
    # launch-bound; H100: two compiled layers split by .item() (3 graphs): still
    # launch-bound, and told that the model is compiled
    "compiled_item": ("launch.overhead", set()),
    # a torchvision ResNet-50 whose 4 workers decode JPEGs: its batch norm makes
    # zero tensors, which are not zero_grad's
    "vision": ("data.loader_wait", {"steps.zero_grad_zeros"}),
    # a CNN profiled from its first iteration with cuDNN's autotuning on: the
    # window is nearly all warm-up (a warning), no cause of the loop's
    "conv_warmup": (None, {"launch.idle_gaps", "launch.overhead", "cpu.python"}),
    # an eager MLP whose one compiled helper issues under 1% of the launches
    "partly_compiled": ("launch.overhead", set()),
    # numpy_preproc and inference recorded with Python stacks (--stacks): the
    # loop's numpy stays Python outside torch; the encoder's module code is the
    # cost of issuing its ops
    "numpy_preproc_stack": ("cpu.python", {"launch.overhead", "launch.idle_gaps"}),
    "inference_stack": ("launch.overhead", {"cpu.python"}),
    # library code as its users run it (bench/jobs/library_jobs.py, one step of
    # each trace): the HF Trainer accumulating 4 micro-batches a step, and a
    # Hugging Face Llama loaded with attn_implementation="eager"
    "hf_trainer_accum": ("launch.overhead", set()),
    "hf_llama_eager": ("attention.hand_written", set()),
    # a small CNN fed by 4 pinned DataLoader workers: its AdamW step's own
    # Python (1.8 ms of a 5.4 ms step in no op) is torch's, not preprocessing;
    # its NCHW convolutions convert their tensors (channels_last: 3.6 -> 2.9 ms)
    "pinned_loader": ("kernels.layout_conversion", {"cpu.python"}),
}


def trace(case: str, gpu: str | None = None) -> Path:
    """A case's trace: the H100's where there is one (or ``gpu``'s)."""
    path = CASES / f"{case}.pt.trace.json.gz"
    if gpu == "h200" or (gpu is None and not path.exists()):
        return H200 / f"{case}.pt.trace.json.gz"
    return path


#: every kept trace of a planted case: (case, its path)
PLANTED_TRACES = [
    (case, path)
    for case in sorted(PLANTED)
    for path in (CASES / f"{case}.pt.trace.json.gz", H200 / f"{case}.pt.trace.json.gz")
    if path.exists()
]


def analyze(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["analyze", *args]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize(
    ("case", "where"), PLANTED_TRACES, ids=[f"{p.parent.name[:4]}-{c}" for c, p in PLANTED_TRACES]
)
def test_the_planted_cause_comes_first(
    capsys: pytest.CaptureFixture[str], case: str, where: Path
) -> None:
    path = str(where)
    (rank,) = json.loads(analyze(capsys, "--json", path))["ranks"]
    serious = [f["rule"] for f in rank["findings"] if f["severity"] in ("warn", "crit")]
    first, quiet = PLANTED[case]
    if first is not None:
        assert serious[:1] == [first], serious
    assert not quiet & set(serious), serious
    # the account adds up, every share of a stated whole is at most 100%
    acct = rank["account"]
    total = sum(acct[f"{b}_us"] for b in ACCOUNT_BUCKETS)
    assert total == pytest.approx(acct["step_us"], rel=1e-3)
    assert all(0 <= acct[f"{b}_pct"] <= 100 for b in ACCOUNT_BUCKETS)
    assert all(f["impact_pct"] is None or 0 <= f["impact_pct"] <= 100 for f in rank["findings"])
    # the text report names the same findings, in the same order
    text = analyze(capsys, "--top", "5", path)
    titles = [f["title"] for f in rank["findings"]]
    positions = [text.find(t[:40]) for t in titles]
    assert -1 not in positions and positions == sorted(positions), (titles, positions)


def test_the_numpy_job_names_python_with_its_share(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(CASES / "numpy_preproc.pt.trace.json.gz")
    (rank,) = json.loads(analyze(capsys, "--json", path))["ranks"]
    (f,) = [f for f in rank["findings"] if f["rule"] == "cpu.python"]
    assert f["severity"] == "crit" and f["impact_pct"] > 80
    assert rank["account"]["python_pct"] > 80
    text = analyze(capsys, path)
    assert "Step time account" in text and "Python outside torch" in text


def test_sdpa_on_the_memory_efficient_kernels_says_why_and_what_it_costs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """fp32 q/k/v with an additive float causal mask (no shapes recorded): the
    kernels' names tell fp32, SDPA's own ops tell the mask; half the kernels'
    time is the claim, and the dominant kernel goes under the finding."""
    (rank,) = json.loads(analyze(capsys, "--json", str(trace("sdpa_mem_efficient"))))["ranks"]
    assert rank["markers"]["attention"] == ["efficient"]
    assert rank["markers"]["attention_inputs"] == ["mask"]
    f = rank["findings"][0]
    assert f["rule"] == "attention.sdpa_efficient" and f["severity"] == "crit"
    assert "fp32 inputs" in f["evidence"] and "an attn_mask" in f["evidence"]
    assert "record_shapes=True" in f["evidence"]
    assert f["bucket"] == "gpu_busy" and 40 < f["impact_pct"] < 50  # 96% of kernels, halved
    assert [r["rule"] for r in f["related"]] == ["kernels.top_kernel"]


@pytest.mark.parametrize(
    ("case", "says"),
    [
        ("inference", "fp32 inputs (the memory-efficient kernels ran fp32"),
        ("sdpa_math", "16-bit inputs (the math backend cast them to fp32), is_causal=True"),
    ],
)
def test_the_backend_and_the_reason_without_shapes(
    capsys: pytest.CaptureFixture[str], case: str, says: str
) -> None:
    (rank,) = json.loads(analyze(capsys, "--json", str(trace(case))))["ranks"]
    (f,) = [f for f in rank["findings"] if f["rule"].startswith("attention.sdpa")]
    assert says in f["evidence"]


def test_cudnn_attention_in_bf16_gets_no_attention_finding(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A Hugging Face Trainer's GPT-2 in bf16 on SDPA's cuDNN backend: nothing
    to say about its attention, at any severity; its cuDNN kernels, helpers
    included, are attention."""
    (rank,) = json.loads(analyze(capsys, "--json", str(trace("hf_trainer"))))["ranks"]
    assert rank["markers"]["attention"] == ["cudnn"]
    assert not [f for f in rank["findings"] if f["rule"] in ATTENTION]
    cudnn = [k for k in rank["kernels"] if "cudnn" in k["name"]]
    assert cudnn and {k["class"] for k in cudnn} == {"attention"}


def test_a_compiled_model_that_ran_eager_is_told_why(capsys: pytest.CaptureFixture[str]) -> None:
    """The model was wrapped in torch.compile, but a graph break in its loop made
    dynamo skip the frame: the profile holds no compiled region, and the launch
    advice says what that means instead of only "compile it"."""
    (rank,) = json.loads(analyze(capsys, "--json", str(trace("compiled_item", "h200"))))["ranks"]
    assert rank["markers"]["compiled"] is False
    f = rank["findings"][0]
    assert f["rule"] == "launch.overhead" and "no compiled region ran here" in f["fix"]


#: attach sessions of two of the cases, run under ``gputui run`` on an H100 and
#: recorded with a 3-step capture (tests/data/h100-cases/live): the first warn or
#: crit finding the live analyzer gives
LIVE = {
    # two compiled layers split by .item(): the fix names the break and its line
    "compiled_item": "launch.overhead",
    # the random op and the resize are CPU work: before launch.overhead took
    # their time as issuing
    "cpu_randn": "cpu.tensor_creation",
    "cpu_resize": "cpu.host_ops",
    # NVML saw the GPU idle 13% of the unprofiled step, most of it after the syncs
    "item_in_forward_wide": "sync.host_sync",
    # a Lightning Trainer whose DataLoader starts its 2 workers anew every 16 steps
    "lightning": "data.epoch_start",
    # a GPT-2 of 4 layers under the Hugging Face Trainer: the host issues its ops
    # slower than the GPU runs them
    "hf_trainer": "launch.overhead",
    # a torchvision ResNet-50 whose 4 DataLoader workers decode JPEGs
    "vision": "data.loader_wait",
    # a Lightning job calling self.log(..., prog_bar=True) at every step
    "lightning_log": "cpu.logging",
}


@pytest.mark.parametrize("case", sorted(LIVE))
def test_the_planted_cause_comes_first_live(capsys: pytest.CaptureFixture[str], case: str) -> None:
    path = CASES / "live" / f"{case}.jsonl.gz"
    assert main(["attach", "--replay", str(path), "--once", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    serious = [f for f in report["findings"] if f["severity"] in ("warn", "crit")]
    assert [f["rule"] for f in serious][:1] == [LIVE[case]], serious
    if case.startswith("cpu_"):  # CPU work, not the cost of issuing ops
        assert "launch.overhead" not in {f["rule"] for f in serious}
    # its cost is in milliseconds of the job's own mean step, within the step
    top = serious[0]
    assert 0 < top["impact_pct"] <= 100
    mean_ms = report["live_account"]["step_s"] * 1000.0
    assert top["impact_ms"] == pytest.approx(mean_ms * top["impact_pct"] / 100.0, rel=0.02)


def test_an_inference_loop_without_steps_is_told_how_to_mark_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An inference loop under ``gputui run`` on an H100 (no optimizer, no
    DataLoader: nothing ends a step): the report says where steps come from,
    that the findings wait for them, and blames no older hook."""
    path = CASES / "live" / "inference_no_steps.jsonl.gz"
    assert main(["attach", "--replay", str(path), "--once"]) == 0
    words = " ".join(capsys.readouterr().out.split())
    assert "no steps recorded yet: a step ends at an optimizer's step()" in words
    assert "gputui.hook.step()" in words
    assert "findings: none yet" in words and "nothing found" not in words
    assert "older gputui" not in words


def test_memory_samples_of_an_older_hook_are_still_said_to_be_by_time(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A recording whose job has steps but whose memory samples carry no step
    numbers (the first release's hook) keeps its note."""
    path = CASES.parents[1] / "samples" / "attach-v1.jsonl.gz"
    assert main(["attach", "--replay", str(path), "--once"]) == 0
    words = " ".join(capsys.readouterr().out.split())
    assert "the memory samples carry no step numbers (an older gputui's hook)" in words


def test_a_compiled_model_split_by_item_is_told_the_break(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Two compiled layers with ``.item()`` between them (an H100 job under
    ``gputui run``): the trace says the model is compiled; live, the launch
    advice names the graph break the hook saw, with its line."""
    (rank,) = json.loads(analyze(capsys, "--json", str(trace("compiled_item"))))["ranks"]
    assert rank["markers"]["compiled"] is True
    assert rank["findings"][0]["rule"] == "launch.overhead"
    assert "already compiled" in rank["findings"][0]["fix"]
    path = CASES / "live" / "compiled_item.jsonl.gz"
    assert main(["attach", "--replay", str(path), "--once", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    (top,) = [f for f in report["findings"] if f["rule"] == "launch.overhead"]
    assert "the graph break at forward" in top["fix"] and "Tensor.item()" in top["fix"]
    assert report["compile"]["graph_breaks"] == 1


def test_an_inference_loop_gets_steps_and_its_cause(capsys: pytest.CaptureFixture[str]) -> None:
    """The same inference loop under a hook that ends a step at each top-level
    forward call (H100, under ``gputui run``): steps, their account, a capture,
    and the planted cause first, with the advice for inference."""
    path = CASES / "live" / "inference.jsonl.gz"
    assert main(["attach", "--replay", str(path), "--once", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["status"]["forward_steps"] is True
    assert report["stats"]["count"] >= 100
    top = report["findings"][0]
    assert top["rule"] == "launch.overhead" and top["severity"] == "crit"
    assert "batch more requests into each call" in top["fix"]
    assert main(["attach", "--replay", str(path), "--once"]) == 0
    words = " ".join(capsys.readouterr().out.split())
    assert "steps: one per top-level forward call" in words


def live_report(capsys: pytest.CaptureFixture[str], case: str) -> dict:
    path = CASES / "live" / f"{case}.jsonl.gz"
    assert main(["attach", "--replay", str(path), "--once", "--json"]) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def test_a_lightning_job_is_told_its_workers_restart_each_epoch(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A Lightning Trainer on an H100 whose DataLoader (2 workers, 16 batches an
    epoch) stops and starts its workers at every epoch: the epoch starts are the
    cause, in Lightning's words; the same job with persistent_workers=True,
    recorded right after, has no slow epoch starts and runs over twice as many
    steps a second."""
    report = live_report(capsys, "lightning")
    assert report["status"]["frameworks"] == ["lightning"]
    top = report["findings"][0]
    assert top["rule"] == "data.epoch_start" and top["severity"] == "crit"
    assert "every 16 steps" in top["evidence"]
    assert "persistent_workers=False" in top["evidence"]
    assert "DataLoader(..., persistent_workers=True) in train_dataloader()" in top["fix"]
    assert "steps.slow_outliers" in [r["rule"] for r in top["related"]]
    fixed = live_report(capsys, "lightning_persistent")
    rules = {f["rule"]: f["severity"] for f in fixed["findings"]}
    assert "data.epoch_start" not in rules
    assert rules.get("steps.slow_outliers") in (None, "info")
    assert fixed["stats"]["steps_per_s"] > 2 * report["stats"]["steps_per_s"]


def test_an_hf_trainer_job_is_told_in_training_arguments(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A GPT-2 under the Hugging Face Trainer on an H100: launch-bound, told in
    TrainingArguments, and not told to fuse an optimizer the Trainer already
    runs fused; the same job with torch_compile=True, recorded right after,
    runs more steps a second and is told the graph break that splits it."""
    report = live_report(capsys, "hf_trainer")
    assert report["status"]["frameworks"] == ["transformers"]
    top = report["findings"][0]
    assert top["rule"] == "launch.overhead"
    assert "TrainingArguments(torch_compile=True)" in top["fix"]
    assert "gradient_accumulation_steps" in top["fix"]
    assert "fused optimizer" not in top["fix"]
    compiled = live_report(capsys, "hf_trainer_compiled")
    assert compiled["stats"]["steps_per_s"] > 1.3 * report["stats"]["steps_per_s"]
    (launch,) = [f for f in compiled["findings"] if f["rule"] == "launch.overhead"]
    assert "already compiled" in launch["fix"] and "the graph break at" in launch["fix"]


def test_lightnings_own_profiler_trace_is_read_as_lightnings(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The Lightning job on an H100, profiled the way Lightning offers
    (``Trainer(profiler=PyTorchProfiler(...))``): its ranges are named
    ``[pl][profile]...`` and ``[pl][module]...``, so the trace says the job is
    Lightning's, and the data fix is spoken in Lightning's terms."""
    (rank,) = json.loads(analyze(capsys, "--json", str(trace("lightning_profiler"))))["ranks"]
    assert rank["markers"]["framework"] == "lightning"
    assert rank["markers"]["loader"] == "workers"
    (data,) = [f for f in rank["findings"] if f["rule"] == "data.loader_wait"]
    assert "in the DataLoader that train_dataloader() returns" in data["fix"]
    (fp32,) = [f for f in rank["findings"] if f["rule"] == "precision.fp32_matmul"]
    assert "Trainer(precision='bf16-mixed')" in fp32["fix"]


def test_lightnings_logging_at_every_step_is_named_with_its_cost(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A Lightning job on an H100 that logs its loss with
    ``self.log(..., prog_bar=True)`` at every step (``bench/jobs/lightning_log.py``:
    an MLP 4096 wide at batch 1024 in bf16, its data on the GPU): the logging
    is named first, with the progress bar's refresh rate.  The same job without
    the log call ran 503.7 steps/s against 352.5 (unhooked, the same machine, one
    after the other): 0.85 ms a step, which the finding's cost is held to."""
    report = live_report(capsys, "lightning_log")
    assert report["status"]["frameworks"] == ["lightning"]
    top = report["findings"][0]
    assert top["rule"] == "cpu.logging"
    assert "_ResultMetric.update (result.py:225)" in top["evidence"]
    assert "self.global_step % N == 0" in top["fix"] and "refresh_rate" in top["fix"]
    saved_ms = (1 / 352.5 - 1 / 503.7) * 1000
    assert top["impact_ms"] == pytest.approx(saved_ms, rel=0.3)
    # its data is on the GPU already, indexed by a Python list each batch: the
    # fix names the index, and moves the tensors only where they are not there
    (data,) = [f for f in report["findings"] if f["rule"] == "data.loader_wait"]
    assert "rather than a Python list" in data["fix"] and "where they fit" in data["fix"]


def test_a_generate_loop_is_told_to_decode_with_a_static_cache(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Hugging Face's generate() on an H100 (a 12-layer GPT-2 in bf16, 64 new
    tokens for a batch of 1, ``bench/jobs/hf_generate.py``): a step a token,
    launch-bound on the default dynamic KV cache.  Told to decode with a static
    cache, and not to compile on top of it: the twin with
    ``cache_implementation='static'``, recorded right after, ran 684 tokens/s
    against 161, and its session shows why: transformers compiled the decoding
    step into CUDA graphs itself (which hides the forward calls, so it has no
    steps for the analyzer, and says so)."""
    report = live_report(capsys, "hf_generate")
    top = report["findings"][0]
    assert top["rule"] == "launch.overhead"
    assert top["fix"].startswith("decode with a static KV cache")
    assert "cache_implementation='static'" in top["fix"]
    assert "fuses small ops" not in top["fix"] and "optimizer" not in top["fix"]
    static = live_report(capsys, "hf_generate_static")
    assert static["compile"]["graphs"] >= 1 and static["findings"] == []
    assert static["status"]["compiled_graphs"] >= 1


def test_workers_that_wait_for_work_are_not_told_to_multiply(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An MLP on an H100 fed from a TensorDataset by 2 persistent workers
    (``bench/jobs/loader_handoff.py``): the loop waits for data, but the workers
    wait for work most of their time, and 2, 4 and 8 workers ran it at the same
    speed.  Told that handing each batch over is the cost and to index whole
    batches at once: that twin, recorded in the same session, runs over 1.5
    times the steps a second and is told its batches are indexing out of host
    memory; the twin that keeps the data on the GPU has no data finding left."""
    report = live_report(capsys, "loader_w2p")
    top = report["findings"][0]
    assert top["rule"] == "data.loader_wait"
    assert "the 2 DataLoader workers wait for work" in top["evidence"]
    assert top["fix"].startswith("the workers keep up (more would wait too)")
    assert "BatchSampler(RandomSampler(dataset), batch_size" in top["fix"]
    assert "raise num_workers" not in top["fix"]
    batched = live_report(capsys, "loader_batched_w0")
    assert batched["stats"]["steps_per_s"] > 1.5 * report["stats"]["steps_per_s"]
    (data,) = [f for f in batched["findings"] if f["rule"] == "data.loader_wait"]
    assert "indexed out of in-memory tensors" in data["evidence"]
    assert "torch.randperm(n, device='cuda')" in data["fix"] and "num_workers=N" not in data["fix"]
    on_gpu = live_report(capsys, "loader_on_gpu")
    assert on_gpu["stats"]["steps_per_s"] > 1.2 * batched["stats"]["steps_per_s"]
    assert "data.loader_wait" not in {f["rule"] for f in on_gpu["findings"]}


def test_a_lightning_job_fed_from_memory_is_told_so_in_lightnings_words(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The same under a Lightning Trainer: the fix is the DataLoader that
    train_dataloader() returns, and the batched twin runs over 1.4 times the
    steps a second.  There, the data wait is told apart from the function that
    calls trainer.fit (the job's innermost frame in every phase, never the
    loading's code)."""
    report = live_report(capsys, "loader_lightning_w2p")
    assert report["status"]["frameworks"] == ["lightning"]
    top = next(f for f in report["findings"] if f["rule"] == "data.loader_wait")
    assert top["fix"].startswith("the workers keep up")
    assert "from train_dataloader()" in top["fix"]
    batched = live_report(capsys, "loader_lightning_batched_w0")
    assert batched["stats"]["steps_per_s"] > 1.4 * report["stats"]["steps_per_s"]
    (data,) = [f for f in batched["findings"] if f["rule"] == "data.loader_wait"]
    assert "indexed out of in-memory tensors" in data["evidence"]
    assert "loader_handoff.py" not in data["fix"] + data["evidence"]


def test_a_vision_job_is_told_how_many_workers_its_cores_allow(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A torchvision ResNet-50 on an H100 whose 4 DataLoader workers decode JPEGs
    (PIL, RandomResizedCrop) waits 75% of its step on a host that gives it 16
    cores: told to raise num_workers to 15, and about 17 keep up.  The same job
    with 15 workers, recorded right after, runs over 2.5 times the steps a second
    and has no data finding.  Its trace says the batches come from workers."""
    report = live_report(capsys, "vision")
    assert report["hello"]["cpus"] == 16
    top = report["findings"][0]
    assert top["rule"] == "data.loader_wait"
    assert top["fix"].startswith(
        "raise num_workers from 4 to 15 (the job may use 16 CPU cores; about 17 would keep up)"
    )
    assert "Jpegs.__getitem__" in top["fix"]
    fixed = live_report(capsys, "vision_workers15")
    assert fixed["stats"]["steps_per_s"] > 2.5 * report["stats"]["steps_per_s"]
    assert "data.loader_wait" not in {f["rule"] for f in fixed["findings"]}
    (rank,) = json.loads(analyze(capsys, "--json", str(trace("vision"))))["ranks"]
    assert rank["markers"]["loader"] == "workers"
    first = rank["findings"][0]
    assert first["rule"] == "data.loader_wait"
    assert first["fix"].startswith(
        "the training process waits for its workers' batches: if they fall behind"
    )


def test_cudnns_algorithm_search_in_the_window_is_warm_up(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """conv_warmup (H100): three iterations of a small CNN profiled from the
    first, with torch.backends.cudnn.benchmark on.  Each convolution's first
    calls search cuDNN's algorithms for up to seconds while the GPU idles, and
    the window (no step marks) read as an idle GPU between kernels (crit 85%).
    Checked against the raw events: the convolutions named are those whose
    first calls last 20 times their later ones and more."""
    path = CASES / "conv_warmup.pt.trace.json.gz"
    (rank,) = json.loads(analyze(capsys, "--json", str(path)))["ranks"]
    with gzip.open(path) as fh:
        events = [e for e in json.load(fh)["traceEvents"] if e.get("cat") == "cpu_op"]
    for name in ("aten::cudnn_convolution", "aten::convolution_backward"):
        durations = [e["dur"] for e in sorted(events, key=lambda e: e["ts"]) if e["name"] == name]
        first, later = durations[:3], durations[4:]
        assert min(first) > 20 * max(later) and min(first) > 10_000
    sanity = rank["sanity"]
    named = {w["name"]: w["calls"] for w in sanity["warmup_by_name"]}
    assert named["aten::convolution_backward"] >= 3 and named["aten::cudnn_convolution"] >= 3
    lo, hi = rank["window"]["start_us"], rank["window"]["end_us"]
    assert sanity["warmup_us"] > 0.9 * (hi - lo)
    (warning,) = [w for w in rank["warnings"] if "op calls took" in w]
    assert "cuDNN's algorithm search" in warning and "torch.profiler.schedule" in warning
    assert not [f for f in rank["findings"] if f["severity"] != "info"]
    # the synchronizations are the search's (it times each candidate): told so
    (sync,) = [f for f in rank["findings"] if f["rule"] == "sync.host_sync"]
    assert "in aten::convolution_backward, whose first calls were warm-up" in sync["evidence"]
    assert sync["fix"].startswith("the synchronizations inside an op's warm-up calls")
    assert sync["impact_pct"] < 1


def test_one_compiled_helper_in_an_eager_model_gets_the_eager_advice(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """partly_compiled (H100): an eager MLP with one torch.compile'd helper.  The
    compiled region issues under 1% of the step's kernel launches: the launch
    advice is the eager model's, and says how little the compiled code issues."""
    path = CASES / "partly_compiled.pt.trace.json.gz"
    (rank,) = json.loads(analyze(capsys, "--json", str(path)))["ranks"]
    markers = rank["markers"]
    assert markers["compiled"] is True and markers["compiled_launch_share"] < 0.01
    launch = rank["findings"][0]
    assert launch["rule"] == "launch.overhead"
    assert launch["fix"].startswith("launch fewer, larger kernels: torch.compile(model)")
    assert "its regions made under 1% of the kernel launches" in launch["fix"]


def test_with_python_stacks_the_job_is_told_whose_python_it_is(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """numpy_preproc and inference recorded on an H100 with Python stacks: the
    numpy augmentation in the training loop is named where cpu.python's fix
    starts; the eager encoder's Python runs inside its module calls (torch's
    own transformer code), the cost of issuing its ops, and no cpu.python."""
    (rank,) = json.loads(analyze(capsys, "--json", str(trace("numpy_preproc_stack"))))["ranks"]
    python = rank["findings"][0]
    assert python["rule"] == "cpu.python"
    assert python["fix"].startswith("start with augment (analyzer_cases.py:")
    assert "by the trace's Python stack, its largest self times: augment" in python["evidence"]
    assert rank["account"]["model_python_us"] < 0.05 * rank["account"]["python_us"]
    (rank,) = json.loads(analyze(capsys, "--json", str(trace("inference_stack"))))["ranks"]
    acct = rank["account"]
    assert acct["model_python_us"] > 0.8 * acct["python_us"]
    launch = rank["findings"][0]
    assert launch["rule"] == "launch.overhead" and launch["bucket"] == "issue_model"
    assert "the model's Python in its module calls" in launch["evidence"]


def test_a_lightning_stack_names_only_the_training_threads_frames(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Lightning's Trainer recorded with Python stacks (H100): its other threads
    wait on locks and polls for most of each step.  The frames the analyzer
    keeps are the training thread's (checked against the raw events), and
    cpu.python names no function: the largest outside torch's own code hold a
    few percent of its Python.  Lightning's code together holds a third of it:
    the framework's own per-step work, on a step of 6 ms."""
    path = trace("lightning_stack")
    (rank,) = json.loads(analyze(capsys, "--json", str(path)))["ranks"]
    with gzip.open(path) as fh:
        events = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
    (main,) = {e["tid"] for e in events if e["name"].startswith("ProfilerStep#")} - {
        e["tid"] for e in events if e.get("cat") == "gpu_user_annotation"
    }
    on_main = {e["name"] for e in events if e["cat"] == "python_function" and e["tid"] == main}
    elsewhere = {e["name"] for e in events if e["cat"] == "python_function"} - on_main
    frames = [f["name"] for f in rank["sanity"]["python_frames"]]
    assert frames and set(frames) <= on_main and elsewhere
    (python,) = [f for f in rank["findings"] if f["rule"] == "cpu.python"]
    assert "Python stack, its largest self times" not in python["evidence"]
    assert not python["fix"].startswith("start with")
    # but most of it is Lightning's own loop and hooks, spread thin: said so
    packages = {p["name"]: p["us"] for p in rank["sanity"]["python_packages"]}
    assert packages["lightning"] == max(us for name, us in packages.items() if name != "torch")
    assert "the largest part is lightning's code" in python["evidence"]
    assert python["fix"].startswith("the time is lightning's own per-step work")
    assert "log_every_n_steps" in python["fix"]


def test_a_trainer_that_accumulates_is_told_larger_micro_batches(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The Hugging Face Trainer fitting a small BERT with 4 micro-batches of 8 a
    step (H100, one step of the trace): launch-bound, and told that its step
    already accumulates, so the larger batch is a larger micro-batch and fewer
    of them (on the H100 the base BERT took 118-136 ms a step at 16 x 4 and
    82-87 ms at 64 x 1: bench/jobs/library_jobs.py bert_accum_timing).  Counted
    from the raw events: 4 DataLoader fetches and one optimizer step in the
    step.  A Trainer that fetches one batch a step keeps the usual advice."""
    path = trace("hf_trainer_accum")
    (rank,) = json.loads(analyze(capsys, "--json", str(path)))["ranks"]
    with gzip.open(path) as fh:
        events = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
    (step,) = [e for e in events if e["name"].startswith("ProfilerStep#")]
    inside = [
        e for e in events if e["tid"] == step["tid"] and 0 <= e["ts"] - step["ts"] < step["dur"]
    ]
    fetches = [e for e in inside if e["name"].startswith("enumerate(DataLoader)#")]
    optimizer = [e for e in inside if e["name"].startswith("Optimizer.step#")]
    assert (len(fetches), len(optimizer)) == (4, 1)
    assert rank["sanity"]["micro_batches"] == 4
    top = rank["findings"][0]
    assert top["rule"] == "launch.overhead"
    assert "already accumulates gradients over 4 micro-batches" in top["fix"]
    assert "use larger batches per step" not in top["fix"]
    # the control: one batch a step (the GPT-2 Trainer's trace)
    (other,) = json.loads(analyze(capsys, "--json", str(trace("hf_trainer"))))["ranks"]
    assert other["sanity"]["micro_batches"] == 0
    launch = [f for f in other["findings"] if f["rule"] == "launch.overhead"]
    assert all("already accumulates" not in f["fix"] for f in launch)


def test_a_hugging_face_model_on_eager_attention_is_told_its_argument(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A Llama from transformers trained with attn_implementation="eager" (H100,
    one step of the trace): hand-written attention first, the fix names the
    loading argument, and its cost is the GPU time the host waits for (the
    profiler's share of launch and dispatch taken out: without it the host
    reaches its synchronizations sooner).  Unprofiled on the H100 the step took
    52.4-52.5 ms eager and 27.7 ms on SDPA (bench/jobs/library_jobs.py
    llama_timing): the cost said stays under that 47%."""
    (rank,) = json.loads(analyze(capsys, "--json", str(trace("hf_llama_eager"))))["ranks"]
    top = rank["findings"][0]
    assert top["rule"] == "attention.hand_written"
    assert 'attn_implementation="sdpa"' in top["fix"]
    assert 25 <= top["impact_pct"] <= 47


LIBRARY = CASES.parent / "h100-library"


def test_convolutions_in_nchw_are_told_channels_last(capsys: pytest.CaptureFixture[str]) -> None:
    """torchvision's ResNet-50 trained in fp32 at batch 128 on an H100, NCHW and
    channels_last (bench/jobs/library_jobs.py; one step of each trace, whose
    window holds the GPU's backlog of the steps before it: its costs are not
    the job's).  In NCHW cuDNN converts the tensors around each convolution
    (its nchwToNhwc and nhwcToNchw kernels, counted here from the raw events)
    and the fix is channels_last; in channels_last no conversion runs and
    nothing is said.  Unprofiled on the H100: 70.2-70.3 ms a step in NCHW,
    51.7 ms in channels_last, 33.8 ms with bf16 autocast as well."""
    nchw = LIBRARY / "resnet50_fp32_nchw_step.pt.trace.json.gz"
    with gzip.open(nchw) as fh:
        events = json.load(fh)["traceEvents"]
    names = [e["name"].lower() for e in events if e.get("cat") == "kernel"]
    calls = [n for n in names if "nchwtonhwc" in n or "nhwctonchw" in n]
    (rank,) = json.loads(analyze(capsys, "--json", str(nchw)))["ranks"]
    (found,) = [f for f in rank["findings"] if f["rule"] == "kernels.layout_conversion"]
    assert f"in {len(calls):,} calls" in found["evidence"] and len(calls) > 100
    assert "memory_format=torch.channels_last" in found["fix"]
    last = LIBRARY / "resnet50_fp32_channels_last_step.pt.trace.json.gz"
    with gzip.open(last) as fh:
        names = [e.get("name", "").lower() for e in json.load(fh)["traceEvents"]]
    assert not any("nchwtonhwc" in n or "nhwctonchw" in n for n in names)
    (rank,) = json.loads(analyze(capsys, "--json", str(last)))["ranks"]
    assert "kernels.layout_conversion" not in [f["rule"] for f in rank["findings"]]


def test_autocasts_casts_are_not_told_to_be_cast_by_hand(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """timm's ConvNeXt-Tiny trained in bf16 autocast on an H100 (one step,
    bench/jobs/library_jobs.py): its 395 conversions a step are autocast's,
    inside the linear, convolution and layer norm ops (and their gradients'
    inside ToCopyBackward0), counted here from the raw events; the finding says
    so, and does not ask the job to cast once by hand."""
    path = LIBRARY / "timm_convnext_bf16_step.pt.trace.json.gz"
    with gzip.open(path) as fh:
        events = json.load(fh)["traceEvents"]
    ops = sorted(
        (e for e in events if e.get("cat") == "cpu_op"),
        key=lambda e: (e["tid"], e["ts"], -e["dur"]),
    )
    inside = own = 0
    stacks: dict[int, list[dict]] = {}
    for e in ops:
        st = stacks.setdefault(e["tid"], [])
        while st and st[-1]["ts"] + st[-1]["dur"] <= e["ts"]:
            st.pop()
        if e["name"] == "aten::to":
            if st and st[-1]["ts"] + st[-1]["dur"] >= e["ts"] + e["dur"]:
                inside += 1
            else:
                own += 1
        st.append(e)
    assert inside > 300 and own == 0
    (rank,) = json.loads(analyze(capsys, "--json", str(path)))["ranks"]
    (casts,) = [f for f in rank["findings"] if f["rule"] == "copy.frequent_casts"]
    assert f"{inside} conversions per step" in casts["evidence"]
    assert "inside other torch ops (aten::linear, aten::conv2d" in casts["evidence"]
    assert casts["fix"].startswith("nothing to cast by hand: these are autocast's own")


def test_generate_on_its_dynamic_cache_is_told_the_static_one_from_a_trace_without_stacks(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A GPT-2's generate() in bf16 on an H100, profiled with
    ``torch.profiler.profile()`` as a user first tries it (no shapes, no
    stacks; bench/jobs/library_jobs.py generate_dynamic, its first 10 tokens):
    its end-of-sequence checks (aten::isin, counted here from the raw events in
    the analyzer's window) and no index_copy_ into a preallocated cache tell
    generate() on its dynamic cache, and the launch fix is the static cache.
    Without the checks (the same events less them: a decoding loop of the
    job's own) the fix is the generic one."""
    path = LIBRARY / "gpt2_generate_dynamic_10tokens.pt.trace.json.gz"
    with gzip.open(path) as fh:
        trace = json.load(fh)
    events = trace["traceEvents"]
    assert not any(e.get("cat") == "python_function" for e in events)
    (rank,) = json.loads(analyze(capsys, "--json", str(path)))["ranks"]
    window = rank["window"]
    assert window["kind"] == "GPU activity"  # (the trace has no step marks)
    lo, hi = window["start_us"], window["end_us"]
    isin = sum(
        1
        for e in events
        if e.get("cat") == "cpu_op" and e["name"] == "aten::isin" and lo <= e["ts"] < hi
    )
    (launch,) = [f for f in rank["findings"] if f["rule"] == "launch.overhead"]
    assert f"{isin:,} aten::isin calls" in launch["evidence"] and isin >= 16
    assert launch["fix"].startswith("decode with a static KV cache")
    assert "cache_implementation='static'" in launch["fix"]
    trace["traceEvents"] = [e for e in events if e.get("name") != "aten::isin"]
    other = tmp_path / "no_isin.pt.trace.json"
    other.write_text(json.dumps(trace))
    (rank,) = json.loads(analyze(capsys, "--json", str(other)))["ranks"]
    (launch,) = [f for f in rank["findings"] if f["rule"] == "launch.overhead"]
    assert "static KV cache" not in launch["fix"] and "aten::isin" not in launch["evidence"]
    assert launch["fix"].startswith("launch fewer, larger kernels")
