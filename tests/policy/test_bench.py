"""The benchmark script's plumbing (no timing assertions: the numbers go to docs/benchmarks.md)."""

from __future__ import annotations

from pathlib import Path

from policy.bench import bench_fleet_model, write_section
from policy.types import Rule


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


def test_fleet_model_benchmark_runs_both_rules_on_a_small_fleet() -> None:
    for rule in Rule:
        timing = bench_fleet_model(rule, replicas=20, ticks=12)
        assert timing.ticks == len(timing.wall_s) == 12 and timing.flips > 0
