"""The step's time account: exclusive buckets that sum to the step, claimed in
precedence, the same from a trace file as from a capture; the rules that
follow it; and the trace reader's fixes it rests on."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

import gputui.trace.scan as scan_module
from gputui.analysis import engine
from gputui.analysis.rules.account import frame_label
from gputui.analysis.trace_evidence import trace_job_findings
from gputui.analysis.trace_summary import summarize
from gputui.protocol.fields import SchemaError
from gputui.protocol.trace_metrics import (
    ACCOUNT_BUCKETS,
    MAX_OP_NAME,
    MAX_SYNC_OPS,
    StepAccount,
    TraceMetrics,
)
from gputui.trace.account import step_account
from gputui.trace.scan import Scan
from gputui.tracefile.reader import TraceError, read_trace
from tests.helpers.evidence import account, capture, evidence, kernel, op
from tests.helpers.tracegen import ADD, TraceBuilder


def one_step() -> TraceBuilder:
    """A 1,000 µs step with one interval of each bucket, all on the main thread
    but a backward op on the autograd thread."""
    t = TraceBuilder()
    t.step(1, 0, 1000)
    t.op(
        "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 100, cat="user_annotation"
    )
    t.op("nccl:all_reduce", 100, 100)
    t.op("aten::item", 250, 200)  # 200 µs, of which 100 waiting in the sync below
    t.launch(
        300,
        100,
        "Memcpy DtoH (Device -> Pageable)",
        300,
        90,
        cat="gpu_memcpy",
        call="cudaStreamSynchronize",
    )
    t.op("aten::add", 480, 80)  # 80 µs, of which 20 launching
    t.launch(500, 20, ADD, 520, 10)
    t.launch(600, 50, ADD, 650, 5, call="cudaStreamWaitEvent")  # returns at once: not a sync
    t.launch(700, 50, ADD, 760, 5, call="hipDeviceSynchronize")  # HIP's twin: a sync
    t.op("autograd::engine::evaluate_function: AddBackward0", 800, 50, tid=101)
    return t


def account_of(t: TraceBuilder, tmp_path: Path) -> StepAccount:
    acct = step_account(read_trace(t.write(tmp_path / "t.json")).timeline)
    assert acct is not None
    return acct


def test_buckets_sum_to_the_step_in_precedence(tmp_path: Path) -> None:
    acct = account_of(one_step(), tmp_path)
    assert acct.steps == 1 and acct.step_us == 1000
    assert acct.data_us == 100 and acct.comm_us == 100
    assert acct.sync_us == 100 + 50  # cudaStreamSynchronize + hipDeviceSynchronize
    assert acct.launch_us == 20
    # aten::item's 100 µs outside the sync, aten::add's 60 outside the launch, the
    # cudaStreamWaitEvent call (torch's own overhead) and the backward op on its thread
    assert acct.dispatch_us == 100 + 60 + 50 + 50
    assert acct.python_us == 1000 - 100 - 100 - 150 - 20 - 260
    assert sum(acct.bucket_us(b) for b in ACCOUNT_BUCKETS) == pytest.approx(acct.step_us)
    assert acct.sync_calls_per_step == 2  # the wait-event is not counted
    assert acct.largest == "python"


def test_an_async_copy_from_pageable_memory_is_host_sync(tmp_path: Path) -> None:
    t = TraceBuilder()
    t.step(1, 0, 1000)
    t.op("aten::copy_", 100, 800)
    t.launch(
        100,
        800,
        "Memcpy HtoD (Pageable -> Device)",
        120,
        780,
        cat="gpu_memcpy",
        call="cudaMemcpyAsync",
    )
    acct = account_of(t, tmp_path)
    assert acct.sync_us == 800 and acct.launch_us == 0 and acct.launch_calls_per_step == 0


def test_the_account_round_trips_the_wire_and_older_captures_have_none() -> None:
    acct = account(python=0.5, dispatch=0.3)
    metrics = TraceMetrics(account=acct)
    assert TraceMetrics.from_wire(json.loads(json.dumps(metrics.to_wire()))) == metrics
    old = metrics.to_wire()
    del old["account"]
    assert TraceMetrics.from_wire(old).account is None


def test_the_synchronizations_sources_cross_the_wire_bounded() -> None:
    """The ops an account gives its syncs to are untrusted text from a hook: at
    most eight of them, names cut to their limit, counts checked; an older
    hook's account has none (None), and a value of another type is refused."""
    acct = dataclasses.replace(
        account(python=0.5, dispatch=0.3),
        blocking_h2d_per_step=2.0,
        blocking_d2h_per_step=0.0,
        sync_ops_per_step={"aten::copy_": 2.0, "": 1.0},
    )
    wire = json.loads(json.dumps(TraceMetrics(account=acct).to_wire()))
    assert TraceMetrics.from_wire(wire).account == acct
    many = {f"op{i}" + "x" * 5000: float(i) for i in range(20)}
    wire["account"]["sync_ops_per_step"] = many
    got = TraceMetrics.from_wire(wire).account
    assert got is not None and got.sync_ops_per_step is not None
    assert len(got.sync_ops_per_step) == MAX_SYNC_OPS
    assert all(len(name) == MAX_OP_NAME for name in got.sync_ops_per_step)
    for bad in ([1, 2], {"aten::copy_": "2"}, {"aten::copy_": -1.0}):
        wire["account"]["sync_ops_per_step"] = bad
        with pytest.raises(SchemaError):
            TraceMetrics.from_wire(wire)
    for key in ("blocking_h2d_per_step", "blocking_d2h_per_step", "sync_ops_per_step"):
        del wire["account"][key]
    old = TraceMetrics.from_wire(wire).account
    assert old is not None
    assert (old.blocking_h2d_per_step, old.sync_ops_per_step) == (None, None)


