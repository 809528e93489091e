"""Model and hardware FLOPs of a whole capture (the MFU's numerator), against a
hand count of a transformer block from its shapes.

The block: pre-norm attention (qkv, SDPA, output projection) and an MLP (D -> 4D
-> D), trained one step on the CPU under torch.profiler with shapes, the capture
the hook takes.  The hand count, from the shapes alone:

- each linear layer, forward: 2·m·n·k with m = B·T tokens; four layers of
  widths 3D, D, 4D (from D) and D (from 4D): 2·BT·D²·(3 + 1 + 4 + 4) = 24·BT·D²;
- SDPA forward: 4·B·H·T²·d (d = D/H: q·kᵀ and the product with v), half if causal;
- backward: twice the forward (the gradients of both operands of each product);
- hardware FLOPs add the scores that the fused attention backward recomputes
  (2·B·H·T²·d, half if causal) and, with activation checkpointing, the whole
  forward again.
"""

from __future__ import annotations

import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputui.protocol.op_rows import FlopTotals
from gputui.trace import op_costs
from gputui.trace.op_rows import ops_from_kineto, rows_from_chrome_trace

B, T, D, H = 2, 128, 64, 4
HEAD = D // H
#: the tolerance the count must meet (relative)
TOLERANCE = 0.05


def _torch():  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pytest.importorskip("torch")


def _block(torch, causal: bool):  # type: ignore[no-untyped-def]
    fn = torch.nn.functional

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1 = torch.nn.LayerNorm(D)
            self.ln2 = torch.nn.LayerNorm(D)
            self.qkv = torch.nn.Linear(D, 3 * D)
            self.out = torch.nn.Linear(D, D)
            self.up = torch.nn.Linear(D, 4 * D)
            self.down = torch.nn.Linear(4 * D, D)

        def forward(self, x):  # type: ignore[no-untyped-def]
            q, k, v = self.qkv(self.ln1(x)).split(D, -1)
            q, k, v = (t.view(B, T, H, HEAD).transpose(1, 2) for t in (q, k, v))
            a = fn.scaled_dot_product_attention(q, k, v, is_causal=causal)
            x = x + self.out(a.transpose(1, 2).reshape(B, T, D))
            return x + self.down(fn.gelu(self.up(self.ln2(x))))

    return Block()


def _hand_count(causal: bool, checkpointed: bool) -> tuple[float, float]:
    tokens = B * T
    linear_fwd = 2.0 * tokens * D * (3 * D) + 2.0 * tokens * D * D
    linear_fwd += 2.0 * tokens * D * (4 * D) + 2.0 * tokens * (4 * D) * D
    half = 0.5 if causal else 1.0
    sdpa_fwd = 4.0 * B * H * T * T * HEAD * half
    forward = linear_fwd + sdpa_fwd
    model = forward + 2.0 * forward
    hardware = model + 2.0 * B * H * T * T * HEAD * half  # flash backward's q·kᵀ
    if checkpointed:
        hardware += forward
    return model, hardware


def _capture(causal: bool, checkpointed: bool, trace_path: str | None = None) -> list[object]:
    torch = _torch()
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    block = _block(torch, causal)
    x = torch.randn(B, T, D, requires_grad=True)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True
    ) as prof:
        y = checkpoint(block, x, use_reentrant=False) if checkpointed else block(x)
        y.sum().backward()
    if trace_path is not None:
        prof.export_chrome_trace(trace_path)
    return list(prof.profiler.kineto_results.events())


def _close(value: float, expected: float) -> bool:
    return abs(value - expected) <= TOLERANCE * expected


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("checkpointed", [False, True], ids=["plain", "checkpoint"])
def test_capture_flops_match_the_hand_count(causal: bool, checkpointed: bool) -> None:
    _rows, totals = ops_from_kineto(_capture(causal, checkpointed))
    model, hardware = _hand_count(causal, checkpointed)
    assert _close(totals.model, model), (totals.model, model)
    assert _close(totals.hardware, hardware), (totals.hardware, hardware)
    assert totals.dtype == "fp32"
    assert totals.unknown == 0
    # the recomputed forward is hardware only, and only under checkpointing
    assert (totals.recomputed > 0) == checkpointed


def test_attention_is_part_of_the_count() -> None:
    """Leaving SDPA out would miss the hand count by more than the tolerance."""
    model, _ = _hand_count(causal=False, checkpointed=False)
    _rows, totals = ops_from_kineto(_capture(causal=False, checkpointed=False))
    sdpa = 3 * 4.0 * B * H * T * T * HEAD
    assert sdpa > TOLERANCE * model
    assert _close(totals.model, model)


