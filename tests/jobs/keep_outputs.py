"""A CPU training job whose own Python is three lines: the forward (its output
kept in a list: a leak), the backward and the optimizer step.  Every other
moment of its step is torch's own code: module calls, the autograd engine,
the optimizer's Python, which is no "Python outside torch".  A deep stack of
small layers and a per-parameter Adam make that torch code a large share of
the step.

--install        call gputui.hook.install() (otherwise rely on `gputui run`)
--steps N        train N steps, then linger (0: train until killed)
--ready-file F   written with the pid once training has started
--linger-file F  after training, wait until F exists
--layers N       Linear+ReLU pairs (32), of --width features (16), each inside
                 --nest levels of nn.Sequential (12): module calls without ops
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

#: outputs kept past this many are let go (a bound for a job left running)
KEEP = 5000


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--install", action="store_true")
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--ready-file")
    p.add_argument("--linger-file")
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--nest", type=int, default=12)
    args = p.parse_args()
    torch.set_num_threads(1)
    if args.install:
        import gputui.hook

        gputui.hook.install()
    layers: list[torch.nn.Module] = []
    for _ in range(args.layers):
        layer: torch.nn.Module = torch.nn.Linear(args.width, args.width)
        for _ in range(args.nest):
            layer = torch.nn.Sequential(layer)
        layers += [layer, torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, foreach=False)
    x = torch.randn(4, args.width)
    kept: list[torch.Tensor] = []
    done = 0
    while args.steps <= 0 or done < args.steps:
        kept.append(model(x))  # the job's Python: this line,
        kept[-1].sum().backward()  # this one,
        opt.step()  # and this one
        done += 1
        if done == 1 and args.ready_file:
            with open(args.ready_file + ".tmp", "w") as fh:
                fh.write(str(os.getpid()))
            os.replace(args.ready_file + ".tmp", args.ready_file)
        if len(kept) > KEEP:
            kept.clear()
    if args.linger_file:
        while not os.path.exists(args.linger_file):
            time.sleep(0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main())
