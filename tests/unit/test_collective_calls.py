"""A collective's messages as a trace records them: each kernel's record, the
window's calls by collective, and the communication advice that reads them."""

from __future__ import annotations

from typing import Any

import pytest

from gputui.analysis.rules.capture import comm_fix, even_splits, waiting_collectives
from gputui.trace.scan import CollectiveCalls, _split_skew, collective_calls
from gputui.trace.timeline import Collective, collective_of


@pytest.mark.parametrize(
    ("values", "want"),
    [
        (("allreduce", 10, 12, "Float", 2, "[]"), (40, 48, 2, "[]")),
        (("all_to_allv", 2048, 2048, "BFloat16", 8, "[4, 4]"), (4096, 4096, 8, "[4, 4]")),
        # a dtype gputui does not know, sizes of other types, a group out of range
        (("allreduce", 10, 10, "Quaternion", 2, None), (-1, -1, 2, "")),
        (("allreduce", 1.5, True, "Float", -3, 7), (-1, -1, 0, "")),
        (("allreduce", -1, 2**60, "Float", 2**30, "x" * 600), (-1, -1, 0, "")),
    ],
)
def test_a_kernels_message_is_read_whatever_its_values(
    values: tuple[Any, ...], want: tuple[Any, ...]
) -> None:
    c = collective_of(5, 1000, *values)
    assert c is not None and (c.in_bytes, c.out_bytes, c.group, c.splits) == want


@pytest.mark.parametrize("name", [None, "", 3, ["allreduce"]])
def test_no_collective_without_a_name(name: Any) -> None:
    assert collective_of(5, 1000, name, 1, 1, "Float", 2, "[]") is None


@pytest.mark.parametrize(
    ("splits", "skew"),
    [
        ("[4, 4]", 1.0),
        ("[2, 6]", 1.5),
        ("[0, 0, 0, 8]", 4.0),
        ("[]", None),
        ("[8]", None),
        ("[0, 0]", None),
        ("[-1, 5]", None),
        ("[a, b]", None),
        ("4, 4", None),
    ],
)
def test_the_skew_of_a_split(splits: str, skew: float | None) -> None:
    assert _split_skew(splits) == skew


def test_the_windows_calls_by_collective() -> None:
    """Calls that start in the window, by name, the most GPU time first; the
    bytes of those with a size; the fastest call's rate."""
    records = [
        Collective(10, 2_000_000, "allreduce", 1_000_000, 1_000_000, 2, "[]"),
        Collective(20, 1_000_000, "allreduce", 1_000_000, -1, 2, "[]"),  # 1 GB/s
        Collective(30, 9_000_000, "allreduce", -1, -1, 0, ""),  # no size
        Collective(40, 500_000, "all_to_allv", 800, 800, 4, "[1, 1, 1, 5]"),
        Collective(50, 500_000, "all_to_allv", 800, 800, 4, "[2, 2, 2, 2]"),
        Collective(99, 500_000, "allreduce", 8, 8, 2, "[]"),  # after the window
    ]
    reduce, a2a = collective_calls(records, (10, 99))
    assert (reduce.name, reduce.calls, reduce.sized, reduce.bytes) == ("allreduce", 3, 2, 2_000_000)
    assert reduce.us == pytest.approx(12_000.0) and reduce.group == 2
    assert reduce.best_gbps == pytest.approx(1.0)
    assert reduce.bytes_per_call == 1_000_000 and reduce.split_skew is None
    assert (a2a.calls, a2a.split_calls, a2a.split_skew) == (2, 2, pytest.approx(1.75))
    assert [c.calls for c in collective_calls(records, None)] == [4, 2]


def calls(name: str, n: int, nbytes: int, us: float, best: float, skew: float | None = None) -> Any:
    return CollectiveCalls(
        name=name,
        calls=n,
        sized=n,
        bytes=n * nbytes,
        us=n * us,
        group=2,
        split_calls=n if skew is not None else 0,
        split_skew=skew,
        best_gbps=best,
    )


def test_kernels_that_wait_more_than_they_move_data() -> None:
    # 56 MiB a call averaging 16 GB/s where one call reached 100: they wait
    waits = calls("allreduce", 24, 58_869_760, 3_600.0, 100.0)
    # the same at about their fastest rate: they move data
    moves = calls("allreduce", 24, 58_869_760, 240.0, 270.0)
    # 66 kB a call in 27 ms, every call as slow: slower than any interconnect
    slow = calls("allreduce", 3, 67_588, 27_000.0, 0.0026)
    # 8 kB in 12 us, its best 0.8 GB/s: latency, not a wait
    small = calls("all_to_allv", 12, 8192, 12.0, 0.8)
    assert waiting_collectives([waits, moves, slow, small]) == [waits, slow]
    assert waiting_collectives([calls("allreduce", 2, 58_869_760, 3_600.0, 100.0)]) == []
    fix = comm_fix(("all_reduce",), sizes=[waits])
    assert fix.startswith("the allreduce kernels wait more than they move data (their fastest")
    assert "66.0KiB a call in 27.0ms" in comm_fix(("all_reduce",), sizes=[slow])
    assert "wait more" not in comm_fix(("all_reduce",), sizes=[moves])


@pytest.mark.parametrize(
    ("skews", "even"), [((1.0,), True), ((1.0, 1.05), True), ((1.0, 1.5), False), ((), False)]
)
def test_an_all_to_all_split_evenly_is_not_told_to_balance_it(
    skews: tuple[float, ...], even: bool
) -> None:
    sizes = [calls("all_to_allv", 12, 8192, 12.0, 0.8, skew) for skew in skews]
    assert even_splits(sizes) is even
    fix = comm_fix(("all_to_all",), sizes=sizes)
    assert ("balance the tokens" in fix) is not even
    assert "send fewer, larger messages" in fix
