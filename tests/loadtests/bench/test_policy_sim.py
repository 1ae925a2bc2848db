"""The simulator report's table: one row per phase and policy, in phase order."""

from __future__ import annotations

from loadtests.bench.policy_sim import markdown_table, phase_metrics, run_all
from loadtests.sim import SimConfig, SimPolicy, default_model, low_high_low


def test_markdown_table_has_a_row_per_phase_and_policy() -> None:
    results = run_all(low_high_low(2, phase_s=5), default_model(), SimConfig(replicas=2, seed=1, drain_s=5))
    table = markdown_table([m for r in results.values() for m in phase_metrics(r)])
    lines = table.splitlines()
    assert len(lines) == 2 + 3 * len(SimPolicy)
    assert lines[1] == "|---|---|" + "|".join(["---:"] * 9) + "|"
    assert [line.split(" | ")[0] for line in lines[2:]] == ["| low"] * 4 + ["| high"] * 4 + [
        "| low again"
    ] * 4
    assert "| high | goodput |" in table
