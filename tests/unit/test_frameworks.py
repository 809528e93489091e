"""The framework that runs a job's loop, and the advice spelled in its arguments."""

from __future__ import annotations

import dataclasses

import pytest

from gputui.analysis import engine
from gputui.analysis.frameworks import (
    ACCELERATE,
    LIGHTNING,
    TRANSFORMERS,
    framework_of,
    generate_cache,
    lightning_logging,
    loader_arg,
    loader_where,
    traced_generate_cache,
)
from gputui.protocol.hello import LoaderInfo
from gputui.protocol.profile import PathFrame, ProfileFunction, PythonProfile
from tests.helpers.evidence import capture, evidence, kernel, op, python_profile, steps

SITE = "/opt/venv/lib/python3.12/site-packages"


def sampled_in(*files: str) -> PythonProfile:
    """A profile whose functions are in ``files``."""
    base = python_profile({"other": 0.1})
    extra = tuple(
        ProfileFunction(file, "run", "lib", 10, 1, 0.5, 1.0, {"other": 0.5}) for file in files
    )
    return dataclasses.replace(base, functions=base.functions + extra)


@pytest.mark.parametrize(
    ("said", "files", "want"),
    [
        (("transformers",), (), TRANSFORMERS),
        (("lightning",), (), LIGHTNING),
        (("something-new", "lightning"), (), LIGHTNING),  # a newer hook's name is skipped
        ((), (f"{SITE}/transformers/trainer.py",), TRANSFORMERS),
        ((), (f"{SITE}/lightning/pytorch/loops/fit_loop.py",), LIGHTNING),
        ((), (f"{SITE}/pytorch_lightning/loops/fit_loop.py",), LIGHTNING),
        # transformers' models without its Trainer: a loop of the job's own
        ((), (f"{SITE}/transformers/models/gpt2/modeling_gpt2.py",), None),
        # a loop of the job's own on Accelerate's Accelerator; the HF Trainer runs
        # on it too, and comes first, whichever the sampler names first
        ((), (f"{SITE}/accelerate/accelerator.py",), ACCELERATE),
        (
            (),
            (f"{SITE}/accelerate/accelerator.py", f"{SITE}/transformers/trainer.py"),
            TRANSFORMERS,
        ),
        (("transformers",), (f"{SITE}/accelerate/accelerator.py",), TRANSFORMERS),
        # Accelerate's hooks (a model loaded with device_map) are no Accelerator
        ((), (f"{SITE}/accelerate/hooks.py",), None),
        ((), (), None),
    ],
)
def test_the_framework_is_what_the_hook_said_else_what_the_sampler_saw(
    said: tuple[str, ...], files: tuple[str, ...], want: str | None
) -> None:
    assert framework_of(said, sampled_in(*files)) == want


def test_a_frame_on_the_hot_paths_names_the_framework_too() -> None:
    base = python_profile({"other": 0.1})
    frame = PathFrame(f"{SITE}/lightning/pytorch/loops/fit_loop.py", "run", 1)
    assert framework_of((), dataclasses.replace(base, frames=(*base.frames, frame))) == LIGHTNING


def test_the_hf_trainer_names_its_own_dataloader_arguments() -> None:
    assert loader_arg("persistent_workers", TRANSFORMERS) == "dataloader_persistent_workers"
    assert loader_arg("persistent_workers", LIGHTNING) == "persistent_workers"
    assert loader_arg("persistent_workers", None) == "persistent_workers"
    assert loader_where(TRANSFORMERS) == " in TrainingArguments"
    assert loader_where(None) == ""


def tiny_kernels(*ops: object) -> object:
    return capture([kernel("elementwise_kernel<add>", "elementwise", 5000, 15_000.0)], list(ops))


def launch_fix(cap: object, **kw: object) -> str:
    found = [f for f in engine.analyze(evidence(cap=cap, **kw)) if f.rule == "launch.overhead"]
    assert len(found) == 1, found
    return found[0].fix


