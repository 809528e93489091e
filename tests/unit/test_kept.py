"""A value made from (source, part) is kept while both are the same objects,
made again when either is another object, and forgotten when not asked for."""

from __future__ import annotations

from gputui.collectors.kept import Kept


def test_kept_while_the_same_objects_made_again_otherwise_forgotten_when_absent() -> None:
    made: list[tuple[object, object]] = []

    def make(source: list[int], part: dict[str, int]) -> tuple[list[int], dict[str, int]]:
        made.append((source, part))
        return (source, part)

    kept: Kept[list[int], dict[str, int], tuple[list[int], dict[str, int]]] = Kept(make)
    a, b, part = [1], [2], {"x": 1}
    first = kept.value("a", a, part), kept.value("b", b, part)
    kept.done()
    assert kept.value("a", a, part) is first[0]  # the same objects: kept
    assert kept.value("b", b, {"x": 1}) is not first[1]  # an equal part, another object
    kept.done()
    assert len(made) == 3
    kept.done()  # a sample that asked for nothing: both forgotten
    assert kept.value("a", a, part) is not first[0] and len(made) == 4
