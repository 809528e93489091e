"""``gputui bench``: this GPU's measured ceilings beside its datasheet figures.

HBM bandwidth, matrix-product TFLOP/s per dtype, PCIe rates with pinned and
pageable host memory, and the time per launched kernel, each the median of
repetitions timed with CUDA events after a warm-up (``gputui.ceilings``).  The
results are saved per GPU UUID for the monitor and the analyzer.  torch is
imported only here, only when measuring: gputui itself does not need it.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path
from typing import Any

from gputui import fmt
from gputui.commands.args import add_switches, command
from gputui.errors import GputuiError


def _device_index(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a GPU index: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"a GPU index is 0 or more, got {text}")
    return value


SUMMARY = "measure this GPU's ceilings (bandwidth, TFLOP/s, PCIe, launch time)"
DESCRIPTION = (
    "Measure this GPU's ceilings -- HBM bandwidth, matrix-product TFLOP/s "
    "per dtype, PCIe host<->device rates, kernel launch time -- and print them next "
    "to the datasheet figures.  Needs PyTorch with CUDA.  Results are saved per GPU "
    "for the monitor and the analyzer."
)


def register(subparsers: Any) -> None:
    parser = command(subparsers, "bench", SUMMARY, DESCRIPTION)
    add_switches(
        parser,
        ("--json", "print JSON"),
        ("--quick", "a few seconds: fewer repetitions, smaller copies"),
    )
    parser.add_argument(
        "--device", type=_device_index, default=0, metavar="N", help="GPU index (default 0)"
    )
    add_switches(
        parser,
        ("--no-cache", "measure without saving the results"),
        (
            "--cached",
            "print the results saved by earlier runs instead of measuring (no torch needed)",
        ),
    )
    parser.set_defaults(func=main)


def load_torch() -> Any:
    """torch, or a one-line error: gputui does not depend on it."""
    try:
        with warnings.catch_warnings():
            # torch warns on import about optional parts (numpy): not our one line
            warnings.simplefilter("ignore")
            import torch
    except ImportError:
        raise GputuiError(
            f"gputui bench: needs PyTorch, which this Python ({sys.executable}) cannot "
            "import; install torch with CUDA, or run gputui with your training job's Python"
        ) from None
    except Exception as exc:
        raise GputuiError(f"gputui bench: importing torch failed: {_line(exc)}") from None
    return torch


def check_cuda(torch: Any, index: int) -> None:
    try:
        available = bool(torch.cuda.is_available())
        count = int(torch.cuda.device_count()) if available else 0
    except Exception as exc:
        raise GputuiError(f"gputui bench: CUDA is not usable: {_line(exc)}") from None
    if not available:
        why = "a CPU-only build" if torch.version.cuda is None else "no NVIDIA driver or GPU"
        raise GputuiError(f"gputui bench: torch {torch.__version__} sees no CUDA GPU ({why})")
    if index >= count:
        raise GputuiError(f"gputui bench: no GPU {index}: torch sees {count} GPU(s)")


def driver_version() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        value = pynvml.nvmlSystemGetDriverVersion()
        return value.decode() if isinstance(value, bytes) else str(value)
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Measure (the seam the tests replace)."""
    torch = load_torch()
    check_cuda(torch, args.device)
    from gputui.ceilings.runner import bench_gpu

    progress = None
    if sys.stderr.isatty():

        def progress(label: str) -> None:
            print(f"  measuring {label}...", file=sys.stderr, flush=True)

    try:
        return bench_gpu(torch, args.device, args.quick, driver_version(), progress)
    except RuntimeError as exc:  # CUDA failed outside a measurement (set-up, properties)
        raise GputuiError(f"gputui bench: CUDA failed: {_line(exc)}") from None


def main(args: argparse.Namespace) -> int:
    from gputui.ceilings import cache

    if args.cached:
        docs = [doc for _path, doc in cache.cached_documents()]
        if args.json:
            print(json.dumps(docs, indent=2))
        elif not docs:
            print("no saved results: run 'gputui bench' on a GPU first", file=sys.stderr)
        else:
            from gputui.reports.bench import render
            from gputui.reports.text import emit

            emit("\n\n".join("\n".join(render(doc)) for doc in docs).splitlines())
        return 0
    doc = measure(args)
    if not any(m.get("value") is not None for m in doc["measurements"]):
        first = next((m["error"] for m in doc["measurements"] if m.get("error")), "no result")
        raise GputuiError(f"gputui bench: every measurement failed ({first})")
    saved: Path | None = None
    if not args.no_cache:
        try:
            saved = cache.save(doc, doc["gpu"]["uuid"])
        except (GputuiError, OSError) as exc:
            print(f"gputui bench: results not saved: {exc}", file=sys.stderr)
    if args.json:
        print(json.dumps({**doc, "saved_to": None if saved is None else str(saved)}, indent=2))
    else:
        from gputui.reports.bench import render
        from gputui.reports.text import emit

        lines = render(doc)
        if saved is not None:
            lines.append(f"saved to {fmt.clean(str(saved))}")
        emit(lines)
    return 0


def _line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]
