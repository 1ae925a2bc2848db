"""The P6 benchmark script owns only its section of docs/benchmarks.md."""

from __future__ import annotations

from pathlib import Path

from deployments.bench_overhead import SECTION, write_section


def test_the_section_is_replaced_in_place_and_other_sections_stay(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text(
        f"# Benchmarks\n\n## policy\n\npolicy table\n\n{SECTION}\n\nold numbers\n\n## later\n\nkeep me\n"
    )
    write_section(doc, f"{SECTION}\n\nnew numbers\n")
    assert doc.read_text() == (
        f"# Benchmarks\n\n## policy\n\npolicy table\n\n{SECTION}\n\nnew numbers\n\n## later\n\nkeep me\n"
    )


def test_the_section_is_appended_to_a_doc_without_it_or_creates_one(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    write_section(doc, f"{SECTION}\n\nnumbers\n")
    assert doc.read_text() == f"# Benchmarks\n\n{SECTION}\n\nnumbers\n"
    doc.write_text("# Benchmarks\n\n## policy\n\nx\n")
    write_section(doc, f"{SECTION}\n\nnumbers\n")
    assert doc.read_text() == f"# Benchmarks\n\n## policy\n\nx\n\n{SECTION}\n\nnumbers\n"