def numpy_bound(tmp_path: Path, python_us: float) -> Path:
    """Steps of 10 ms: many tiny kernels launched in ``10_000 - python_us`` µs, the
    rest of the step a Python function outside torch (no op, no launch)."""
    t = TraceBuilder()
    launch_us = 10_000 - python_us
    for n in range(3):
        base = n * 10_000
        t.step(n + 1, base, 10_000)
        for i in range(int(launch_us // 10)):
            ts = base + python_us + i * 10
            t.op("aten::add", ts, 9)
            t.launch(ts + 1, 6, ADD, ts + 7, 2)
    return t.write(tmp_path / f"numpy_{python_us:.0f}.json")


def findings(path: Path) -> list[str]:
    tf = read_trace(path)
    summary = summarize(tf.timeline, 0, "order", str(path), compute_capability="9.0")
    return [f.rule for f in trace_job_findings(summary) if f.severity != "info"]


def test_a_step_held_by_python_is_not_called_launch_bound(tmp_path: Path) -> None:
    """Tiny kernels, the GPU idle: what holds the step decides the finding."""
    python = findings(numpy_bound(tmp_path, 9_000))
    assert python[:1] == ["cpu.python"] and "launch.overhead" not in python
    launching = findings(numpy_bound(tmp_path, 500))
    assert launching[:1] == ["launch.overhead"] and "cpu.python" not in launching


#: the Python frames torch.profiler(with_stack=True, with_modules=True) writes
CALL_IMPL = "torch/nn/modules/module.py(1743): _call_impl"
MODULE = "nn.Module: Block_0"


def python_in(tmp_path: Path, where: str) -> Path:
    """:func:`numpy_bound`'s steps at 6,000 µs of Python, with the trace's Python
    stack: the Python in the loop's own function ("loop"), in the model's forward
    inside its module call ("model"), or in numpy called from the forward
    ("numpy")."""
    t = TraceBuilder()
    for n in range(3):
        base = n * 10_000
        t.step(n + 1, base, 10_000)
        if where == "loop":
            t.op("train.py(10): augment", base, 6_000, cat="python_function")
        else:
            t.op(CALL_IMPL, base, 10_000, cat="python_function")
            t.op(MODULE, base + 1, 9_998, cat="python_function")
            t.op("model.py(20): forward", base + 2, 9_996, cat="python_function")
            if where == "numpy":
                numpy = "numpy/_core/fromnumeric.py(51): _wrapfunc"
                t.op(numpy, base + 3, 5_990, cat="python_function")
        for i in range(400):
            ts = base + 6_000 + i * 10
            t.op("aten::add", ts, 9)
            t.launch(ts + 1, 6, ADD, ts + 7, 2)
    return t.write(tmp_path / f"python_{where}.json")


def test_the_models_python_in_its_module_calls_is_told_apart(tmp_path: Path) -> None:
    """Of the host's time outside every bucket, the part inside a module call of
    the trace's Python stack, less numpy's, is the model's own Python; a trace
    without a module call in its stack has none to tell."""
    loop = account_of_path(python_in(tmp_path, "loop"))
    model = account_of_path(python_in(tmp_path, "model"))
    numpy = account_of_path(python_in(tmp_path, "numpy"))
    assert loop.python_us == model.python_us == numpy.python_us == pytest.approx(6_400, abs=1)
    assert loop.model_python_us is None
    assert model.model_python_us == model.python_us  # all of it inside the module call
    assert numpy.model_python_us == pytest.approx(model.python_us - 5_990, abs=1)
    assert model.model_python_share == pytest.approx(0.64, abs=0.001)
    without = StepAccount.from_wire(model.to_wire() | {"model_python_us": None})
    assert without.model_python_share == 0.0


def account_of_path(path: Path) -> StepAccount:
    acct = step_account(read_trace(path).timeline)
    assert acct is not None
    return acct


def test_the_models_python_is_a_cost_of_issuing_its_ops(tmp_path: Path) -> None:
    """The same 60% of the step in Python: in the loop's function or numpy it is
    Python outside torch; in the model's forward (tiny ops, the GPU idle) it is
    what issuing the model costs, which compiling it takes away."""
    assert findings(python_in(tmp_path, "loop"))[:1] == ["cpu.python"]
    assert findings(python_in(tmp_path, "numpy"))[:1] == ["cpu.python"]
    model = findings(python_in(tmp_path, "model"))
    assert model[:1] == ["launch.overhead"] and "cpu.python" not in model


def test_the_traces_python_stack_names_whose_the_python_is(tmp_path: Path) -> None:
    """The Python frames' self times in the window (their time less the frames,
    ops and calls inside them), by either walk of the nesting; cpu.python names
    the largest of them outside torch, and its fix starts there."""
    loop, model = python_in(tmp_path, "loop"), python_in(tmp_path, "model")
    for walk in (None, "stream"):
        with (
            mock.patch.object(scan_module, "_nest_fast", return_value=None)
            if walk
            else (contextlib.nullcontext())
        ):
            frames = dict(Scan(read_trace(loop).timeline).sanity().python_frames)
            assert frames == {"train.py(10): augment": 18_000.0}
            frames = dict(Scan(read_trace(model).timeline).sanity().python_frames)
            # (the last op ends 1 us after the frame: the frame's child only while it runs)
            assert frames["model.py(20): forward"] == 3 * (9_996 - 400 * 9 + 1)
            assert frames[MODULE] == 3 * 1 and frames[CALL_IMPL] == 3 * 2
    tf = read_trace(loop)
    summary = summarize(tf.timeline, 0, "order", str(loop), compute_capability="9.0")
    (python,) = [f for f in trace_job_findings(summary) if f.rule == "cpu.python"]
    assert python.evidence.endswith(
        "by the trace's Python stack, its largest self times: augment (train.py:10) 60%"
    )
    assert python.fix.startswith("start with augment (train.py:10): make it cheaper")


def test_the_stack_names_the_steps_thread_and_no_waits(tmp_path: Path) -> None:
    """Another thread's frames (a progress bar, a pin-memory loop) are not the
    step's, and a lock's wait on the training thread is a wait (the DataLoader's
    queue), not Python's work: neither is named, by either walk."""
    t = TraceBuilder()
    lock = "<built-in method acquire of _thread.lock object at 0x7f9d48302dc0>"
    for n in range(3):
        base = n * 10_000
        t.step(n + 1, base, 10_000)
        t.op("train.py(10): augment", base, 3_000, cat="python_function")
        t.op(lock, base + 3_000, 3_000, cat="python_function")
        t.op("tqdm/std.py(1): refresh", base, 9_000, cat="python_function", tid=101)
        for i in range(400):
            ts = base + 6_000 + i * 10
            t.op("aten::add", ts, 9)
            t.launch(ts + 1, 6, ADD, ts + 7, 2)
    path = t.write(tmp_path / "threads.json")
    for patched in (False, True):
        with (
            mock.patch.object(scan_module, "_nest_fast", return_value=None)
            if patched
            else (contextlib.nullcontext())
        ):
            frames = dict(Scan(read_trace(path).timeline).sanity().python_frames)
        assert frames == {"train.py(10): augment": 9_000.0, lock: 9_000.0}
    summary = summarize(read_trace(path).timeline, 0, "order", str(path), compute_capability="9.0")
    (python,) = [f for f in trace_job_findings(summary) if f.rule == "cpu.python"]
    assert "augment (train.py:10) 30%" in python.evidence
    assert "acquire" not in python.evidence and "refresh" not in python.evidence


def test_a_record_function_opened_in_one_frame_is_the_callers_child(tmp_path: Path) -> None:
    """torch's optimizer step opens its record_function range in one frame's
    __enter__ and closes it in another's __exit__: the range outlasts the frame
    that opened it.  It is that frame's child only while the frame runs, and
    the wrapper's for the rest, not the wrapper's own Python."""
    t = TraceBuilder()
    t.step(1, 0, 2_000)
    t.op("torch/optim/optimizer.py(512): wrapper", 0, 1_000, cat="python_function")
    t.op("torch/autograd/profiler.py(854): __enter__", 10, 30, cat="python_function")
    t.op("Optimizer.step#AdamW.step", 26, 954, cat="user_annotation")
    t.op("torch/optim/adam.py(1): step", 100, 800, cat="python_function")
    t.op("torch/autograd/profiler.py(860): __exit__", 980, 15, cat="python_function")
    t.launch(1_500, 6, ADD, 1_510, 2)
    frames = dict(Scan(read_trace(t.write(tmp_path / "rf.json")).timeline).sanity().python_frames)
    assert frames == {
        "torch/optim/optimizer.py(512): wrapper": 1_000 - 30 - (980 - 40) - 15,
        "torch/autograd/profiler.py(854): __enter__": 30 - (40 - 26),
        "torch/optim/adam.py(1): step": 800,
        "torch/autograd/profiler.py(860): __exit__": 15,
    }


def test_python_spread_over_one_packages_functions_names_the_package(tmp_path: Path) -> None:
    """No function holds a quarter of the Python, but one package's functions
    together do: the package is named, and the fix starts there."""
    t = TraceBuilder()
    for n in range(3):
        base = n * 10_000
        t.step(n + 1, base, 10_000)
        for k in range(12):
            t.op(f"mylib/part{k}.py(1): work", base + k * 500, 500, cat="python_function")
        for i in range(400):
            ts = base + 6_000 + i * 10
            t.op("aten::add", ts, 9)
            t.launch(ts + 1, 6, ADD, ts + 7, 2)
    path = t.write(tmp_path / "spread.json")
    summary = summarize(read_trace(path).timeline, 0, "order", str(path), compute_capability="9.0")
    assert summary.sanity.python_packages == (("mylib", 18_000.0),)
    (python,) = [f for f in trace_job_findings(summary) if f.rule == "cpu.python"]
    assert "the largest part is mylib's code (60% of the step)" in python.evidence
    assert python.fix.startswith("start with mylib's code")
    # a package that waits (the DataLoader's worker pipes) is never named
    waiting = dataclasses.replace(summary.sanity, python_packages=(("multiprocessing", 18_000.0),))
    (python,) = [
        f
        for f in trace_job_findings(dataclasses.replace(summary, sanity=waiting))
        if f.rule == "cpu.python"
    ]
    assert "largest part is" not in python.evidence
    assert not python.fix.startswith("start with")


FRAME_LABELS = [
    (
        "transformers/image_transforms.py(390): normalize",
        "normalize (transformers/image_transforms.py:390)",
    ),
    (
        "<built-in method astype of numpy.ndarray object at 0x7cbf780f01b0>",
        "numpy.ndarray.astype",
    ),
    ("<built-in function array>", "array (built-in)"),
    ("odd frame", "odd frame"),
]


@pytest.mark.parametrize(("name", "label"), FRAME_LABELS)
def test_a_frame_of_the_stack_reads_as_function_and_place(name: str, label: str) -> None:
    assert frame_label(name) == label


def test_a_frames_text_is_sanitized() -> None:
    """The trace's text is the job's: no terminal escape reaches the screen."""
    label = frame_label("evil.py(1): \x1b[2J\x1b]0;owned\x07gone")
    assert label.endswith(" (evil.py:1)")
    assert not any(ord(c) < 32 or ord(c) == 127 for c in label)


def test_kernel_rules_claim_only_gpu_busy_time() -> None:
    """A step whose GPU is busy 1% cannot lose half of it to elementwise kernels."""
    cap = capture(
        [kernel(ADD, "elementwise", 10, 11.0)],
        span_us=11.0,
        account=account(step_us=33_700.0, gpu_busy=11.0 / 33_700.0, dispatch=0.1),
    )
    rules = {f.rule: f for f in engine.analyze(evidence(cap=cap))}
    assert "kernels.elementwise_bound" not in rules
    assert rules["cpu.python"].impact_pct is not None and rules["cpu.python"].impact_pct > 80


def test_communication_share_never_reads_over_100_percent() -> None:
    nccl = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
    cap = capture(
        [kernel(nccl, "communication", 10, 127_000.0)], span_us=100_000.0, busy_us=100_000.0
    )
    (f,) = [f for f in engine.analyze(evidence(cap=cap)) if f.rule == "comm.share"]
    assert "100% of the capture" in f.evidence and (f.impact_pct or 0) <= 100


def test_communication_costs_no_more_than_the_host_waits_for_it() -> None:
    """An NCCL kernel spinning for a slower rank (most of the GPU timeline) while
    this host runs ahead: the cost is the time the host waits, not the kernel's."""
    nccl = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
    spins = [kernel(nccl, "communication", 10, 90_000.0)]
    waits = account(step_us=20_000.0, gpu_busy=0.95, comm=0.02, sync=0.03, launch=0.01)
    (f,) = [
        f
        for f in engine.analyze(evidence(cap=capture(spins, busy_us=95_000.0, account=waits)))
        if f.rule == "comm.share"
    ]
    assert f.impact_pct == pytest.approx(6.0, abs=0.5)
    assert "the host waits on communication and the GPU 6% of the step" in f.evidence
    # control: the same kernels without an account keep their exposed share
    (g,) = [
        f
        for f in engine.analyze(evidence(cap=capture(spins, busy_us=95_000.0)))
        if f.rule == "comm.share"
    ]
    assert (g.impact_pct or 0) > 50 and "host waits" not in g.evidence


def fp32_findings(ev: Any) -> list[Any]:
    return [f for f in engine.analyze(ev) if f.rule == "precision.fp32_matmul"]


def test_below_ampere_the_advice_is_fp16_not_tf32() -> None:
    """TF32 and bf16 came with Ampere (8.0); a V100 or T4 (7.x) has FP16 tensor
    cores only, and a P100 (6.0) none."""
    sgemm = "volta_sgemm_128x64_nn"
    cap = capture([kernel(sgemm, "gemm", 100, 50_000.0)], busy_us=90_000.0)
    (a100,) = fp32_findings(evidence(cap=cap))
    assert "set_float32_matmul_precision('high')" in a100.fix
    for cc in ("7.0", "7.5"):
        (f,) = fp32_findings(evidence(cap=cap, compute_capability=cc))
        assert "dtype=torch.float16" in f.fix and "GradScaler" in f.fix
        assert "tf32" not in f.fix.lower() and "bf16" not in f.fix
        assert f"compute capability {cc}" in f.evidence
    assert fp32_findings(evidence(cap=cap, compute_capability="6.0")) == []
    (lightning,) = fp32_findings(
        evidence(cap=cap, compute_capability="7.5", frameworks=("lightning",))
    )
    assert "Trainer(precision='16-mixed')" in lightning.fix


def test_fp32_convolutions_count_where_fp16_is_the_tensor_cores_only_path() -> None:
    """cuDNN's FP32 convolution engines (a ResNet's backward on a T4) are the
    FP32 work on a 7.x GPU; their FP16 ones are not FP32, and on Ampere the
    finding stays with GEMMs (cuDNN uses TF32 for convolutions by default)."""
    fp32_conv = [
        kernel(
            "void cudnn::cnn::wgrad_alg1_engine<float, float, 512, 6, 5>(int)", "conv", 50, 30_000.0
        ),
        kernel("void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3>(int)", "conv", 50, 20_000.0),
        kernel("cudnn_turing_scudnn_128x64_stridedB_splitK_xregs_large_nn_v1", "conv", 9, 9_000.0),
    ]
    fp16_conv = [
        kernel(
            "void cudnn::cnn::wgrad_alg1_engine<__half, float, 512, 6, 5>(int)",
            "conv",
            50,
            30_000.0,
        ),
        kernel(
            "volta_fp16_s884cudnn_fp16_128x128_ldg8_relu_f2f_exp_small_nhwc_tn_v1",
            "conv",
            50,
            29_000.0,
        ),
    ]
    other = [
        kernel(
            "vectorized_elementwise_kernel<4, CUDAFunctor_add<float>>", "elementwise", 90, 30_000.0
        )
    ]
    (t4,) = fp32_findings(
        evidence(cap=capture([*fp32_conv, *other], busy_us=89_000.0), compute_capability="7.5")
    )
    assert t4.title == "matrix products and convolutions run in full FP32"
    assert "convolutions on the CUDA cores take 66% of kernel time" in t4.evidence
    assert "wgrad_alg1_engine" in t4.evidence
    half = capture([*fp16_conv, *other], busy_us=89_000.0)
    assert fp32_findings(evidence(cap=half, compute_capability="7.5")) == []
    convs = capture([*fp32_conv, *other], busy_us=89_000.0)
    assert fp32_findings(evidence(cap=convs, compute_capability="8.0")) == []


def test_host_side_ops_with_a_stream_are_not_gpu_activity(tmp_path: Path) -> None:
    t = TraceBuilder()
    t.step(1, 0, 1000)
    t.op("triton_poi_fused_add_0", 100, 50)
    t.events[-1]["args"]["stream"] = 0  # Triton's host-side launcher carries one
    t.launch(160, 10, "triton_poi_fused_add_0", 175, 2, call="cuLaunchKernel")
    tl = read_trace(t.write(tmp_path / "triton.json")).timeline
    assert [a.name for a in tl.gpu] == ["triton_poi_fused_add_0"]
    assert tl.gpu[0].dur_ns == 2000


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("[[-1, 1, 37888, 7], [-1, 1, 512, 7]]", "none of its 2 entries is an event object"),
        ("[]", "a trace with no events"),
        ('{"traceEvents": []}', "a trace with no events"),
    ],
)
def test_json_that_is_not_a_trace_is_refused(tmp_path: Path, content: str, says: str) -> None:
    path = tmp_path / "x.json"
    path.write_text(content)
    with pytest.raises(TraceError, match=says):
        read_trace(path)


