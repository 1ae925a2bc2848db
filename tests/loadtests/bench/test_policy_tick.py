"""The benchmark script's plumbing (no timing assertions: the numbers go to docs/benchmarks.md)."""

from __future__ import annotations

from loadtests.bench.policy_tick import bench_fleet_model
from policy.types import Rule


def test_fleet_model_benchmark_runs_both_rules_on_a_small_fleet() -> None:
    for rule in (Rule.THRESHOLD, Rule.GOODPUT):
        timing = bench_fleet_model(rule, replicas=20, ticks=12)
        assert timing.ticks == len(timing.wall_s) == 12 and timing.flips > 0
