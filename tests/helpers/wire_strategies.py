"""Hypothesis strategies for the wire: real messages of every type (from the
embedded demo recording, plus the viewer's requests) and damaged copies."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from gputui.protocol import messages
from gputui.protocol.wire import _DECODERS

DEMO = Path(__file__).resolve().parents[2] / "gputui" / "data" / "attach_demo.jsonl.gz"
MEMORY_RECORDING = (
    Path(__file__).resolve().parents[1] / "data" / "h100" / "memory_snapshot.jsonl.gz"
)


def real_messages() -> list[dict[str, Any]]:
    """One message of every type a real job sent (the embedded demo), plus the
    viewer's requests: the starting points the mutations below work on."""
    lines = gzip.open(DEMO, "rt").read().splitlines()
    found: dict[str, dict[str, Any]] = {"hello": json.loads(lines[1])}
    for line in lines[2:]:
        msg = json.loads(line)["msg"]
        found.setdefault(msg["type"], msg)
    found.update(
        {
            messages.SUBSCRIBE: {"v": 1, "type": "subscribe", "history": 100, "memory": True},
            messages.CAPTURE: {"v": 1, "type": "capture", "id": "1-1", "steps": 5, "warmup": 1},
            messages.CAPTURE_CANCEL: {"v": 1, "type": "capture_cancel"},
            messages.PING: {"v": 1, "type": "ping"},
            messages.PONG: {"v": 1, "type": "pong", "t": 1.5},
            messages.BYE: {"v": 1, "type": "bye", "pid": 7, "steps": 3},
            messages.ERROR: {"v": 1, "type": "error", "message": "x"},
        }
    )
    # the memory snapshot's messages, from a real job on an H100 (the demo
    # predates them)
    memory = gzip.open(MEMORY_RECORDING, "rt").read().splitlines()
    for line in memory[2:]:
        msg = json.loads(line)["msg"]
        if msg["type"].startswith("memory_snapshot"):
            found.setdefault(msg["type"], msg)
    found.setdefault(
        messages.MEMSNAP, {"v": 1, "type": "memory_snapshot", "id": "1-m1", "steps": 5}
    )
    # the Python sampler's messages (the demo predates them): a profile a CPU
    # job sent, its paths shortened
    found.setdefault(messages.PYTHON_PROFILE, PROFILE)
    found.setdefault(messages.GET_PYTHON_PROFILE, {"v": 1, "type": "get_python_profile"})
    found.setdefault(messages.COMPILE, COMPILE)
    return list(found.values())


#: what a CPU job with torch.compile(backend="eager"), a print in its forward and
#: a batch-size change sent (torch 2.13; its path shortened)
COMPILE: dict[str, Any] = {
    "v": 1,
    "type": "compile",
    "frames": 8,
    "graphs": 6,
    "graph_breaks": 3,
    "recompiles": 6,
    "compile_s": 3.284,
    "compile_steps": 3,
    "breaks": [
        {
            "reason": "Failed to trace builtin operator (Avoid calling builtin `print` with "
            "argument types ['str']. Consider using an equivalent alternative "
            "function/method to `print`.)",
            "count": 3,
            "file": "/home/user/project/train.py",
            "line": 12,
            "function": "forward",
        }
    ],
    "recompile_reasons": [
        {
            "reason": "tensor 'x' size mismatch at index 0. expected 8, actual 9",
            "count": 1,
            "file": "/home/user/project/train.py",
            "line": 10,
            "function": "forward",
        },
        {"reason": "tensor 'y' size mismatch at index 0. expected 8, actual 9", "count": 1},
    ],
    "hook_recompiles": 4,
    "unavailable": [],
}