def test_sdpa_math_says_why_flash_was_not_eligible_from_the_shapes() -> None:
    from tests.helpers.evidence import op_row
    from tests.unit.test_rules import attention_capture

    sdpa = op_row(
        "aten::scaled_dot_product_attention",
        [[4, 8, 2048, 320], [4, 8, 2048, 320], [4, 8, 2048, 320], [4, 1, 2048, 2048]],
        "float",
        3,
        30_000.0,
    )
    math = op_row("aten::_scaled_dot_product_attention_math", [[4, 8, 2048, 320]], "float", 3, 1.0)
    cap = dataclasses.replace(attention_capture(20_000.0), op_rows=(sdpa, math))
    (f,) = [f for f in engine.analyze(evidence(cap=cap)) if f.rule == "attention.sdpa_math"]
    assert "fp32 inputs" in f.evidence and "head dim 320 (flash takes at most 256)" in f.evidence
    assert "an attn_mask (4x1x2048x2048: flash takes none; if it is the causal" in f.evidence
    bare = attention_capture(20_000.0, op("aten::_scaled_dot_product_attention_math", 3, 5.0))
    (g,) = [f for f in engine.analyze(evidence(cap=bare)) if f.rule == "attention.sdpa_math"]
    assert "the capture has no input shapes: record the input shapes" in g.evidence


