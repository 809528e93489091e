"""Print what torch's raw profiler events (``prof.profiler.kineto_results.events()``)
expose for each activity type, on a CUDA matmul and a small CPU op: the accessor
values the hook's reduction and op rows read.  Used to check a torch version.

    python bench/kineto_fields.py
"""

from __future__ import annotations

import collections

import torch

ACCESSORS = (
    "name",
    "activity_type",
    "device_type",
    "device_index",
    "device_resource_id",
    "start_thread_id",
    "correlation_id",
    "linked_correlation_id",
    "is_async",
    "is_user_annotation",
    "start_ns",
    "duration_ns",
    "flops",
    "shapes",
    "dtypes",
)


def _get(ev: object, name: str) -> object:
    fn = getattr(ev, name, None)
    try:
        return fn() if fn is not None else "<none>"
    except Exception as exc:
        return f"<{type(exc).__name__}>"


def main() -> None:
    cuda = torch.cuda.is_available()
    dev = "cuda" if cuda else "cpu"
    a = torch.randn(1024, 1024, device=dev, dtype=torch.bfloat16 if cuda else torch.float32)
    torch.mm(a, a)
    acts = [torch.profiler.ProfilerActivity.CPU]
    if cuda:
        acts.append(torch.profiler.ProfilerActivity.CUDA)
        torch.cuda.synchronize()
    with torch.profiler.profile(activities=acts, record_shapes=True, with_flops=True) as prof:
        for _ in range(2):
            torch.mm(a, a)
        if cuda:
            torch.cuda.synchronize()
    events = prof.profiler.kineto_results.events()
    print("torch", torch.__version__, "events", len(events))
    seen: collections.Counter[str] = collections.Counter()
    for ev in events:
        kind = str(_get(ev, "activity_type")) + "/" + str(_get(ev, "device_type"))
        seen[kind] += 1
        if seen[kind] > 3:
            continue
        print({name: _get(ev, name) for name in ACCESSORS})
    print("accessors:", [n for n in dir(events[0]) if not n.startswith("_")] if events else [])
    print(dict(seen))


if __name__ == "__main__":
    main()
