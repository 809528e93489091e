"""The training framework that runs a job's loop, and how a fix is spelled in it.

A fix names the knob the user turns.  In a loop of their own that is the call to
make (``torch.compile(model)``); under the Hugging Face Trainer it is an argument
of ``TrainingArguments``, which builds the optimizer and the DataLoader itself;
under Lightning, an argument of its ``Trainer`` or the hook where the code goes
(``configure_optimizers``, ``train_dataloader``).

Which framework: what the hook says the job imported (``Status.frameworks``),
else the files of the Python sampler's functions, else the names a capture or
trace holds (Lightning's profiler's ranges, the HF Trainer's loop in a
with_stack trace).  Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

from gputui.protocol.profile import ProfileFunction, PythonProfile

TRANSFORMERS = "transformers"
LIGHTNING = "lightning"
#: Hugging Face Accelerate under a loop of the job's own, by its Accelerator's
#: code in the job's stack (the sampler's, a trace's): importing it says
#: nothing (transformers imports it to load models), and the HF Trainer runs
#: on it too (the Trainer comes first where both are seen)
ACCELERATE = "accelerate"
#: the frameworks the advice knows, in words
NAMES = {
    TRANSFORMERS: "the Hugging Face Trainer",
    LIGHTNING: "Lightning",
    ACCELERATE: "Accelerate",
}

#: a framework's training loop, by the files the Python sampler names, the
#: frameworks that build the loop before Accelerate, which may run under them
_LOOP_FILES = (
    (TRANSFORMERS, "/transformers/trainer.py"),
    (LIGHTNING, "/lightning/pytorch/"),
    (LIGHTNING, "/pytorch_lightning/"),
    (ACCELERATE, "/accelerate/accelerator.py"),
)


def framework_of(
    said: Sequence[str], profile: PythonProfile | None = None, traced: str | None = None
) -> str | None:
    """The framework running the loop: the first one the hook named that the
    advice knows, else the one whose loop the sampler saw, else the one whose
    names a capture or trace holds (``traced``: JobMarkers.framework); None: a
    loop of the job's own, or nothing tells."""
    for name in said:
        if name in NAMES:
            return name
    if profile is None:
        return traced if traced in NAMES else None
    files = [f.file for f in profile.functions] + [f.file for f in profile.frames]
    paths = [file.replace("\\", "/") for file in files]
    for name, part in _LOOP_FILES:
        if any(part in path for path in paths):
            return name
    return traced if traced in NAMES else None


#: Hugging Face's generate() loop, and the KV cache classes it updates
_GENERATE_FILE = "/transformers/generation/utils.py"
_CACHE_FILE = "/transformers/cache_utils.py"
DYNAMIC_CACHE = "dynamic"
STATIC_CACHE = "static"


def generate_cache(profile: PythonProfile | None) -> str | None:
    """Where the sampler saw Hugging Face's ``generate()`` run: the KV cache it
    updates, ``dynamic`` (the default, whose tensors grow by one token each
    step) or ``static`` (preallocated), by the class of the cache layer in its
    functions; None where generate() is not seen or its cache is neither."""
    if profile is None:
        return None
    rows = [(f.file, f.function) for f in profile.functions]
    rows += [(f.file, f.function) for f in profile.frames]
    paths = [(file.replace("\\", "/"), function) for file, function in rows]
    if not any(file.endswith(_GENERATE_FILE) for file, _ in paths):
        return None
    kinds = {
        DYNAMIC_CACHE if function.startswith("Dynamic") else STATIC_CACHE
        for file, function in paths
        if file.endswith(_CACHE_FILE) and function.startswith(("Dynamic", "Static"))
    }
    return kinds.pop() if len(kinds) == 1 else None


#: the ops that tell Hugging Face's generate() and its KV cache in a trace
#: without Python stacks (a trace's summary keeps their calls, whatever their
#: time: :attr:`~gputui.analysis.evidence.CaptureView.op_calls`).  Each new
#: token, generate() checks its stopping criteria, whose end-of-sequence test
#: runs ``torch.isin`` (transformers 4.39 and later); a static cache writes
#: each layer's new keys and values into its preallocated tensors with
#: ``index_copy_``, where the default dynamic one concatenates them
#: (``aten::cat``, as rotary embeddings also do: no sign of either cache)
ISIN_OP = "aten::isin"
INDEX_COPY_OP = "aten::index_copy_"
ATTENTION_CALL_OPS = ("aten::scaled_dot_product_attention", "aten::softmax", "aten::_softmax")
GENERATE_OPS = (ISIN_OP, INDEX_COPY_OP, *ATTENTION_CALL_OPS)
#: the fewest calls of each (tokens decoded, attention calls) that make a
#: decoding loop of generate()
GENERATE_MIN_CALLS = 16


