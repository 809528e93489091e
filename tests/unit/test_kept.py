"""A value made from (source, part) is kept while both are the same objects,
made again when either is another object, and forgotten when a sample does not
hold them."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gputui.host.kept import KeptRun


def test_kept_while_the_same_objects_made_again_otherwise_forgotten_when_absent() -> None:
    made: list[tuple[object, object]] = []

    def make(source: list[int], part: dict[str, int]) -> tuple[list[int], dict[str, int]]:
        made.append((source, part))
        return (source, part)

    kept: KeptRun[list[int], dict[str, int], tuple[list[int], dict[str, int]]] = KeptRun(make)
    a, b, part = [1], [2], {"x": 1}
    first = kept.values([a, b], [part, part])
    again = kept.values([a, b], [part, {"x": 1}])
    assert again[0] is first[0]  # the same objects: kept
    assert again[1] is not first[1]  # an equal part, another object
    assert len(made) == 3
    kept.values([], [])  # a sample that asked for nothing: both forgotten
    assert kept.values([a], [part])[0] is not first[0] and len(made) == 4


# -- KeptRun: a whole sample at once ------------------------------------------------
def _run() -> tuple[KeptRun[Any, Any, Any], list[tuple[Any, Any]]]:
    made: list[tuple[Any, Any]] = []

    def make(source: Any, part: Any) -> tuple[Any, Any]:
        made.append((source, part))
        return (source, part)

    return KeptRun(make), made


def test_a_run_keeps_the_places_that_hold_the_same_objects() -> None:
    run, made = _run()
    sources = [[i] for i in range(20)]
    parts = [{"p": i} for i in range(20)]
    first = run.values(sources, parts)
    assert len(made) == 20
    again = run.values(list(sources), list(parts))
    assert all(a is b for a, b in zip(first, again, strict=True)) and len(made) == 20
    # one new source, one new (equal) part: those two made again, the rest kept
    sources[3] = [3]
    parts[7] = {"p": 7}
    third = run.values(list(sources), list(parts))
    assert len(made) == 22 and third[3] is not first[3] and third[7] is not first[7]
    assert all(third[i] is first[i] for i in range(20) if i not in (3, 7))


def test_a_run_whose_places_shifted_finds_its_values_by_identity() -> None:
    run, made = _run()
    sources = [[i] for i in range(20)]
    parts = [None] * 20
    first = run.values(sources, parts)
    newcomer = [99]
    shifted = run.values([newcomer, *sources[:-1]], [None] * 20)  # one came, one went
    assert len(made) == 21 and made[-1] == (newcomer, None)
    assert all(shifted[i + 1] is first[i] for i in range(19))


@given(st.data())
def test_a_run_makes_what_make_makes_and_keeps_only_the_same_objects(data: Any) -> None:
    run, made = _run()
    pool = [[i] for i in range(12)]
    part_pool = [{"p": i} for i in range(4)] + [None]
    #: the values of the last sample, by the ids of the objects they were made for
    #: (a sample may hold the same objects at several places: a value each)
    last: dict[tuple[int, int], list[Any]] = {}
    for _ in range(data.draw(st.integers(1, 6))):
        size = data.draw(st.integers(0, 12))
        sources = [data.draw(st.sampled_from(pool)) for _ in range(size)]
        parts = [data.draw(st.sampled_from(part_pool)) for _ in range(size)]
        before = len(made)
        out = run.values(sources, parts)
        assert list(out) == [(s, p) for s, p in zip(sources, parts, strict=True)]
        for s, p, value in zip(sources, parts, out, strict=True):
            # a kept value is the one made for these very objects at the last sample
            if value[0] is not s or value[1] is not p:
                raise AssertionError("a value made for other objects")
            kept = any(value is v for v in last.get((id(s), id(p)), ()))
            assert kept or any(m[0] is s and m[1] is p for m in made[before:])
        last = {}
        for s, p, v in zip(sources, parts, out, strict=True):
            last.setdefault((id(s), id(p)), []).append(v)