def test_hand_written_attention_sizes_the_score_matrix_from_the_shapes() -> None:
    from tests.helpers.evidence import op_row
    from tests.unit.test_rules import attention_capture

    qk = op_row("aten::bmm", [[32, 4096, 64], [32, 64, 4096]], "c10::BFloat16", 3, 5_000.0)
    cap = dataclasses.replace(attention_capture(30_000.0), op_rows=(qk,))
    (f,) = [f for f in engine.analyze(evidence(cap=cap)) if f.rule == "attention.hand_written"]
    assert "T = 4,096" in f.evidence and "1.0GiB" in f.evidence  # 32 x 4096^2 x 2 bytes
    # shapes recorded, but no T x T product among them: not attention
    mlp = op_row("aten::mm", [[256, 1024], [1024, 4096]], "c10::BFloat16", 3, 5_000.0)
    other = dataclasses.replace(attention_capture(30_000.0), op_rows=(mlp,))
    assert "attention.hand_written" not in [f.rule for f in engine.analyze(evidence(cap=other))]


def test_cpu_python_names_the_jobs_functions_from_the_sampler() -> None:
    from gputui.protocol.profile import PathFrame, ProfileFunction, PythonProfile

    profile = PythonProfile(
        sampled_s=10.0,
        samples=1000,
        functions=(
            ProfileFunction(
                "/home/u/proj/data.py",
                "augment",
                line=12,
                site_s=7.1,
                self_s=0.2,
                phases_s={"other": 0.2},
            ),
            ProfileFunction(
                "/venv/lib/python3.11/site-packages/numpy/core.py",
                "sort",
                kind="lib",
                line=7,
                self_s=6.9,
                phases_s={"other": 6.9},
                path=(0,),
            ),
            ProfileFunction(
                "/home/u/proj/train.py",
                "log",
                line=40,
                site_s=0.05,
                self_s=0.05,
                phases_s={"other": 0.05},
            ),
        ),
        frames=(PathFrame("/home/u/proj/data.py", "augment", 13),),
    )
    cap = capture(account=account(dispatch=0.1, launch=0.05))
    ev = dataclasses.replace(evidence(cap=cap), python_profile=profile)
    (f,) = [f for f in engine.analyze(ev) if f.rule == "cpu.python"]
    # the library's function, with the job's own that called it, and the job's own
    assert "sort (core.py:7) 69%, called from augment (data.py:13)" in f.evidence
    assert "augment (data.py:12) 2%" in f.evidence
    assert "log (" not in f.evidence  # under 1% of the time: not named
    assert "py-spy" not in f.fix  # the function is named: no profiler needed
    assert f.fix.startswith("start with sort (core.py:7), called from augment (data.py:13)")