def traced_generate_cache(op_calls: Sequence[tuple[str, int]]) -> str | None:
    """The KV cache of a Hugging Face ``generate()`` loop, from the calls of
    :data:`GENERATE_OPS` in a trace's window: ``static`` where the attention
    calls are matched by ``index_copy_`` calls into a preallocated cache,
    ``dynamic`` where there are none; None where no decoding loop shows (the
    end-of-sequence test and attention each under :data:`GENERATE_MIN_CALLS`
    calls) or the copies are too few to tell.  Inference only: the caller
    checks that the job runs no backward."""
    calls = dict(op_calls)
    attention = calls.get(ATTENTION_CALL_OPS[0], 0) or sum(
        calls.get(name, 0) for name in ATTENTION_CALL_OPS[1:]
    )
    if calls.get(ISIN_OP, 0) < GENERATE_MIN_CALLS or attention < GENERATE_MIN_CALLS:
        return None
    copies = calls.get(INDEX_COPY_OP, 0)
    if copies == 0:
        return DYNAMIC_CACHE
    return STATIC_CACHE if copies >= attention else None


#: Lightning's logging, by file (either package name): self.log's metric
#: updates and the logger connector, the progress bars, and the conversion of
#: logged tensors to numbers (.item()) for them
_LIGHTNING_LOGGING_FILES = (
    "/trainer/connectors/logger_connector/",
    "/callbacks/progress/",
)
_LIGHTNING_LOGGING_FUNCTIONS = (
    ("/utilities/apply_func.py", "convert_tensors_to_scalars"),
    ("/core/module.py", "LightningModule.log"),
    ("/core/module.py", "LightningModule.__to_tensor"),
    ("/core/module.py", "LightningModule.__check_"),
)


def lightning_logging(profile: PythonProfile | None) -> tuple[float, tuple[ProfileFunction, ...]]:
    """The share of the training thread's sampled time whose innermost frame is
    Lightning's logging (self.log, the logger connector, the progress bar and
    the .item() that reads a logged tensor for it), and its functions by time,
    most first; (0, ()) where the sampler did not see it."""
    if profile is None or profile.sampled_s <= 0:
        return 0.0, ()
    rows = []
    for f in profile.functions:
        path = f.file.replace("\\", "/")
        if "lightning" not in path or f.self_s <= 0:
            continue
        if any(part in path for part in _LIGHTNING_LOGGING_FILES) or any(
            path.endswith(file) and f.function.startswith(prefix)
            for file, prefix in _LIGHTNING_LOGGING_FUNCTIONS
        ):
            rows.append(f)
    rows.sort(key=lambda f: -f.self_s)
    return min(1.0, sum(f.self_s for f in rows) / profile.sampled_s), tuple(rows)


# -- the knobs --------------------------------------------------------------------------------
COMPILE = "compile"
FUSED_OPTIMIZER = "fused_optimizer"
BIGGER_BATCH = "bigger_batch"
PERSISTENT_WORKERS = "persistent_workers"
LOWER_PRECISION = "lower_precision"
TF32 = "tf32"
#: fp16 mixed precision: the tensor cores of a GPU before Ampere (no bf16, no TF32)
FP16 = "fp16"

#: each knob as a loop of the job's own (None), the HF Trainer and Lightning spell it
_SPELLING: dict[str, dict[str | None, str]] = {
    COMPILE: {
        None: "torch.compile(model)",
        TRANSFORMERS: "TrainingArguments(torch_compile=True)",
        LIGHTNING: "torch.compile(model) before trainer.fit(model)",
        ACCELERATE: "torch.compile(model), or Accelerator(dynamo_backend='inductor')",
    },
    FUSED_OPTIMIZER: {
        None: "torch.optim.AdamW(..., fused=True)",
        TRANSFORMERS: 'TrainingArguments(optim="adamw_torch_fused")',
        LIGHTNING: "torch.optim.AdamW(..., fused=True) in configure_optimizers()",
    },
    BIGGER_BATCH: {
        None: "gradient accumulation keeps the optimizer's batch",
        TRANSFORMERS: "TrainingArguments(per_device_train_batch_size=..., "
        "gradient_accumulation_steps=...) keeps the optimizer's batch",
        LIGHTNING: "Trainer(accumulate_grad_batches=...) keeps the optimizer's batch",
        ACCELERATE: "Accelerator(gradient_accumulation_steps=...) keeps the optimizer's batch",
    },
    PERSISTENT_WORKERS: {
        None: "DataLoader(..., persistent_workers=True)",
        TRANSFORMERS: "TrainingArguments(dataloader_persistent_workers=True)",
        LIGHTNING: "DataLoader(..., persistent_workers=True) in train_dataloader()",
    },
    TF32: {
        None: "torch.set_float32_matmul_precision('high') (TF32, also "
        "torch.backends.cudnn.allow_tf32 = True for convolutions)",
        TRANSFORMERS: "TF32: TrainingArguments(tf32=True)",
        LIGHTNING: "torch.set_float32_matmul_precision('high') (TF32) before trainer.fit",
    },
    FP16: {
        None: "fp16 autocast: with torch.autocast('cuda', dtype=torch.float16), and a "
        "torch.amp.GradScaler('cuda') around the backward when training",
        TRANSFORMERS: "fp16 mixed precision: TrainingArguments(fp16=True)",
        LIGHTNING: "fp16 mixed precision: Trainer(precision='16-mixed')",
        ACCELERATE: "fp16 mixed precision: Accelerator(mixed_precision='fp16')",
    },
    LOWER_PRECISION: {
        None: "bf16 autocast: with torch.autocast('cuda', dtype=torch.bfloat16)",
        TRANSFORMERS: "bf16 mixed precision: TrainingArguments(bf16=True)",
        LIGHTNING: "bf16 mixed precision: Trainer(precision='bf16-mixed')",
        ACCELERATE: "bf16 mixed precision: Accelerator(mixed_precision='bf16')",
    },
}

