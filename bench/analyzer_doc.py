"""Write the generated parts of docs/analyzer.md from the code and real data.

    .venv/bin/python bench/analyzer_doc.py           # rewrite the generated sections
    .venv/bin/python bench/analyzer_doc.py --check   # exit 1 when the file is stale

- ``rules``: one row per registered rule (job, device and rank rules): its
  trigger and thresholds (the registry's own words, filled from the thresholds
  table) and the least evidence it speaks from, what it said on the test case
  that fires it (evidence and fix, run now), its source, and that test.
- ``thresholds``: the table of every threshold (gputui/analysis/thresholds.py)
  with the rules whose trigger names it.
- ``scenarios``: what the analyzer says about each planted-bottleneck job
  recorded on an H100 (tests/data/h100/, bench/scenarios/): the top findings
  with their cost and fix, computed now from the recordings.

Each section sits between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->``;
the rest of the page is written by hand.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from gputui.analysis import engine  # noqa: E402
from gputui.analysis.finding import Finding  # noqa: E402
from gputui.analysis.monitor_findings import findings as device_findings  # noqa: E402
from gputui.analysis.registry import REGISTRY  # noqa: E402

DOC = REPO / "docs" / "analyzer.md"
#: the scenarios recorded on the H100, the cause planted in each, and what it is
SCENARIOS = [
    ("dataloader", "data.loader_wait", "DataLoader without workers, slow decode"),
    ("host_sync", "sync.host_sync", "loss.item() and torch.cuda.synchronize() every step"),
    ("launch_bound", "launch.overhead", "a deep stack of tiny layers, batch 8"),
    ("pageable_copy", "copy.pageable", "large host batches from pageable memory"),
    ("fp32_matmul", "precision.fp32_matmul", "FP32 matmuls with TF32 off"),
    ("elementwise", "gpu.memory_bound", "a chain of elementwise ops on large tensors"),
    ("memory_growth", "memory.growth", "activations kept in a list every step"),
    ("healthy", None, "a bf16 transformer, done right"),
]


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _test_names() -> dict[str, str]:
    """rule id -> the test that fires it."""
    from tests.unit.test_monitor_findings import DEVICE_CASES
    from tests.unit.test_rank_rules import CASES as RANK_CASES
    from tests.unit.test_rules import CASES

    names = {r: f"`test_rules.py::test_rule_fires[{r}]`" for r in CASES}
    names.update({r: "`test_monitor_findings.py::DEVICE_CASES`" for r in DEVICE_CASES})
    names.update({r: f"`test_rank_rules.py::test_rank_rule_fires[{r}]`" for r in RANK_CASES})
    return names


def _examples() -> dict[str, Finding]:
    """rule id -> what it says on its firing test case."""
    from tests.unit.test_monitor_findings import DEVICE_CASES
    from tests.unit.test_rank_rules import CASES as RANK_CASES
    from tests.unit.test_rules import CASES

    out: dict[str, Finding] = {}
    for rule_id, (fires, _quiet) in CASES.items():
        out[rule_id] = next(f for f in engine.analyze(fires()) if f.rule == rule_id)
    for rule_id, case in DEVICE_CASES.items():
        out[rule_id] = next(f for f in device_findings(case()) if f.rule == rule_id)
    for rule_id, (fires, _quiet) in RANK_CASES.items():
        out[rule_id] = next(f for f in engine.analyze_ranks(fires()) if f.rule == rule_id)
    return out


def rules_section() -> str:
    tests = _test_names()
    examples = _examples()
    lines = []
    families = sorted({r.family for r in REGISTRY.values()})
    scopes = (
        ("job", "Job rules"),
        ("device", "Device rules (the monitor)"),
        ("ranks", "Rank rules (the local ranks of a multi-rank job)"),
    )
    for scope, title in scopes:
        lines.append(f"### {title}\n")
        lines.append("| rule | fires when | says (on its test case) | fix | source | test |")
        lines.append("| --- | --- | --- | --- | --- | --- |")
        for family in families:
            for r in sorted(
                (r for r in REGISTRY.values() if r.scope == scope and r.family == family),
                key=lambda r: r.id,
            ):
                ex = examples.get(r.id)
                says = "" if ex is None else f"**{ex.severity}** {ex.title}: {ex.evidence}"
                needs = r.minimum.words if r.scope == "job" else ""
                when = r.trigger + (f" (needs at least {needs})" if needs else "")
                lines.append(
                    f"| `{r.id}` | {_cell(when)} | {_cell(says)} | "
                    f"{_cell(ex.fix if ex else '')} | {_cell(r.source)} | "
                    f"{tests.get(r.id, '**none**')} |"
                )
        lines.append("")
    return "\n".join(lines)


def scenarios_section() -> str:
    from gputui.recording.replay import read_recording
    from tests.integration.test_analyzer_h100 import DATA, scenario

    _header, snaps = read_recording(DATA / "monitor-scenarios.jsonl.gz")
    snapshots = list(snaps)
    lines = [
        "| scenario (planted) | gputui's findings, ranked | cost (% / ms per step) | first fix |",
        "| --- | --- | --- | --- |",
    ]
    for name, cause, planted in SCENARIOS:
        found = engine.analyze(scenario(name, snapshots))
        shown = [f for f in found if f.severity != "info" or f.rule == cause][:3]
        ranked = "<br>".join(
            f"{i + 1}. `{f.rule}` ({f.severity}): {_cell(f.evidence)}" for i, f in enumerate(shown)
        )
        top = shown[0] if shown else None
        cost = (
            ""
            if top is None or top.impact_pct is None
            else f"{top.impact_pct:.0f}% / {top.impact_ms:.1f} ms"
        )
        first = "nothing costly: no warn or crit finding" if top is None else _cell(top.fix)
        lines.append(f"| **{name}** ({planted}) | {ranked or 'none'} | {cost} | {first} |")
    return "\n".join(lines) + "\n"


#: jobs recorded by bench/jobs/analyzer_cases.py on an H100 (tests/data/h100-cases)
#: and on an H200 (tests/data/h200-cases)
CASES = [
    ("h100", "numpy_preproc", "numpy augmentation on the training thread"),
    ("h100", "numpy_workers", "the same augmentation in 8 DataLoader workers"),
    ("h100", "hand_attention", "softmax(q @ k^T / sqrt(d)) @ v, T = 4096, bf16"),
    ("h100", "sdpa_math", "F.scaled_dot_product_attention forced onto the math backend"),
    ("h100", "lightning", "a Lightning Trainer fitting a small MLP"),
    ("h100", "compiled", "torch.compile with a print in forward (a graph break)"),
    (
        "h100",
        "compiled_item",
        "torch.compile of two 1024-wide layers with .item() between them (3 graphs, 1 break)",
    ),
    ("h100", "cpu_randn", "torch.randn of an 8192 x 1024 tensor on the CPU every step"),
    (
        "h100",
        "cpu_resize",
        "64 images resized (antialiased bilinear) and normalized with torch ops on the host "
        "every step",
    ),
    (
        "h100",
        "item_in_forward_wide",
        ".item() after every layer of a 4096-wide MLP, batch 4096: the GPU's work outlasts "
        "the host's",
    ),
    (
        "h100",
        "conv_warmup",
        "a small CNN with cuDNN's autotuning, profiled from its first iteration (warm-up)",
    ),
    ("h100", "partly_compiled", "an eager MLP with one torch.compile'd helper"),
    ("h100", "numpy_preproc_stack", "numpy_preproc recorded with Python stacks"),
    ("h100", "inference_stack", "the H200's inference case, on an H100 with Python stacks"),
    (
        "h100",
        "hf_trainer_accum",
        "the HF Trainer fitting a 2-layer BERT masked-LM in fp16, micro-batches of 8 "
        "accumulated 4 to a step, masked on the training thread (bench/jobs/library_jobs.py; "
        "one step of its trace)",
    ),
    (
        "h100",
        "hf_llama_eager",
        "a Hugging Face Llama (6 layers, 1024 wide, T = 1024) trained in bf16 with "
        'attn_implementation="eager" (bench/jobs/library_jobs.py; one step of its trace)',
    ),
    (
        "h100",
        "pinned_loader",
        "a small CNN fed by 4 DataLoader workers with pin_memory=True and non_blocking "
        "copies, AdamW (bench/jobs/library_jobs.py)",
    ),
    (
        "h200",
        "sdpa_mem_efficient",
        "F.scaled_dot_product_attention on fp32 q, k, v with an additive float causal mask",
    ),
    ("h200", "inference", "an fp32 transformer encoder in torch.inference_mode(), batch 2"),
    ("h200", "hf_trainer", "a Hugging Face Trainer fitting GPT-2 in bf16 (SDPA on cuDNN)"),
    ("h200", "slow_workers", "a DataLoader whose 2 workers decode too slowly for the step"),
    ("h200", "item_in_forward", ".item() after every layer of a 2048-wide MLP, batch 512"),
    ("h200", "leak", "a small MLP whose outputs are kept in a list with their graphs"),
    ("h200", "lightning", "a Lightning Trainer fitting a small MLP"),
    ("h200", "compiled", "torch.compile with a print in forward (a graph break)"),
    (
        "h200",
        "compiled_item",
        "torch.compile of small layers whose forward calls .item() in a loop (dynamo skips it)",
    ),
    ("h200", "ddp_one", "DistributedDataParallel over NCCL, one rank, a bf16 encoder, batch 8"),
    ("h200", "encoder_batch16", "a bf16 transformer encoder with fused AdamW, batch 16 x 512"),
]


def cases_section() -> str:
    """What ``gputui analyze`` says of each case's trace, with its step account."""
    from gputui.analysis.trace_evidence import trace_job_findings
    from gputui.analysis.trace_summary import summarize, trace_findings
    from gputui.ceilings.datasheet import datasheet_for
    from gputui.protocol.trace_metrics import ACCOUNT_BUCKETS, ACCOUNT_LABELS
    from gputui.tracefile.reader import read_trace

    lines = [
        "| job (planted) | GPU | step account (largest shares) | gputui's warn/crit findings |",
        "| --- | --- | --- | --- |",
    ]
    for gpu, name, planted in CASES:
        path = REPO / "tests" / "data" / f"{gpu}-cases" / f"{name}.pt.trace.json.gz"
        tf = read_trace(path)
        dev = tf.devices[0] if tf.devices else None
        summary = summarize(
            tf.timeline,
            0,
            "order",
            str(path),
            compute_capability=None if dev is None else dev.compute_capability,
        )
        sheet = datasheet_for(None if dev is None else dev.name)
        job = trace_job_findings(summary, datasheet=None if sheet is None else sheet.roof())
        found = [f for f in [*trace_findings(summary), *job] if f.severity != "info"]
        acct = summary.metrics.account
        shares = ""
        if acct is not None:
            top = sorted(ACCOUNT_BUCKETS, key=lambda b: -acct.bucket_us(b))[:3]
            shares = ", ".join(f"{ACCOUNT_LABELS[b]} {acct.share(b) * 100:.0f}%" for b in top)
            busy = acct.gpu_busy_share
            if busy is not None:
                shares += f"; GPU busy {busy * 100:.0f}%"
        said = "<br>".join(
            f"`{f.rule}` ({f.severity}, ~{f.impact_pct:.0f}%): {_cell(f.title)}"
            if f.impact_pct is not None
            else f"`{f.rule}` ({f.severity}): {_cell(f.title)}"
            for f in found
        )
        lines.append(f"| **{name}** ({planted}) | {gpu.upper()} | {shares} | {said or 'none'} |")
    return "\n".join(lines) + "\n"


