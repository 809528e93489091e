"""Where one live snapshot spends its time: cProfile over many samples, and the
cost of each step of opening (imports, NVML init, first sample).

Usage: python bench/profile_sample.py [--samples 200]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--samples", type=int, default=200)
    args = p.parse_args()

    t0 = time.perf_counter()
    import pynvml

    t1 = time.perf_counter()
    pynvml.nvmlInit()
    t2 = time.perf_counter()
    pynvml.nvmlShutdown()
    print(f"import pynvml {1e3 * (t1 - t0):.1f} ms, nvmlInit {1e3 * (t2 - t1):.1f} ms")

    from gputui.sources.live import LiveSource

    t3 = time.perf_counter()
    source = LiveSource()
    t4 = time.perf_counter()
    source.sample()
    t5 = time.perf_counter()
    print(f"LiveSource() {1e3 * (t4 - t3):.1f} ms, first sample {1e3 * (t5 - t4):.1f} ms")

    profile = cProfile.Profile()
    profile.enable()
    for _ in range(args.samples):
        source.sample()
        time.sleep(0.02)
    profile.disable()
    stats = pstats.Stats(profile)
    stats.sort_stats("tottime").print_stats(25)
    source.close()


if __name__ == "__main__":
    main()