#: a larger micro-batch and fewer of them, as each framework spells it (``{n}``:
#: the micro-batches a step accumulates over)
_FEWER_MICRO_BATCHES: dict[str | None, str] = {
    None: "the DataLoader's batch_size up to {n}x, the accumulation steps down as much",
    TRANSFORMERS: "TrainingArguments(per_device_train_batch_size=... up to {n}x, "
    "gradient_accumulation_steps=... down as much)",
    LIGHTNING: "the DataLoader's batch_size up to {n}x, Trainer(accumulate_grad_batches=...) "
    "down as much",
    ACCELERATE: "the DataLoader's batch_size up to {n}x, Accelerator("
    "gradient_accumulation_steps=...) down as much",
}


def larger_batch(framework: str | None, micro_batches: int = 0) -> str:
    """More work per step, for this job: where its steps already accumulate
    gradients over ``micro_batches`` (two or more), larger micro-batches and
    fewer of them (each micro-batch launches the whole forward and backward);
    else larger batches, accumulation keeping the optimizer's batch."""
    if micro_batches >= 2:
        n = micro_batches
        fewer = _FEWER_MICRO_BATCHES.get(framework, _FEWER_MICRO_BATCHES[None])
        return (
            f"the step already accumulates gradients over {n} micro-batches ({n} DataLoader "
            f"batches per optimizer step), each launching the whole forward and backward: "
            f"make them larger and fewer ({fewer.format(n=n)}), memory allowing: the same "
            f"optimizer batch in as little as 1/{n} of the launches"
        )
    return f"use larger batches per step ({spell(BIGGER_BATCH, framework)})"


#: DataLoader arguments as the HF Trainer names them (it builds the loader itself)
_TRAINER_LOADER_ARGS = {
    "num_workers": "dataloader_num_workers",
    "pin_memory": "dataloader_pin_memory",
    "persistent_workers": "dataloader_persistent_workers",
    "prefetch_factor": "dataloader_prefetch_factor",
}


def spell(knob: str, framework: str | None) -> str:
    """``knob`` as the job's framework spells it (a loop of its own where the
    framework is unknown)."""
    table = _SPELLING[knob]
    return table.get(framework, table[None])


#: torch's optimizers with a fused CUDA implementation (``fused=True``)
FUSED_CLASSES = frozenset({"Adam", "AdamW", "SGD", "Adagrad"})
#: torch's optimizers without one (``foreach=True`` is their fastest)
FOREACH_ONLY = frozenset({"RMSprop", "Adamax", "NAdam", "RAdam", "Adadelta", "ASGD", "Rprop"})


def fused_optimizer(framework: str | None, optimizer_class: str | None) -> str:
    """A fused optimizer step as the job spells it: its own optimizer's class
    where torch has a fused one, else AdamW's (the HF Trainer's: its optim
    names)."""
    where = " in configure_optimizers()" if framework == LIGHTNING else ""
    if framework != TRANSFORMERS and optimizer_class in FUSED_CLASSES:
        return f"torch.optim.{optimizer_class}(..., fused=True){where}"
    if framework != TRANSFORMERS and optimizer_class in FOREACH_ONLY:
        return (
            f"torch.optim.{optimizer_class} has no fused version: foreach=True{where}, or "
            "a fused Adam, AdamW, SGD or Adagrad where one fits"
        )
    return spell(FUSED_OPTIMIZER, framework)


def loader_arg(name: str, framework: str | None) -> str:
    """A DataLoader argument as the user sets it: the HF Trainer's
    ``dataloader_*`` argument of TrainingArguments, else the DataLoader's own."""
    if framework == TRANSFORMERS:
        return _TRAINER_LOADER_ARGS.get(name, name)
    return name


def loader_where(framework: str | None) -> str:
    """Where the DataLoader's arguments are set, after them: `` in
    TrainingArguments``, `` in the DataLoader that train_dataloader() returns``,
    or nothing (the job builds its own)."""
    if framework == TRANSFORMERS:
        return " in TrainingArguments"
    if framework == LIGHTNING:
        return " in the DataLoader that train_dataloader() returns"
    return ""
