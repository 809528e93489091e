"""A compiled CPU model with a planted graph break, for the torch.compile tests:
trains a few optimizer steps, then writes what dynamo did as JSON.

--install          call gputui.hook.install() first (the control run leaves it out)
--break KIND       the graph break in forward: print or item
--how HOW          torch.compile(model), model.compile(), or a compiled function
                   that calls the model ("function")
--eager-steps N    steps of the model itself before it is compiled (root
                   detection ends at the first)
--steps N          optimizer steps (root detection ends at the first)
--backend NAME     torch.compile's backend (default eager; inductor needs a C compiler)
--out FILE         where the JSON goes: dynamo's counters (frames, graphs, graph
                   breaks, recompiles: guard failures) and the hook's compile
                   report (gputui.hook._compile_watch), built in this process
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import torch


class Breaking(torch.nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.a, self.b = torch.nn.Linear(16, 32), torch.nn.Linear(32, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(x))
        if self.kind == "print":
            print(end="")  # PRINT BREAK
        else:
            h = h * (1.0 + 0.0 * h.sum().item())  # ITEM BREAK
        return self.b(h)  # type: ignore[no-any-return]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--install", action="store_true")
    p.add_argument("--break", dest="kind", choices=["print", "item"], default="print")
    p.add_argument(
        "--how", choices=["torch.compile", "module.compile", "function"], default="torch.compile"
    )
    p.add_argument("--eager-steps", type=int, default=0)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--backend", default="eager", help="inductor needs a C compiler on CPU")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    if args.install:
        import gputui.hook

        gputui.hook.install()
    model = Breaking(args.kind)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 16), torch.randn(8, 1)

    def train(call: Any, steps: int) -> None:
        for _ in range(steps):
            torch.nn.functional.mse_loss(call(x), y).backward()
            opt.step()
            opt.zero_grad()

    train(model, args.eager_steps)
    call: Any
    if args.how == "function":

        def forward(x: torch.Tensor) -> torch.Tensor:
            return model(x)  # type: ignore[no-any-return]

        call = torch.compile(forward, backend=args.backend)
    elif args.how == "module.compile":
        model.compile(backend=args.backend)
        call = model
    else:
        call = torch.compile(model, backend=args.backend)
    train(call, args.steps)
    from torch._dynamo import utils

    from gputui.hook._compile_watch import CompileWatch

    counters = utils.counters
    failures = getattr(utils, "guard_failures", {})
    out = {
        "torch": torch.__version__,
        "frames": dict(counters["frames"]),
        "graphs": dict(counters["stats"]).get("unique_graphs", 0),
        "graph_breaks": sum(counters["graph_break"].values()),
        "recompiles": sum(len(v) for v in failures.values()),
        "recompile_reasons": [str(r) for v in failures.values() for r in v],
        "report": CompileWatch(time.perf_counter).report(),
    }
    with open(args.out, "w") as fh:
        json.dump(out, fh)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
