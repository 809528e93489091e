"""Render the cluster screen from a real Prometheus into screenshots/.

    .venv/bin/python bench/cluster_lab.py --nodes 4 --gpus 8 --demo-node --live \\
        --url-file /tmp/lab.url &
    gputui run -- torchrun --standalone --nproc-per-node 2 bench/jobs/train_ddp_cpu.py \\
        --slow-rank 1 --slow-s 0.01 --data-sleep 0.004 --steps 0 &
    # ... a few minutes later, so that the GPU history fills:
    .venv/bin/python bench/screenshot_cluster.py --prometheus $(cat /tmp/lab.url)

The screen runs headless against that server with the real source (every query
as ``gputui cluster`` sends it), waits for the first node's GPU history and the
jobs, and is saved as SVG and PNG.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from gputui.cluster.client import PrometheusClient  # noqa: E402
from gputui.cluster.source import ClusterSource  # noqa: E402
from gputui.tui.cluster.screen import ClusterScreen, make_cluster_app  # noqa: E402
from screenshots import to_png  # noqa: E402


async def render(url: str, out: Path, size: tuple[int, int], name: str) -> Path:
    source = ClusterSource(PrometheusClient(url))
    app = make_cluster_app(source, interval_s=2.0)
    async with app.run_test(size=size) as pilot:
        screen = app.screen
        assert isinstance(screen, ClusterScreen)
        for _ in range(300):
            snap = screen.snapshot
            if (
                snap is not None
                and any(g.util_history for n in snap.nodes for g in n.gpus)
                and screen.refreshes >= 3
            ):
                break
            await pilot.pause(0.1)
        await pilot.pause(0.3)
        svg = app.export_screenshot(title=f"gputui {name}")
    source.close()
    path = out / f"{name}.svg"
    path.write_text(svg)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prometheus", required=True, metavar="URL")
    parser.add_argument("--out", type=Path, default=ROOT / "screenshots")
    args = parser.parse_args()
    for name, size in (("cluster-140x45", (140, 45)), ("cluster-100x30", (100, 30))):
        svg = asyncio.run(render(args.prometheus, args.out, size, name))
        print(svg, to_png(svg) or "(no PNG: install cairosvg or librsvg2-bin)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
