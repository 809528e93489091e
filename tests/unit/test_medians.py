"""The rules' medians agree with the standard library's."""

from __future__ import annotations

import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gputui.analysis.medians import median, median_low

numbers = st.lists(
    st.one_of(st.integers(-(10**9), 10**9), st.floats(-1e12, 1e12, allow_nan=False)),
    min_size=1,
    max_size=40,
)


@given(numbers)
def test_the_same_as_statistics(values: list[float]) -> None:
    assert median(values) == statistics.median(values)
    assert median_low(values) == statistics.median_low(values)


def test_even_and_odd_counts_and_any_iterable() -> None:
    assert median([3, 1, 2]) == 2
    assert median(iter([4, 1, 3, 2])) == 2.5
    assert median_low((4, 1, 3, 2)) == 2


@pytest.mark.parametrize("fn", [median, median_low])
def test_no_values_is_an_error(fn: object) -> None:
    with pytest.raises(ValueError, match="no median"):
        fn([])  # type: ignore[operator]