def test_torch_s_own_code_between_its_ops_is_torch_s(tmp_path: Path) -> None:
    """torch.optim's step range and the autograd engine's time between the
    backward functions it runs are torch's own host code: torch dispatch, not
    Python outside torch.  A range of the job's own around the same ops, an
    engine gap in which another op starts and one longer than 1 ms stay Python."""

    def trace(name: str, gaps: tuple[float, ...]) -> TraceBuilder:
        t = TraceBuilder()
        t.step(1, 0, 10_000)
        t.op(name, 1000, 1000, cat="user_annotation")  # 100 µs of ops inside it
        t.op("aten::_foreach_add_", 1100, 100)
        at = 3000.0
        for gap in gaps:  # backward functions on the autograd thread, 50 µs each
            t.op("autograd::engine::evaluate_function: AddBackward0", at, 50, tid=101)
            at += 50 + gap
        t.op("autograd::engine::evaluate_function: MulBackward0", at, 50, tid=101)
        return t

    torch_own = account_of(trace("Optimizer.step#AdamW.step", (20, 30)), tmp_path)
    own = account_of(trace("## my_region ##", (20, 30)), tmp_path)
    # the ops' 100 + 3 x 50 µs, and the engine's 20 + 30 µs between its functions
    assert own.dispatch_us == pytest.approx(250 + 50)
    assert own.python_us == pytest.approx(10_000 - 300)
    # the optimizer's 900 µs between its ops
    assert torch_own.dispatch_us - own.dispatch_us == pytest.approx(900)
    assert own.python_us - torch_own.python_us == pytest.approx(900)
    # the arithmetic of overlapping steps gives the same
    with mock.patch("gputui.trace.account.pairwise", lambda _host: [((0, 2), (1, 3))]):
        general = account_of(trace("Optimizer.step#AdamW.step", (20, 30)), tmp_path)
    assert general.dispatch_us == pytest.approx(torch_own.dispatch_us)
    assert general.python_us == pytest.approx(torch_own.python_us)
    far = account_of(trace("## my_region ##", (20, 1500)), tmp_path)
    assert far.dispatch_us - own.dispatch_us == pytest.approx(-30)  # the 1.5 ms gap is not
    # an op of another thread starting in a gap: that gap is not the engine's alone
    t = trace("## my_region ##", (20, 30))
    t.op("aten::mul", 3130, 5)  # in the 30 µs gap (3120-3150)
    busy = account_of(t, tmp_path)
    assert busy.dispatch_us - own.dispatch_us == pytest.approx(5 - 30)