def thresholds_section() -> str:
    """The thresholds table, each with the rules whose trigger names it."""
    from gputui.analysis.thresholds import TABLE

    users: dict[str, list[str]] = {key: [] for key in TABLE}
    for r in REGISTRY.values():
        for key in r.thresholds:
            users[key].append(f"`{r.id}`")
    lines = ["| threshold | value | what | rules |", "| --- | --- | --- | --- |"]
    for key, t in TABLE.items():
        lines.append(f"| `{key}` | {t.text} | {_cell(t.what)} | {', '.join(users[key])} |")
    return "\n".join(lines) + "\n"


SECTIONS: dict[str, Callable[[], str]] = {
    "rules": rules_section,
    "thresholds": thresholds_section,
    "scenarios": scenarios_section,
    "cases": cases_section,
}


def render(text: str) -> str:
    for name, build in SECTIONS.items():
        start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
        head, _, rest = text.partition(start)
        _, _, tail = rest.partition(end)
        if not rest:
            raise SystemExit(f"{DOC}: no {start} marker")
        text = f"{head}{start}\n{build()}{end}{tail}"
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    args = parser.parse_args()
    current = DOC.read_text()
    fresh = render(current)
    if args.check:
        if fresh != current:
            print(f"{DOC} is stale: run python bench/analyzer_doc.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(fresh)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
