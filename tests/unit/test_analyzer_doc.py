"""docs/analyzer.md lists every rule as the code has it, and what the analyzer
says on the H100 recordings, as it says it now."""

from __future__ import annotations

from tests.helpers.bench_scripts import bench_module


def test_the_analyzer_page_is_current() -> None:
    doc = bench_module("analyzer_doc")
    current = doc.DOC.read_text()
    assert doc.render(current) == current, "stale: run python bench/analyzer_doc.py"
    for rule_id in doc.REGISTRY:
        assert f"| `{rule_id}` |" in current
    assert "**none**" not in current  # every rule has a test that fires it
