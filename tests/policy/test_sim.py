"""The fleet simulator: its engine model matches the numbers it was calibrated to, it
conserves requests and tokens, and on a low->high->low trace the dynamic policies get
the best of both static modes (a short run on a small fleet)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from policy.sim import SimConfig, SimPolicy, _LeastQueue, simulate
from policy.sim_model import default_model, load_calibration
from policy.sim_report import markdown_table, phase_metrics
from policy.sim_trace import low_high_low, poisson
from policy.types import SpecMode

ON, OFF = SpecMode.ON, SpecMode.OFF


@pytest.fixture(scope="module")
def small_fleet_runs() -> dict:
    trace = low_high_low(4, phase_s=20)
    config = SimConfig(replicas=4, seed=1, drain_s=20)
    return {p: phase_metrics(simulate(trace, p, config=config)) for p in SimPolicy}


def test_default_model_matches_its_calibration_targets() -> None:
    m = default_model()
    assert m.output_tok_s(OFF, 1) == pytest.approx(206, rel=1e-6)  # H200 plain engine, batch 1
    assert m.output_tok_s(OFF, 128) == pytest.approx(12636, rel=1e-6)
    assert 1.8 <= m.output_tok_s(ON, 1) / m.output_tok_s(OFF, 1) <= 2.0  # speculation ~1.9x at batch 1
    assert 0.45 <= m.output_tok_s(ON, 128) / m.output_tok_s(OFF, 128) <= 0.55  # about half when saturated


def test_dynamic_policies_get_the_best_of_both_static_modes(small_fleet_runs: dict) -> None:
    by = {(m.phase, p): m for p, ms in small_fleet_runs.items() for m in ms}
    for dyn in (SimPolicy.THRESHOLD, SimPolicy.GOODPUT):
        high = by[("high", dyn)]
        # high load: speculation cannot keep up; the dynamic fleet turns it off and serves like always-off
        assert high.output_tok_s >= 1.1 * by[("high", SimPolicy.ALWAYS_ON)].output_tok_s, dyn
        assert high.output_tok_s >= 0.98 * by[("high", SimPolicy.ALWAYS_OFF)].output_tok_s, dyn
        for phase in ("low", "low again"):
            low = by[(phase, dyn)]
            # low load: speculation on, per-token latency like always-on, far below always-off
            assert low.tpot_p50_s <= 1.05 * by[(phase, SimPolicy.ALWAYS_ON)].tpot_p50_s, (dyn, phase)
            assert low.tpot_p50_s <= 0.7 * by[(phase, SimPolicy.ALWAYS_OFF)].tpot_p50_s, (dyn, phase)
        # and it does so with one flip per replica per transition, no flapping
        assert all(by[(p, dyn)].flips_per_replica_min <= 60 / 20 for p in ("low", "high", "low again"))
    assert by[("high", SimPolicy.ALWAYS_ON)].ttft_p50_s > 1.0  # always-on queues up under high load
    for static in (SimPolicy.ALWAYS_ON, SimPolicy.ALWAYS_OFF):
        assert all(m.flips_per_replica_min == 0 for m in small_fleet_runs[static])


def test_every_request_finishes_and_every_token_is_counted_once() -> None:
    trace = poisson(rate_rps=40, duration_s=10)
    for policy in SimPolicy:
        res = simulate(trace, policy, config=SimConfig(replicas=2, drain_s=10))
        assert all(r.done is not None and r.first_token is not None for r in res.records), policy
        assert sum(res.tokens_per_bin) == pytest.approx(sum(r.output_tokens for r in res.records)), policy
        assert all(r.first_token <= r.done for r in res.records if r.done and r.first_token)


def test_the_simulation_is_deterministic_for_a_seed() -> None:
    trace = low_high_low(2, phase_s=5)
    a = simulate(trace, SimPolicy.GOODPUT, config=SimConfig(replicas=2, seed=3, drain_s=5))
    b = simulate(trace, SimPolicy.GOODPUT, config=SimConfig(replicas=2, seed=3, drain_s=5))
    assert a.records == b.records and a.flips == b.flips and a.tokens_per_bin == b.tokens_per_bin


def test_least_queue_routing_picks_the_emptiest_replica_ties_at_random() -> None:
    router = _LeastQueue(3, random.Random(0))
    router.move(0, +2)
    router.move(1, +1)
    assert router.pick() == 2
    router.move(2, +1)
    assert {router.pick() for _ in range(50)} == {1, 2}
    router.move(0, -2)
    assert router.pick() == 0


def test_measured_curves_replace_the_defaults(tmp_path: Path) -> None:
    csv_path = tmp_path / "cal.csv"
    csv_path.write_text("mode,batch,tok_s\noff,1,100\noff,64,3200\non,1,150\non,64,1600\n")
    m = load_calibration(csv_path)
    assert m.output_tok_s(OFF, 1) == pytest.approx(100) and m.output_tok_s(OFF, 64) == pytest.approx(3200)
    assert m.output_tok_s(ON, 64) == pytest.approx(1600)  # with the model's accept length
    json_path = tmp_path / "cal.json"
    json_path.write_text(
        json.dumps(
            {
                "accept_length": 2.0,
                "points": [{"mode": "on", "batch": b, "tok_s": t} for b, t in ((1, 300), (8, 1600))],
            }
        )
    )
    j = load_calibration(json_path)
    assert j.accept_length == 2.0 and j.output_tok_s(ON, 8) == pytest.approx(1600)
    assert j.off == default_model().off  # a mode missing from the file keeps its default
    bad = tmp_path / "bad.csv"
    bad.write_text("mode,batch,tok_s\nmaybe,1,100\n")
    with pytest.raises(ValueError, match="need mode"):
        load_calibration(bad)


def test_markdown_table_has_a_row_per_phase_and_policy(small_fleet_runs: dict) -> None:
    table = markdown_table([m for ms in small_fleet_runs.values() for m in ms])
    assert table.count("\n") == 2 + 3 * len(SimPolicy)
    assert "| high | goodput |" in table