TORCH = "/venv/lib/python3.11/site-packages/torch"
PROFILE: dict[str, Any] = {
    "v": 1,
    "type": "python_profile",
    "t": 1795632522.591,
    "window_s": 2.986,
    "sampled_s": 2.980209,
    "site_s": 2.980209,
    "samples": 232,
    "interval_s": 0.01,
    "functions": [
        {
            "file": "/home/user/project/train.py",
            "function": "augment",
            "kind": "user",
            "line": 10,
            "first_line": 9,
            "self_s": 0.306697,
            "total_s": 1.606697,
            "phases_s": {"data": 0.306697},
            "site_s": 1.606697,
            "site_phases_s": {"data": 1.606697},
            "path": [0, 1],
        },
        {
            "file": f"{TORCH}/nn/modules/linear.py",
            "function": "Linear.forward",
            "kind": "torch",
            "line": 134,
            "first_line": 130,
            "self_s": 0.742676,
            "total_s": 0.742676,
            "phases_s": {"forward": 0.742676},
        },
        {
            "file": "/home/user/project/train.py",
            "function": "<module>",
            "kind": "user",
            "line": 14,
            "first_line": 1,
            "self_s": 0.341241,
            "total_s": 2.980209,
            "phases_s": {"other": 0.341241},
            "site_s": 1.373512,
            "site_phases_s": {"other": 0.341241, "forward": 1.032271},
        },
        {
            "file": "/venv/lib/python3.11/site-packages/numpy/_core/fromnumeric.py",
            "function": "sort",
            "kind": "lib",
            "line": 1090,
            "first_line": 1012,
            "self_s": 1.3,
            "total_s": 1.3,
            "phases_s": {"data": 1.3},
            "site_s": 0.0,
            "site_phases_s": {},
        },
    ],
    "lines": [
        {
            "file": "/home/user/project/train.py",
            "line": 10,
            "function": "augment",
            "kind": "user",
            "self_s": 0.285769,
            "total_s": 1.606697,
            "site_s": 1.585769,
        },
        {
            "file": f"{TORCH}/nn/modules/linear.py",
            "line": 134,
            "function": "Linear.forward",
            "kind": "torch",
            "self_s": 0.742676,
            "total_s": 0.742676,
        },
    ],
    "phases_s": {"data": 1.606697, "forward": 0.805476, "backward": 0.071615, "other": 0.49},
    "kinds_s": {"user": 0.647938, "torch": 1.032271, "lib": 1.3},
    "functions_seen": 24,
    "lines_seen": 29,
    "truncated": False,
    "notes": [],
    # call paths' frames, and the DataLoader workers' profile (newer hooks)
    "frames": [
        {"file": "/home/user/project/train.py", "function": "<module>", "line": 14, "kind": "user"},
        {"file": "/home/user/project/train.py", "function": "step", "line": 30, "kind": "user"},
    ],
    "workers": {
        "t": 1795632522.5,
        "window_s": 2.9,
        "sampled_s": 5.8,
        "samples": 580,
        "functions": [
            {
                "file": "/home/user/project/data.py",
                "function": "Data.__getitem__",
                "kind": "user",
                "line": 22,
                "self_s": 4.1,
                "total_s": 4.2,
                "site_s": 4.2,
                "path": [0],
            }
        ],
        "frames": [{"file": f"{TORCH}/utils/data/_utils/worker.py", "function": "_worker_loop"}],
    },
    "worker_processes": 2,
}


REAL = real_messages()
TYPES = sorted(_DECODERS)

NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 2**31, 2**63, 2**64, 10**24, 10**400]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e20, 1e308, -1e308, 5e-324, 1e11, 1e8 + 1]),
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, st.text(max_size=20), st.sampled_from(TYPES))


def json_values(scalars: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Any JSON value (small lists and objects) built from ``scalars``."""
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
        ),
        max_leaves=12,
    )


JSON = json_values(SCALARS)


def paths(
    node: Any, prefix: tuple[Any, ...] = (), per_list: int | None = None
) -> list[tuple[Any, ...]]:
    """Every key path into ``node`` (the first ``per_list`` items of each list)."""
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            out += paths(value, (*prefix, key), per_list)
    elif isinstance(node, list):
        for i, value in enumerate(node[:per_list]):
            out += paths(value, (*prefix, i), per_list)
    return out


@st.composite
def mutated_message(draw: st.DrawFn) -> Any:
    """A real message with a few values anywhere in it replaced by any JSON
    (a type swapped for another sometimes), or any JSON object at all."""
    if draw(st.integers(0, 9)) == 0:
        value = draw(JSON)
        if isinstance(value, dict) and draw(st.booleans()):
            value["type"] = draw(st.sampled_from(TYPES))
        return value
    data = copy.deepcopy(draw(st.sampled_from(REAL)))
    if draw(st.integers(0, 7)) == 0:
        data["type"] = draw(st.sampled_from(TYPES))
    return mutate(draw, data, paths(data, per_list=3))


def mutate(
    draw: st.DrawFn,
    data: Any,
    found: list[tuple[Any, ...]],
    values: st.SearchStrategy[Any] | None = None,
) -> Any:
    """``data`` (changed in place) with 1 to 4 of the values at ``found``'s paths
    replaced by one of ``values`` (any JSON by default), or their key dropped."""
    values = JSON if values is None else values
    for _ in range(draw(st.integers(1, 4))):
        path = draw(st.sampled_from(found))
        node = data
        try:  # an earlier change may have replaced a parent of this path
            for key in path[:-1]:
                node = node[key]
            if draw(st.integers(0, 5)) == 0 and isinstance(node, dict):
                node.pop(path[-1], None)
            else:
                node[path[-1]] = draw(values)
        except (KeyError, IndexError, TypeError):
            continue
    return data