def test_the_launch_advice_speaks_the_frameworks_arguments() -> None:
    plain = launch_fix(tiny_kernels())
    assert "torch.compile(model) fuses" in plain
    assert "a fused optimizer (torch.optim.AdamW(..., fused=True))" in plain
    hf = launch_fix(tiny_kernels(), frameworks=("transformers",))
    assert "TrainingArguments(torch_compile=True) fuses" in hf
    assert 'a fused optimizer (TrainingArguments(optim="adamw_torch_fused"))' in hf
    assert "gradient_accumulation_steps" in hf
    acc = dataclasses.replace(
        evidence(cap=tiny_kernels()),
        python_profile=sampled_in(f"{SITE}/accelerate/accelerator.py"),
    )
    (accelerate,) = [f.fix for f in engine.analyze(acc) if f.rule == "launch.overhead"]
    assert "torch.compile(model), or Accelerator(dynamo_backend='inductor') fuses" in accelerate
    assert "Accelerator(gradient_accumulation_steps=...)" in accelerate
    lightning = launch_fix(tiny_kernels(), frameworks=("lightning",))
    assert "torch.compile(model) before trainer.fit(model) fuses" in lightning
    assert "in configure_optimizers()" in lightning
    assert "Trainer(accumulate_grad_batches=...)" in lightning


def test_a_foreach_optimizer_that_issues_little_is_not_told_to_fuse() -> None:
    """A foreach optimizer (torch's default) issuing 1% of a trace's launches, or
    1% of a live job's step: fusing it saves little, so the launch fix leaves it
    out; a per-parameter one, or a foreach one issuing a fifth, is still told."""
    foreach = tiny_kernels(op("aten::_foreach_addcdiv_", 3, 300.0))
    small = dataclasses.replace(evidence(cap=foreach), optimizer_launch_share=0.01)
    (f,) = [f for f in engine.analyze(small) if f.rule == "launch.overhead"]
    assert "fused optimizer" not in f.fix and "torch.compile(model)" in f.fix
    large = dataclasses.replace(small, optimizer_launch_share=0.2)
    (g,) = [f for f in engine.analyze(large) if f.rule == "launch.overhead"]
    assert "a fused optimizer" in g.fix
    single = dataclasses.replace(evidence(cap=tiny_kernels()), optimizer_launch_share=0.01)
    (h,) = [f for f in engine.analyze(single) if f.rule == "launch.overhead"]
    assert "a fused optimizer" in h.fix
    # a live job: the optimizer phase's share of the step
    live = evidence(
        steps(phases={"forward": 0.004, "backward": 0.005, "optimizer": 0.0001, "other": 0.001}),
        cap=foreach,
    )
    (i,) = [f for f in engine.analyze(live) if f.rule == "launch.overhead"]
    assert "fused optimizer" not in i.fix


def test_an_optimizer_already_fused_is_not_advised_again() -> None:
    """The capture ran aten::_fused_adamw_ (the HF Trainer's default): the launch
    advice leaves the optimizer out."""
    fix = launch_fix(tiny_kernels(op("aten::_fused_adamw_", 3, 300.0)))
    assert "fused optimizer" not in fix and "torch.compile(model)" in fix
    foreach = launch_fix(tiny_kernels(op("aten::_foreach_add_", 3, 300.0)))
    assert "a fused optimizer" in foreach


def test_the_data_advice_under_the_hf_trainer_names_training_arguments() -> None:
    loader = LoaderInfo(num_workers=0, pin_memory=False, persistent_workers=False)
    ev = evidence(
        steps(phases={"data": 0.02, "forward": 0.01, "backward": 0.02, "other": 0.002}),
        loader=loader,
        frameworks=("transformers",),
    )
    (f,) = [f for f in engine.analyze(ev) if f.rule == "data.loader_wait"]
    assert (
        "set dataloader_num_workers=N (N up to the free CPU cores, e.g. 4-8 per GPU), "
        "dataloader_persistent_workers=True and dataloader_pin_memory=True in "
        "TrainingArguments" in f.fix
    )


def test_the_precision_advice_under_lightning_names_its_trainer() -> None:
    cap = capture([kernel("ampere_sgemm_128x64_nn", "gemm", 100, 80_000.0)])
    ev = evidence(cap=cap, frameworks=("lightning",))
    (f,) = [f for f in engine.analyze(ev) if f.rule == "precision.fp32_matmul"]
    assert "Trainer(precision='bf16-mixed')" in f.fix
    assert "set_float32_matmul_precision('high')" in f.fix


def loader_fix(workers: int, data: float, cpus: int | None, **kw: object) -> str:
    """The data finding's fix for a step of 36 ms plus ``data`` s of waiting."""
    loader = LoaderInfo(num_workers=workers, pin_memory=True, persistent_workers=True)
    phases = {"data": data, "forward": 0.01, "backward": 0.02, "other": 0.006}
    ev = evidence(steps(phases=phases), loader=loader, cpus=cpus, **kw)
    (f,) = [f for f in engine.analyze(ev) if f.rule == "data.loader_wait"]
    return f.fix


