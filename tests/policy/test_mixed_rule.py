"""The MIXED rule: threshold per replica, plus k replicas kept ON sized from latency-class demand."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from policy.costmodel import crossover_batch
from policy.reports import Reports
from policy.rules import decide, mixed_on_target
from policy.state import PolicyState, with_override
from policy.types import Observation, Override, PolicyConfig, Rule, SpecMode
from tests.policy.helpers import obs

ON, OFF = SpecMode.ON, SpecMode.OFF
# H200 8B priors (PolicyConfig defaults): at accept 3 ON stops paying near batch 24.5
CFG = PolicyConfig(rule=Rule.MIXED, high=32, low=12, dwell_s=0.0, mixed_on_fill=0.5)


def fleet(
    loads: list[int], interactive: list[int], now: float, modes: list[SpecMode] | None = None
) -> list[Observation]:
    modes = modes or [ON] * len(loads)
    return [
        replace(obs(f"r{i}", load, at=now, mode=m), interactive=k)
        for i, (load, k, m) in enumerate(zip(loads, interactive, modes, strict=True))
    ]


def test_crossover_batch_from_the_prior() -> None:
    b = crossover_batch(CFG, np.array([3.0, 1.0, np.nan]))
    assert b[0] == pytest.approx((3 * 4.81e-3 - 7.25e-3) / (4.18e-4 - 3 * 4.16e-5), rel=1e-6)
    assert b[1] == 1.0  # accept 1: speculation never pays
    assert b[2] == pytest.approx(float(crossover_batch(CFG, np.array([CFG.default_accept_length]))[0]))


@pytest.mark.parametrize(("interactive", "k"), [(0, 0), (1, 1), (12, 1), (13, 2), (30, 3), (200, 4)])
def test_k_grows_with_latency_demand_and_is_capped_by_the_fleet(interactive: int, k: int) -> None:
    # 4 replicas at accept 3: crossover ~24.5, fill 0.5 -> ~12.2 interactive requests per ON replica
    rep = Reports.of(fleet([40] * 4, [interactive, 0, 0, 0], now=0.0))
    assert mixed_on_target(rep, np.ones(4, dtype=bool), CFG) == k


def step(observations: list[Observation], state: PolicyState, now: float, config: PolicyConfig = CFG):
    actions, state = decide(observations, state, config, now)
    return {a.replica_id: a.enabled for a in actions}, state


def test_high_load_turns_all_but_k_off_and_latency_demand_keeps_k_on() -> None:
    # 4 replicas all overloaded; 20 interactive requests in flight -> k = 2 stay ON (the least loaded)
    flips, state = step(fleet([40, 50, 36, 60], [10, 0, 10, 0], now=0.0), PolicyState(), 0.0)
    assert flips == {"r3": False, "r1": False}
    # same load with no latency demand: the threshold rule alone, everything OFF
    flips, _ = step(fleet([40, 50, 36, 60], [0, 0, 0, 0], now=0.0), PolicyState(), 0.0)
    assert flips == {f"r{i}": False for i in range(4)}
    # the threshold rule turns all four OFF under the same demand: MIXED is what holds k of them ON
    flips, _ = step(
        fleet([40, 50, 36, 60], [10, 0, 10, 0], now=0.0),
        PolicyState(),
        0.0,
        CFG.replace(rule=Rule.THRESHOLD),
    )
    assert flips == {f"r{i}": False for i in range(4)}


def test_latency_demand_turns_an_off_replica_back_on_tick_by_tick() -> None:
    modes = [OFF, OFF, OFF]
    state = PolicyState()
    flips, state = step(fleet([40, 40, 40], [0, 0, 0], 0.0, modes), state, 0.0)
    assert flips == {}  # all OFF, load high: nothing to do
    flips, state = step(fleet([40, 40, 30], [0, 0, 6], 1.0, modes), state, 1.0)
    assert flips == {"r2": True}  # interactive demand appeared: the least-loaded OFF replica goes ON
    flips, state = step(fleet([40, 40, 30], [0, 0, 6], 2.0, [OFF, OFF, ON]), state, 2.0)
    assert flips == {}  # held ON by k although its load is above low


def test_dwell_and_overrides_still_apply() -> None:
    cfg = CFG.replace(dwell_s=10.0)
    state = with_override(PolicyState(), "r0", Override.FORCE_OFF)
    flips, state = step(fleet([5, 40], [20, 0], 0.0), state, 0.0, cfg)
    assert flips == {"r0": False}  # the override wins over k; r1 (load 40) is the one kept ON
    flips, state = step(fleet([5, 40], [0, 0], 1.0, [OFF, ON]), state, 1.0, cfg)
    assert flips == {"r1": False}  # demand gone: the threshold turns r1 OFF
    flips, state = step(fleet([5, 5], [20, 0], 2.0, [OFF, OFF]), state, 2.0, cfg)
    assert flips == {}  # demand is back but r1 flipped 1 s ago (dwell 10 s) and r0 is forced OFF
    flips, state = step(fleet([5, 5], [20, 0], 11.5, [OFF, OFF]), state, 11.5, cfg)
    assert flips == {"r1": True}