def test_a_chrome_trace_gives_the_same_totals(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    path = str(tmp_path / "block.json")
    _rows, live = ops_from_kineto(_capture(True, True, trace_path=path))
    with open(path) as fh:
        trace = json.load(fh)
    from gputui.trace.op_rows import ChromeTraceOps

    ops = ChromeTraceOps()
    ops.add(trace["traceEvents"])
    from_file = ops.totals()
    assert from_file is not None
    assert from_file.model == pytest.approx(live.model)
    assert from_file.hardware == pytest.approx(live.hardware)
    assert rows_from_chrome_trace(trace)  # and the rows are still there


def test_fused_attention_backward_splits_model_and_recompute() -> None:
    shape = (2, 4, 128, 16)
    dims = (shape, shape, shape, shape)
    types = ("c10::BFloat16",) * 4
    name = "aten::_scaled_dot_product_flash_attention_backward"
    concrete = [""] * 11 + ["True"]
    model, hardware = op_costs.model_flops(name, dims, types, concrete) or (0.0, 0.0)
    fwd = 4.0 * 2 * 4 * 128 * 128 * 16 / 2
    assert model == pytest.approx(2 * fwd)
    assert hardware == pytest.approx(2 * fwd + fwd / 2)


def test_elementwise_ops_are_not_model_flops() -> None:
    assert op_costs.model_flops("aten::add", ((4, 4), (4, 4)), ("float", "float")) is None


def test_convolution_backward_counts_both_gradients() -> None:
    grad, x, w = (2, 8, 16, 16), (2, 3, 16, 16), (8, 3, 3, 3)
    dims = (grad, x, w)
    types = ("float",) * 3
    fwd = 2.0 * 2 * 8 * 16 * 16 * 3 * 3 * 3
    assert op_costs.estimate_flops("aten::convolution_backward", dims, types) == 2 * fwd
    mask = [""] * 10 + ["[False, True, True]"]
    assert op_costs.estimate_flops("aten::convolution_backward", dims, types, mask) == fwd


def test_flop_totals_round_trip_the_wire() -> None:
    totals = FlopTotals(3e12, 4e12, (("bf16", 2.5e12), ("fp32", 0.5e12)), 1e12, 10, 1)
    back = FlopTotals.from_wire(totals.to_wire())
    assert back == totals and back.dtype == "bf16"


def _cpu_op(name: str, ts: float, dur: float, ext: int, dims: list[list[int]]) -> dict:
    args = {"External id": ext, "Input Dims": dims, "Input type": ["float"] * len(dims)}
    return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur, "args": args}


def test_a_traces_step_flops_count_the_ops_inside_its_steps() -> None:
    """``gputui analyze``'s MFU: the matrix products that start inside the
    trace's host ProfilerStep ranges, over their number; an op before the first
    step (warm-up, a forward outside the loop) is not one of them, and the GPU
    mirror of a step mark is not a step."""
    from gputui.trace.op_rows import ChromeTraceOps

    mm = [[64, 32], [32, 16]]  # 2*64*32*16 = 65,536 FLOPs
    step = {"ph": "X", "cat": "user_annotation", "args": {"External id": 1}}
    events = [
        _cpu_op("aten::mm", 10.0, 5.0, 2, mm),  # before the steps
        {**step, "name": "ProfilerStep#4", "ts": 100.0, "dur": 50.0},
        {**step, "name": "ProfilerStep#5", "ts": 150.0, "dur": 50.0},
        {**step, "cat": "gpu_user_annotation", "name": "ProfilerStep#5", "ts": 160.0, "dur": 60.0},
        _cpu_op("aten::mm", 110.0, 5.0, 3, mm),
        _cpu_op("aten::mm", 160.0, 5.0, 4, mm),
        _cpu_op("aten::mm", 170.0, 5.0, 5, mm),
    ]
    ops = ChromeTraceOps()
    ops.add(events)
    found = ops.step_totals()
    assert found is not None
    totals, steps = found
    assert steps == 2 and totals.model == 3 * 65536 and totals.ops == 3
    whole = ops.totals()
    assert whole is not None and whole.model == 4 * 65536
    without_marks = ChromeTraceOps()
    without_marks.add([e for e in events if not e["name"].startswith("ProfilerStep")])
    assert without_marks.step_totals() == (whole, 1)  # one step: the whole trace


@settings(max_examples=500)
@given(
    st.lists(st.tuples(st.integers(-5, 60), st.integers(0, 30)), max_size=8),
    st.lists(st.integers(-10, 100), max_size=40),
)
def test_the_steps_check_of_every_op_start_is_the_plain_definition(
    spans_raw: list[tuple[int, int]], times: list[int]
) -> None:
    """Whether every op starts inside a step: the check that skips the search
    for times in the stretch of the last span found says what a search per
    time says, with steps that overlap, touch, share a start or are empty."""
    import bisect

    from gputui.trace.op_rows import _all_inside

    spans = sorted((lo, lo + d) for lo, d in spans_raw)
    starts = [lo for lo, _hi in spans]

    def inside(t: int) -> bool:
        i = bisect.bisect_right(starts, t) - 1
        return i >= 0 and t < spans[i][1]

    assert _all_inside(times, spans) == all(map(inside, times))
    assert _all_inside(sorted(times), spans) == all(map(inside, times))