def test_a_sources_wait_counts_calls_at_once_on_two_threads_once() -> None:
    """Synchronizing calls of one source that overlap (an engine thread's event
    wait and another thread's device-wide synchronization, as in a vLLM trace)
    wait the union of their times, as the account's sync bucket counts it:
    never more than the window."""
    from gputui.trace.account import _per_op

    calls = [(0, 100, "cudaEventSynchronize", 1), (50, 120, "cudaDeviceSynchronize", 2)]
    calls += [(200, 230, "cudaStreamSynchronize", 1), (210, 220, "cudaStreamSynchronize", 2)]
    calls += [(300, 310, "cudaStreamSynchronize", 1)]
    counts, waited = _per_op(["", "", "", "", "aten::item"], calls, 1)
    assert counts == {"": 4, "aten::item": 1}
    assert waited == {"": 120 + 30, "aten::item": 10}


def test_python_frames_of_equal_time_keep_the_order_they_first_appear(tmp_path: Path) -> None:
    """Ties keep the trace's order, not a set's: Python orders a set of strings
    by their hashes, which change from one run to the next (a public
    SwitchTransformers trace listed its packages in one order or another)."""
    t = TraceBuilder()
    t.step(1, 0, 20_000)
    names = [f"pkg{k}/mod.py(1): work" for k in (7, 3, 11, 0, 9, 5, 1, 10, 2, 8, 4, 6)]
    for k, name in enumerate(names):
        t.op(name, k * 1_000, 500, cat="python_function")
    t.launch(15_000, 6, ADD, 15_010, 2)
    sanity = Scan(read_trace(t.write(tmp_path / "ties.json")).timeline).sanity()
    assert [name for name, _ in sanity.python_frames] == names[: len(sanity.python_frames)]
    assert [name for name, _ in sanity.python_packages] == [
        n.split("/")[0] for n in names[: len(sanity.python_packages)]
    ]
