"""gputui's MFU and torch.compile report against a hand count, on a CUDA GPU.

    python3 bench/jobs/mfu_compile_gpu.py OUT.json

Run from the repository root on an H100 (or any GPU the datasheet table knows),
with torch and gputui's dependencies installed (``pip install -e .``).  Two
hooked jobs are started in turn (``import gputui.hook`` in the job: it runs
under plain ``python3``), and ``gputui attach PID --once --json`` reads each:

(a) **mfu**: a bf16 decoder-only transformer with causal
    ``F.scaled_dot_product_attention`` (flash on an H100), trained with AdamW.
    Its model FLOPs per step are counted by hand from its shapes (below), its
    step time measured by the job itself over 40 steps between two
    ``torch.cuda.synchronize()``; MFU by hand = FLOPs / step time / the
    datasheet's dense bf16 peak.  gputui's MFU comes from
    ``attach --once --capture 5 --flops --json`` (``utilisation``).  Written:
    both MFUs, both FLOP counts, both step times and their ratios.
(b) **compile**: a smaller transformer under ``torch.compile`` (Inductor) with a
    planted graph break (a ``print`` in its forward) and one recompile (the
    batch shrinks after 30 steps).  Written: what ``attach --once --json``
    reports under ``compile`` and the ``compile.breaks_recompiles`` finding,
    with the planted line to compare.

The hand count of (a), per step, with B sequences of T tokens, width d, L
layers, vocabulary V (H heads of d/H; the attention is causal):

- per layer, forward: q, k, v and output projections 2·BT·d·(3d + d), the MLP
  2·BT·d·4d·2: 24·BT·d²; attention 4·B·H·T²·(d/H) / 2 = 2·B·T²·d;
- the LM head 2·BT·d·V;
- backward twice the forward: model FLOPs = 3 × forward.

What to look for in OUT.json: ``mfu.ratio_mfu`` (gputui / hand) within 0.95 ..
1.05, ``mfu.ratio_flops`` near 1.0; ``compile.line_matches`` true and
``compile.report.breaks[0].reason`` naming ``print``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve()
PY = sys.executable

# (a): about 90 ms steps on an H100 SXM
MFU_SHAPE = {"B": 8, "T": 2048, "d": 2048, "L": 8, "H": 16, "V": 32768}
# (b): small, so that Inductor compiles it in well under a minute
COMPILE_SHAPE = {"B": 8, "T": 256, "d": 512, "L": 2, "H": 8, "V": 4096}
TIMED_STEPS = 40
WARMUP_STEPS = 15
SHRINK_AT = 30  # (b): the step after which the batch shrinks (a recompile)


def hand_flops(s: dict[str, int]) -> float:
    b, t, d, layers, v = s["B"], s["T"], s["d"], s["L"], s["V"]
    per_layer = 24.0 * b * t * d * d + 2.0 * b * t * t * d
    forward = layers * per_layer + 2.0 * b * t * d * v
    return 3.0 * forward


# -- the jobs -----------------------------------------------------------------------------
def build(torch: Any, s: dict[str, int], planted_break: bool) -> Any:
    nn, fn = torch.nn, torch.nn.functional
    d, h = s["d"], s["H"]

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x: Any) -> Any:
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, -1)
            q, k, v = (z.view(b, t, h, d // h).transpose(1, 2) for z in (q, k, v))
            a = fn.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.out(a.transpose(1, 2).reshape(b, t, d))
            return x + self.down(fn.gelu(self.up(self.ln2(x))))

    class LM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(s["V"], d)
            self.blocks = nn.ModuleList(Block() for _ in range(s["L"]))
            self.ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, s["V"], bias=False)

        def forward(self, tokens: Any) -> Any:
            x = self.emb(tokens)
            for block in self.blocks:
                x = block(x)
            if planted_break:
                print(end="")  # PLANTED GRAPH BREAK
            return self.head(self.ln(x))

    return LM()


def child(kind: str, ready: str) -> int:
    import torch

    import gputui.hook

    gputui.hook.install()
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    s = MFU_SHAPE if kind == "mfu" else COMPILE_SHAPE
    model = build(torch, s, planted_break=kind == "compile").cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    run = torch.compile(model) if kind == "compile" else model
    tokens = torch.randint(0, s["V"], (s["B"], s["T"] + 1), device="cuda")

    def step(batch: int) -> None:
        x, y = tokens[:batch, :-1], tokens[:batch, 1:]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = run(x)
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    info: dict[str, Any] = {"pid": os.getpid(), "device": torch.cuda.get_device_name()}
    done = 0
    batch = s["B"]
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if kind == "compile" and done == SHRINK_AT:
            batch = s["B"] - 2  # a new shape: dynamo compiles the frames again
        step(batch)
        done += 1
        if kind == "mfu" and done == WARMUP_STEPS:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(TIMED_STEPS):
                step(batch)
            torch.cuda.synchronize()
            done += TIMED_STEPS
            info["step_s"] = (time.perf_counter() - t0) / TIMED_STEPS
            _write(ready, info)
        if kind == "compile" and done == SHRINK_AT + 20:
            _write(ready, info)
    return 0


def _write(path: str, doc: dict[str, Any]) -> None:
    with open(path + ".tmp", "w") as fh:
        json.dump(doc, fh)
    os.replace(path + ".tmp", path)


# -- the parent ---------------------------------------------------------------------------
def start(kind: str, tmp: Path, env: dict[str, str], limit_s: float) -> tuple[Any, dict]:
    ready = tmp / f"{kind}.ready"
    proc = subprocess.Popen(
        [PY, str(HERE), "--child", kind, "--ready", str(ready)],
        env=env,
        cwd=str(REPO),
        stdout=subprocess.DEVNULL,
        stderr=open(tmp / f"{kind}.stderr", "w"),
    )
    deadline = time.monotonic() + limit_s
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            err = (tmp / f"{kind}.stderr").read_text()[-3000:]
            raise SystemExit(f"the {kind} job did not get ready:\n{err}")
        time.sleep(0.2)
    return proc, json.loads(ready.read_text())


def attach(pid: int, env: dict[str, str], *extra: str) -> dict[str, Any]:
    cmd = [PY, "-m", "gputui", "attach", str(pid), "--once", "--json", *extra]
    out = subprocess.run(cmd, env=env, cwd=str(REPO), capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr}")
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def stop(proc: Any) -> None:
    proc.kill()
    proc.wait(timeout=30)


def measure_mfu(tmp: Path, env: dict[str, str]) -> dict[str, Any]:
    sys.path.insert(0, str(REPO))
    from gputui.ceilings.datasheet import datasheet_for

    proc, info = start("mfu", tmp, env, 150)
    try:
        report = attach(info["pid"], env, "--capture", "5", "--flops", "--gpu-seconds", "0")
    finally:
        stop(proc)
    util = report.get("utilisation") or {}
    sheet = datasheet_for(info["device"])
    peak = None if sheet is None else sheet.bf16_tflops
    flops = hand_flops(MFU_SHAPE)
    hand_tflops = flops / info["step_s"] / 1e12
    hand_mfu = None if peak is None else hand_tflops / peak
    gputui_mfu = util.get("mfu")
    steps_per_s = util.get("steps_per_s")
    return {
        "device": info["device"],
        "shape": MFU_SHAPE,
        "hand_flops_per_step": flops,
        "hand_step_s": info["step_s"],
        "hand_tflops": hand_tflops,
        "datasheet_bf16_tflops": peak,
        "hand_mfu": hand_mfu,
        "gputui": util,
        "gputui_step_s": None if not steps_per_s else 1.0 / steps_per_s,
        "ratio_flops": None
        if not util.get("model_flops_per_step")
        else util["model_flops_per_step"] / flops,
        "ratio_mfu": None if not gputui_mfu or not hand_mfu else gputui_mfu / hand_mfu,
        "capture_flop_totals": (report.get("capture") or {}).get("flop_totals"),
    }


def measure_compile(tmp: Path, env: dict[str, str]) -> dict[str, Any]:
    proc, info = start("compile", tmp, env, 200)
    try:
        report = attach(info["pid"], env, "--gpu-seconds", "0")
    finally:
        stop(proc)
    planted = next(
        i
        for i, line in enumerate(HERE.read_text().splitlines(), 1)
        if line.rstrip().endswith("# PLANTED GRAPH BREAK")
    )
    compiled = report.get("compile") or {}
    top = (compiled.get("breaks") or [{}])[0]
    finding = [f for f in report.get("findings", []) if f["rule"] == "compile.breaks_recompiles"]
    return {
        "device": info["device"],
        "planted_file": str(HERE),
        "planted_line": planted,
        "line_matches": top.get("line") == planted and str(top.get("file", "")).endswith(HERE.name),
        "report": compiled,
        "compile_note": report.get("compile_note"),
        "excluded_compile": report["stats"].get("excluded_compile"),
        "finding": finding[0] if finding else None,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", nargs="?")
    p.add_argument("--child", choices=["mfu", "compile"])
    p.add_argument("--ready")
    args = p.parse_args()
    if args.child:
        return child(args.child, args.ready)
    if not args.out:
        p.error("OUT.json is required")
    import tempfile

    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    tmp = Path(tempfile.mkdtemp(prefix="gputui-mfu-"))
    t0 = time.monotonic()
    doc: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "load": os.getloadavg()}
    doc["mfu"] = measure_mfu(tmp, env)
    doc["compile"] = measure_compile(tmp, env)
    doc["seconds"] = round(time.monotonic() - t0, 1)
    Path(args.out).write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    m, c = doc["mfu"], doc["compile"]
    print(
        f"MFU by hand {_pct(m['hand_mfu'])}, gputui {_pct(m['gputui'].get('mfu'))} "
        f"(ratio {m['ratio_mfu']}); FLOPs ratio {m['ratio_flops']}; "
        f"graph break line matches: {c['line_matches']}"
    )
    return 0


def _pct(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value * 100:.1f}%"


if __name__ == "__main__":
    sys.exit(main())
