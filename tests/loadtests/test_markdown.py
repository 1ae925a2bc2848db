"""Markdown tables, and docs/benchmarks.md sections: each benchmark script replaces only its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtests.markdown import table, write_section


def test_write_section_replaces_only_its_own_section(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text(
        "# Benchmarks\n\n## engine\n\nkeep me\n\n## policy\n\nold numbers\n\n## loadtests\n\nkeep me too\n"
    )
    write_section(doc, "## policy\n\nnew numbers\n")
    text = doc.read_text()
    assert "old numbers" not in text and "new numbers" in text
    assert text.index("## engine") < text.index("## policy") < text.index("## loadtests")
    assert text.count("keep me") == 2


def test_write_section_creates_the_file_or_appends(tmp_path: Path) -> None:
    doc = tmp_path / "docs" / "benchmarks.md"
    write_section(doc, "## policy\n\nnumbers\n")
    assert doc.read_text().startswith("# Benchmarks\n") and "## policy" in doc.read_text()


def test_table_aligns_columns_as_asked_and_refuses_ragged_rows() -> None:
    text = table(["phase", "tok/s", "p50"], [["low", "82.0", "0.61"], ["high", 1200, "-"]], align="lrr")
    assert text.splitlines() == [
        "| phase | tok/s | p50 |",
        "|---|---:|---:|",
        "| low | 82.0 | 0.61 |",
        "| high | 1200 | - |",
    ]
    assert table(["a", "b"], []).splitlines()[1] == "|---|---|"
    with pytest.raises(ValueError, match="2 cells for 3 columns"):
        table(["a", "b", "c"], [["x", "y"]])
