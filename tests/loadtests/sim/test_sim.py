"""The fleet simulator: its engine model matches the numbers it was calibrated to, it
conserves requests and tokens, closed-loop users behave like Locust users, and on
low->high->low traces the dynamic policies get the best of both static modes (evenly
spread open-loop demand) or beat both (closed-loop users pinned to replicas); short runs
on a small fleet."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pytest

from loadtests.bench.policy_sim import phase_metrics
from loadtests.sim import SimConfig, SimPolicy, simulate
from loadtests.sim.model import default_model, load_calibration
from loadtests.sim.run import _LeastQueue
from loadtests.sim.trace import ClosedLoop, Phase, low_high_low, poisson, sticky_users
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


@pytest.fixture(scope="module")
def sticky_runs() -> dict:
    trace = sticky_users(4, phase_s=20)
    config = SimConfig(replicas=4, seed=1, drain_s=20)
    return {p: {m.phase: m for m in phase_metrics(simulate(trace, p, config=config))} for p in SimPolicy}


def test_with_users_pinned_unevenly_the_dynamic_policies_beat_both_static_modes(sticky_runs: dict) -> None:
    on, off = sticky_runs[SimPolicy.ALWAYS_ON], sticky_runs[SimPolicy.ALWAYS_OFF]
    for dyn in (SimPolicy.THRESHOLD, SimPolicy.GOODPUT):
        d = sticky_runs[dyn]
        # high load: hot replicas OFF, cold ones ON -> more than either static mode serves
        assert d["high"].output_tok_s >= 1.03 * on["high"].output_tok_s, dyn
        assert d["high"].output_tok_s >= 1.01 * off["high"].output_tok_s, dyn
        assert 0 < d["high"].on_share < 1, dyn  # a mixed fleet, not one mode
        # low load: every replica below the crossover -> ON everywhere, like always-on
        assert d["low"].tpot_p50_s <= 1.02 * on["low"].tpot_p50_s, dyn
        assert d["low"].tpot_p50_s <= 0.7 * off["low"].tpot_p50_s, dyn
        assert d["low"].on_share == 1.0, dyn


def test_closed_loop_users_wait_for_their_answer_think_and_stop_with_their_phase() -> None:
    trace = ClosedLoop(
        (Phase("many", 10, users=6), Phase("few", 10, users=2)), think_s=0.2, replica_weights=(3.0, 1.0)
    )
    res = simulate(trace, SimPolicy.ALWAYS_OFF, config=SimConfig(replicas=2, drain_s=10))
    pins = trace.pinning(2, 0)
    by_user: dict[int, list] = {}
    for r in res.records:
        assert r.replica == pins[r.user]  # pinned: session affinity, never rerouted
        by_user.setdefault(r.user, []).append(r)
    assert set(by_user) == set(range(6))
    for user, reqs in by_user.items():
        for a, b in itertools.pairwise(reqs):
            assert a.done is not None and b.arrival > a.done  # one request in flight per user, then thinks
        if user >= 2:  # gone after the first phase: nothing sent after it (its last answer may come later)
            assert all(r.arrival < 10 for r in reqs)
    assert any(r.arrival >= 10 for r in by_user[0]) and any(r.arrival >= 10 for r in by_user[1])
    assert sum(res.tokens_per_bin) == pytest.approx(
        sum(r.output_tokens for r in res.records if r.done is not None)
    )


def test_closed_loop_traces_check_their_input() -> None:
    with pytest.raises(ValueError, match="users >= 0"):
        ClosedLoop((Phase("x", 10, users=-1),))
    with pytest.raises(ValueError, match="think_s"):
        ClosedLoop((Phase("x", 10, users=1),), think_s=0)
    with pytest.raises(ValueError, match="3 entries for 2 replicas"):
        ClosedLoop((Phase("x", 10, users=1),), replica_weights=(1.0, 1.0, 1.0)).pinning(2, 0)


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