@pytest.mark.parametrize(
    ("workers", "data", "cpus", "start"),
    [
        # waiting 50% of the step: twice the workers keep up, and the cores allow it
        (4, 0.036, 16, "raise num_workers from 4 to about 8: at this wait, that many keep up"),
        # 75%: four times; 16 cores leave 15 for workers
        (4, 0.108, 16, "raise num_workers from 4 to 15 (the job may use 16 CPU cores; about 16"),
        # the workers already have every core but the training process's
        (7, 0.036, 8, "its 7 workers already have the job's 8 CPU cores: more workers cannot"),
        # cores unknown (an older hook) and the workers not sampled: both ways out
        (4, 0.036, None, "the training process waits for its workers' batches: if they fall"),
    ],
)
def test_the_workers_advice_counts_them_against_the_jobs_cores(
    workers: int, data: float, cpus: int | None, start: str
) -> None:
    assert loader_fix(workers, data, cpus).startswith(start)


def test_under_the_hf_trainer_the_workers_are_its_argument() -> None:
    fix = loader_fix(4, 0.036, 16, frameworks=("transformers",))
    assert fix.startswith("raise dataloader_num_workers from 4 to about 8 in TrainingArguments")


def test_a_traces_dataloader_range_says_where_the_batches_are_made() -> None:
    from gputui.trace.markers import markers_of

    many = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
    one = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    assert markers_of({many, "aten::mm"}, (), ()).loader == "workers"
    assert markers_of({one}, (), ()).loader == "main"
    assert markers_of({"aten::mm"}, (), ()).loader is None


@pytest.mark.parametrize(
    ("names", "want"),
    [
        # Lightning's profiler: its actions and the modules' forward calls
        ({"[pl][profile][Strategy]SingleDeviceStrategy.training_step", "aten::mm"}, LIGHTNING),
        ({"[pl][module]torch.nn.modules.linear.Linear: net.0"}, LIGHTNING),
        # a with_stack trace: the Python functions' files
        ({"/venv/lib/python3.12/site-packages/transformers/trainer.py(2240): train"}, TRANSFORMERS),
        ({"lightning/pytorch/loops/fit_loop.py(205): run"}, LIGHTNING),
        ({"transformers/models/gpt2/modeling_gpt2.py(900): forward", "aten::mm"}, None),
        ({"accelerate/accelerator.py(2700): backward", "aten::mm"}, ACCELERATE),
        (
            {
                "accelerate/accelerator.py(2700): backward",
                "transformers/trainer.py(2240): train",
                "accelerate/accelerator.py(1300): prepare",
            },
            TRANSFORMERS,
        ),
        ({"aten::mm", "ProfilerStep#3"}, None),
    ],
)
def test_a_trace_names_its_framework(names: set[str], want: str | None) -> None:
    from gputui.trace.markers import markers_of

    assert markers_of(names, (), ()).framework == want


def test_a_traces_framework_spells_the_advice_where_the_hook_is_silent() -> None:
    from gputui.protocol.trace_metrics import JobMarkers

    cap = capture(
        [kernel("elementwise_kernel<add>", "elementwise", 5000, 15_000.0)],
        markers=JobMarkers(framework="transformers"),
    )
    assert "TrainingArguments(torch_compile=True)" in launch_fix(cap)
    # what the hook said wins
    assert "trainer.fit(model)" in launch_fix(cap, frameworks=("lightning",))


@pytest.mark.parametrize(
    ("names", "want"),
    [
        ({"Optimizer.step#SGD.step", "Optimizer.zero_grad#SGD.zero_grad"}, "SGD"),
        ({"Optimizer.step#Adagrad.step", "aten::mm"}, "Adagrad"),
        # two optimizers (a GAN's), none named, or a name that is no class
        ({"Optimizer.step#Adam.step", "Optimizer.step#SGD.step"}, None),
        ({"aten::_fused_adamw_"}, None),
        ({"Optimizer.step#\x1b[31mX.step"}, None),
    ],
)
def test_a_traces_optimizer_step_names_its_class(names: set[str], want: str | None) -> None:
    from gputui.trace.markers import markers_of

    assert markers_of(names, (), ()).optimizer_class == want


