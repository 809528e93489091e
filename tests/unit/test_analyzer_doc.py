"""docs/analyzer.md lists every rule as the code has it, and what the analyzer
says on the H100 recordings, as it says it now."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_analyzer_page_is_current() -> None:
    spec = importlib.util.spec_from_file_location(
        "analyzer_doc", REPO / "bench" / "analyzer_doc.py"
    )
    assert spec is not None and spec.loader is not None
    doc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(doc)
    current = doc.DOC.read_text()
    assert doc.render(current) == current, "stale: run python bench/analyzer_doc.py"
    for rule_id in doc.REGISTRY:
        assert f"| `{rule_id}` |" in current
    assert "**none**" not in current  # every rule has a test that fires it
