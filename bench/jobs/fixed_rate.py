"""A hooked job that steps at a fixed rate with one phase of no real work: what
the hook and its viewers cost, with nothing else in the way.

    python bench/jobs/fixed_rate.py RATE SECONDS OUT [--spin] [--linger S]

Writes ``STEPS ELAPSED_S`` to OUT (atomically) when it stops stepping.  By
default each step sleeps until its slot on an absolute schedule (late wake-ups
catch up); ``--spin`` spins the last 2 ms instead, like a job whose step takes
1 ms.  ``--linger S`` idles S seconds after writing OUT, so that a viewer takes
the last steps before the job says bye.
"""

from __future__ import annotations

import argparse
import os
import time

import gputui.hook


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("rate", type=float)
    p.add_argument("seconds", type=float)
    p.add_argument("out")
    p.add_argument("--spin", action="store_true")
    p.add_argument("--linger", type=float, default=0.0)
    args = p.parse_args()
    gputui.hook.install(batch_size=32)
    period = 1.0 / args.rate
    steps = 0
    t0 = time.perf_counter()
    next_t = t0
    while time.perf_counter() - t0 < args.seconds:
        with gputui.hook.phase("work"):
            next_t += period
            if args.spin:
                while (left := next_t - time.perf_counter()) > 0.002:
                    time.sleep(left - 0.002)
                while time.perf_counter() < next_t:
                    pass
            else:
                left = next_t - time.perf_counter()
                if left > 0:
                    time.sleep(left)
        gputui.hook.step()
        steps += 1
    elapsed = time.perf_counter() - t0
    with open(args.out + ".tmp", "w") as fh:
        fh.write(f"{steps} {elapsed}")
    os.replace(args.out + ".tmp", args.out)
    time.sleep(args.linger)


if __name__ == "__main__":
    main()