@pytest.mark.parametrize(
    ("cls", "framework", "told", "not_told"),
    [
        ("SGD", None, "torch.optim.SGD(..., fused=True)", "AdamW"),
        ("Adagrad", "lightning", "Adagrad(..., fused=True) in configure_optimizers()", "AdamW"),
        ("RMSprop", None, "RMSprop has no fused version: foreach=True", "RMSprop(..., fused"),
        # the HF Trainer's optimizers are its optim names; an unknown class: AdamW's
        ("SGD", "transformers", 'optim="adamw_torch_fused"', "SGD"),
        ("Shampoo", None, "torch.optim.AdamW(..., fused=True)", "Shampoo"),
        (None, None, "torch.optim.AdamW(..., fused=True)", "SGD"),
    ],
)
def test_the_fused_optimizer_advice_names_the_jobs_own_optimizer(
    cls: str | None, framework: str | None, told: str, not_told: str
) -> None:
    from gputui.analysis.frameworks import fused_optimizer

    said = fused_optimizer(framework, cls)
    assert told in said and not_told not in said


def hot_loading_fix(cuda: bool, **kw: object) -> str:
    """The data fix of a job whose training thread (num_workers=0) waits for data
    in the job's own function (the helper's augment, calling numpy's sort)."""
    phases = {"data": 0.02, "forward": 0.01, "backward": 0.02, "other": 0.002}
    loader = LoaderInfo(num_workers=0)
    sampled = dataclasses.replace(python_profile({"data": 0.5}), phases_s={"data": 5.0})
    ev = evidence(steps(phases=phases), loader=loader, python_profile=sampled, **kw)
    (f,) = [
        f
        for f in engine.analyze(dataclasses.replace(ev, cuda=cuda))
        if f.rule == "data.loader_wait"
    ]
    assert "the training thread spends" in f.evidence
    return f.fix


def test_the_hot_loading_fix_speaks_the_framework_and_knows_a_cpu_job() -> None:
    """An HF Trainer job on the CPU whose tokenizing held the data wait was told
    to decode on the GPU and to set the DataLoader's own num_workers."""
    gpu = hot_loading_fix(True)
    assert "move it onto the GPU (e.g. NVIDIA DALI)" in gpu
    assert "set num_workers=N (N up to the free CPU cores), persistent_workers=True and " in gpu
    assert "pin_memory=True so batches" in gpu
    cpu = hot_loading_fix(False, frameworks=("transformers",))
    assert "GPU" not in cpu and "pin_memory" not in cpu
    assert (
        "set dataloader_num_workers=N (N up to the free CPU cores), "
        "dataloader_persistent_workers=True in TrainingArguments so batches" in cpu
    )


def _generate_profile(*rows: tuple[str, str]) -> PythonProfile:
    functions = tuple(
        ProfileFunction(f"/venv/site-packages/transformers/{file}", function, "lib", 1, 1, 1.0, 1.0)
        for file, function in rows
    )
    return PythonProfile(sampled_s=10.0, samples=1000, functions=functions)


@pytest.mark.parametrize(
    ("rows", "cache"),
    [
        ((("generation/utils.py", "GenerationMixin._sample"),), None),
        (
            (
                ("generation/utils.py", "GenerationMixin._sample"),
                ("cache_utils.py", "DynamicLayer.update"),
            ),
            "dynamic",
        ),
        (
            (
                ("generation/utils.py", "GenerationMixin._sample"),
                ("cache_utils.py", "StaticLayer.update"),
            ),
            "static",
        ),
        # an older transformers' cache class
        (
            (
                ("generation/utils.py", "GenerationMixin.greedy_search"),
                ("cache_utils.py", "DynamicCache.update"),
            ),
            "dynamic",
        ),
        # a cache without generate(): a loop of the job's own
        ((("cache_utils.py", "DynamicLayer.update"),), None),
    ],
)
def test_the_kv_cache_of_a_generate_loop(
    rows: tuple[tuple[str, str], ...], cache: str | None
) -> None:
    assert generate_cache(_generate_profile(*rows)) == cache
    assert generate_cache(None) is None


