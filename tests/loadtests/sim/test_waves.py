"""A benchmark client's lockstep waves at a steady load: with every wish acted on at
once (`on_persist_s` 0) a tick landing in the gap between two waves turns speculation ON and the
dynamic rules flap, losing throughput to the static mode they should equal; with the defaults
they flip once, to the load's mode, and stay there. One replica, 2 simulated minutes per level."""

from __future__ import annotations

import itertools

import pytest

from loadtests.bench.policy_sim_waves import SETTINGS, WaveRun, lockstep_runs, lockstep_section
from loadtests.sim import SimConfig, SimPolicy, default_model, lockstep, simulate
from policy.types import PolicyConfig

BEFORE, DEFAULTS = (label for label, _ in SETTINGS)


@pytest.fixture(scope="module")
def runs() -> dict[tuple[int, str, SimPolicy], WaveRun]:
    return {(r.users, r.setting, r.policy): r for r in lockstep_runs((64, 256), duration_s=120.0)}


def test_lockstep_users_send_together_after_a_fixed_gap() -> None:
    trace = lockstep(8, duration_s=5.0, output_tokens=32, gap_s=0.25)
    res = simulate(trace, SimPolicy.ALWAYS_OFF, default_model(), SimConfig(replicas=1, drain_s=2.0))
    waves: dict[float, list] = {}
    for r in res.records:
        waves.setdefault(r.arrival, []).append(r)
    assert len(waves) >= 3 and all(len(w) == 8 for w in waves.values())  # every user in every wave
    assert all(r.output_tokens == 32 for r in res.records)
    starts = sorted(waves)
    assert starts[0] == pytest.approx(0.25)
    for a, b in itertools.pairwise(starts):  # the next wave: the last answer of this one + the gap
        assert b == pytest.approx(max(r.done for r in waves[a]) + 0.25)


@pytest.mark.parametrize("users", [64, 256])
@pytest.mark.parametrize("rule", [SimPolicy.THRESHOLD, SimPolicy.GOODPUT])
def test_with_on_persist_s_zero_the_gaps_between_waves_make_the_rules_flap(
    runs: dict, users: int, rule: SimPolicy
) -> None:
    before = runs[(users, BEFORE, rule)]
    assert before.flips_after_first_per_min > 1.0  # ON at a gap, OFF after dwell_s, again and again
    assert before.vs_best_static < 0.95  # the waves it runs ON at batch `users` cost tok/s
    assert before.best_static is SimPolicy.ALWAYS_OFF  # the load is high: OFF is the right mode


@pytest.mark.parametrize("users", [64, 256])
@pytest.mark.parametrize("rule", [SimPolicy.THRESHOLD, SimPolicy.GOODPUT])
def test_with_the_defaults_a_steady_load_in_waves_flips_once_and_stays(
    runs: dict, users: int, rule: SimPolicy
) -> None:
    now = runs[(users, DEFAULTS, rule)]
    assert now.flips_after_first_per_min <= 1.0  # the bar; in fact none
    assert now.flips_after_first_per_min == 0.0
    assert now.on_share < 0.1  # it did flip: started ON, went OFF at the first wave and stayed OFF
    assert now.vs_best_static >= 0.97  # within a few % of always-off: only the first wave or so runs ON


def test_the_report_section_has_a_row_per_level_setting_and_rule(runs: dict) -> None:
    text = lockstep_section(list(runs.values()), duration_s=120.0, gap_s=0.2, output_tokens=256)
    assert text.startswith("## lockstep closed loop")
    rows = [line for line in text.splitlines() if line.startswith("| c=")]
    assert len(rows) == 2 * len(SETTINGS) * 2  # levels x settings x dynamic rules
    assert "| c=256 | on_persist_s 0 (before) | goodput |" in text


@pytest.mark.parametrize("users", [64, 256])
def test_gaps_longer_than_on_persist_s_are_learned_and_outlasted(users: int) -> None:
    # a slow client: 4.5 s between waves (the H200 app's gaps were 2.2-3.4 s), longer than
    # on_persist_s (3 s). Without learning the dips (on_persist_max_s 0) every gap turns speculation
    # ON; with the defaults the first dip teaches the policy the gap and none flips it afterwards.
    no_learning = PolicyConfig(on_persist_max_s=0.0)
    settings = (("no learning", no_learning), ("defaults", PolicyConfig()))
    got = {
        r.setting: r
        for r in lockstep_runs((users,), duration_s=120.0, gap_s=4.5, settings=settings)
        if r.policy is SimPolicy.GOODPUT
    }
    assert got["no learning"].flips_after_first_per_min > 1.0 and got["no learning"].vs_best_static < 0.95
    assert got["defaults"].flips_after_first_per_min == 0.0
    assert got["defaults"].vs_best_static >= 0.97
