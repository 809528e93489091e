"""A hooked job without torch, for tests that need a job to attach to but not
a training loop: it starts in a fraction of a second, where a torch job takes
seconds (tens of seconds on a loaded machine).

Each step: ``--step-sleep`` seconds in a "data" phase and a step boundary
(``gputui.hook.step()``).  The options that start_job() passes are those of
train_cpu.py:

--install        call gputui.hook.install() (otherwise rely on `gputui run`)
--steps N        make N steps, then linger (0: step until killed)
--ready-file F   written with the pid once the first step has ended
--linger-file F  after the steps, wait until F exists (the test has read the hook)
--tag TEXT       ignored: carries any text in argv
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--install", action="store_true")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--step-sleep", type=float, default=0.01)
    p.add_argument("--ready-file")
    p.add_argument("--linger-file")
    p.add_argument("--tag", action="append", default=[])
    args = p.parse_args()
    import gputui.hook as hook

    if args.install:
        hook.install()
    total = args.steps if args.steps > 0 else 10**9
    hook.step()  # step 0 starts
    for done in range(1, total + 1):
        with hook.phase("data"):
            time.sleep(args.step_sleep)
        hook.step()
        if done == 1 and args.ready_file:
            with open(args.ready_file + ".tmp", "w") as fh:
                fh.write(str(os.getpid()))
            os.replace(args.ready_file + ".tmp", args.ready_file)
    print(f"made {total} steps", flush=True)
    if args.linger_file:
        # the deadline only ends a job whose test died
        deadline = time.monotonic() + 600
        while not os.path.exists(args.linger_file) and time.monotonic() < deadline:
            time.sleep(0.02)
    return 0


if __name__ == "__main__":
    sys.exit(main())