@pytest.mark.parametrize(
    ("calls", "cache"),
    [
        # GPT-2's generate() on the dynamic cache: 12 layers, 10 tokens
        ({"aten::isin": 30, "aten::scaled_dot_product_attention": 132}, "dynamic"),
        # the static cache writes each layer's keys and values with index_copy_
        (
            {
                "aten::isin": 30,
                "aten::scaled_dot_product_attention": 132,
                "aten::index_copy_": 264,
            },
            "static",
        ),
        # eager attention: its softmax calls count
        ({"aten::isin": 30, "aten::softmax": 130}, "dynamic"),
        # a few copies that are not the cache's: nothing told
        (
            {"aten::isin": 30, "aten::scaled_dot_product_attention": 132, "aten::index_copy_": 4},
            None,
        ),
        # no end-of-sequence check each token, or too few tokens: no decoding loop
        ({"aten::scaled_dot_product_attention": 132}, None),
        ({"aten::isin": 15, "aten::scaled_dot_product_attention": 132}, None),
        ({"aten::isin": 30, "aten::scaled_dot_product_attention": 8}, None),
        ({}, None),
    ],
)
def test_the_kv_cache_of_a_generate_loop_by_a_traces_ops(
    calls: dict[str, int], cache: str | None
) -> None:
    assert traced_generate_cache(tuple(calls.items())) == cache


@pytest.mark.parametrize("package", ["lightning/pytorch", "pytorch_lightning"])
def test_lightnings_logging_is_told_from_its_other_code(package: str) -> None:
    """self.log's metric updates, the progress bar and the .item() reading a
    logged tensor for it count, under either package's name; the rest of
    Lightning's loop, and a job's own file named like one, do not."""
    site = f"/venv/site-packages/{package}"
    fabric = "/venv/site-packages/lightning/fabric" if package != "pytorch_lightning" else site

    def row(file: str, function: str, self_s: float) -> ProfileFunction:
        return ProfileFunction(file, function, "lib", 1, 1, self_s, self_s)

    rows = (
        row(f"{site}/trainer/connectors/logger_connector/result.py", "_ResultMetric.update", 2.0),
        row(
            f"{fabric}/utilities/apply_func.py", "convert_tensors_to_scalars.<locals>.to_item", 1.0
        ),
        row(
            f"{site}/callbacks/progress/tqdm_progress.py", "TQDMProgressBar.on_train_batch_end", 0.5
        ),
        row(f"{site}/core/module.py", "LightningModule.log", 0.25),
        row(f"{site}/loops/training_epoch_loop.py", "_TrainingEpochLoop.advance", 3.0),
        row("/job/callbacks/progress/bar.py", "my_bar", 3.0),
    )
    share, named = lightning_logging(PythonProfile(sampled_s=10.0, samples=1000, functions=rows))
    assert share == pytest.approx(0.375)
    assert [f.function for f in named][:2] == [
        "_ResultMetric.update",
        "convert_tensors_to_scalars.<locals>.to_item",
    ]
    assert lightning_logging(None) == (0.0, ())


@pytest.mark.parametrize(
    ("names", "want"),
    [
        ({"aten::_fused_adamw_", "aten::_foreach_norm"}, "fused"),
        (
            {"Optimizer.step#AdamW.step", "aten::_foreach_addcdiv_", "aten::_foreach_lerp_"},
            "foreach",
        ),
        # gradient clipping's own foreach ops: no optimizer's
        ({"aten::_foreach_norm", "aten::_foreach_mul_", "aten::add_"}, None),
        ({"Optimizer.step#SGD.step", "aten::add_"}, None),
    ],
)
def test_the_markers_name_the_optimizers_kernels(names: set[str], want: str | None) -> None:
    """From every name in the timeline, where the tables keep only the top ones:
    a small optimizer's foreach ops are not among a capture's top 30."""
    from gputui.trace.markers import markers_of

    assert markers_of(names, (), ()).optimizer_kernels == want


def test_a_small_foreach_optimizer_is_read_from_the_markers() -> None:
    """The tables show no optimizer op (a LoRA job's AdamW over 32 tensors): the
    markers say foreach, not the single-tensor loop an empty table suggested."""
    from gputui.analysis.optimizer import MULTI, SINGLE, optimizer_impl
    from gputui.protocol.trace_metrics import JobMarkers

    bare = evidence(cap=tiny_kernels())
    assert optimizer_impl(bare) is not None and optimizer_impl(bare)[0] == SINGLE
    marked = evidence(cap=capture([], markers=JobMarkers(optimizer_kernels="foreach")))
    assert optimizer_impl(marked) == (MULTI, "the capture's foreach ops")
