"""The waits before a flip, tick by tick (each row: now, the replica's load, what the policy must want
afterwards): `persist_s` either way, `on_persist_s` for a wish to turn ON, and the closed-loop gaps the
policy learns so that it outlasts them (light traffic that comes and goes is no gap)."""

from __future__ import annotations

import pytest

from policy.rules import decide
from policy.state import PolicyState
from policy.types import PolicyConfig, Reason, Rule, SpecMode

from .helpers import drive_one, obs

ON, OFF = SpecMode.ON, SpecMode.OFF
HOLD, FLIP, DWELL = Reason.RULE_HOLD, Reason.RULE_FLIP, Reason.DWELL
FLIPPING_RULES = [Rule.THRESHOLD, Rule.GOODPUT]


def test_persist_a_wish_must_hold_over_consecutive_decisions_before_it_flips() -> None:
    config = PolicyConfig(rule=Rule.THRESHOLD, high=4, low=1, dwell_s=0, persist_s=1.0, on_persist_s=1.0)
    drive_one(
        config,
        [
            (0.0, 6, ON, HOLD),  # load >= high, but only just now
            (0.5, 7, ON, HOLD),
            (1.0, 6, OFF, FLIP),  # held for 1 s
            (1.25, 1, OFF, HOLD),  # a momentary dip (a closed-loop client between requests) ...
            (1.5, 6, OFF, HOLD),  # ... is forgotten once load is back
            (1.75, 0, OFF, HOLD),  # a new low starts the clock again
            (2.5, 1, OFF, HOLD),
            (2.75, 0, ON, FLIP),  # 1 s of low
            (3.0, 9, ON, HOLD),  # the wish to go OFF starts from scratch after a flip
        ],
    )


def test_persist_counts_during_dwell_and_flips_once_both_allow() -> None:
    config = PolicyConfig(rule=Rule.THRESHOLD, high=4, low=1, dwell_s=3.0, persist_s=1.0, on_persist_s=1.0)
    drive_one(
        config,
        [
            (0.0, 9, ON, HOLD),
            (1.0, 9, OFF, FLIP),
            (1.5, 0, OFF, HOLD),  # low since 1.5 s: persisting
            (3.0, 0, OFF, DWELL),  # persisted, but the last flip was 2 s ago
            (4.0, 0, ON, FLIP),  # dwell over, low held throughout
        ],
    )


def test_zero_persist_acts_on_the_first_decision_as_before() -> None:
    config = PolicyConfig(rule=Rule.THRESHOLD, high=4, low=1, dwell_s=0, persist_s=0.0, on_persist_s=0.0)
    drive_one(config, [(0, 9, OFF, FLIP), (0.25, 0, ON, FLIP), (0.5, 9, OFF, FLIP)])


_WAVES = [(0.5 * i, 1 if i % 10 == 9 else 236) for i in range(1, 120)]


@pytest.mark.parametrize("rule", FLIPPING_RULES)
def test_default_config_holds_off_through_the_gaps_between_closed_loop_waves(rule: Rule) -> None:
    config = PolicyConfig(rule=rule, high=32, low=12, dwell_s=2.0, tick_s=0.5, batch_cap=256)
    state, mode, flips = PolicyState(), ON, []
    for now, load in _WAVES:
        actions, state = decide([obs("r", load, at=now, mode=mode)], state, config, now)
        flips += [(now, a.enabled) for a in actions]
        mode = state.replicas["r"].desired
    assert flips == [(0.5, False)]  # one decision (OFF, at once), then no flip in 59 s


@pytest.mark.parametrize("rule", FLIPPING_RULES)
def test_acting_on_at_once_flaps_at_every_gap(rule: Rule) -> None:
    """The counter-example the default guards against (on_persist_s=0: the old behaviour)."""
    config = PolicyConfig(rule=rule, high=32, low=12, dwell_s=2.0, tick_s=0.5, batch_cap=256, on_persist_s=0)
    state, mode, flips = PolicyState(), ON, 0
    for now, load in _WAVES:
        actions, state = decide([obs("r", load, at=now, mode=mode)], state, config, now)
        flips += len(actions)
        mode = state.replicas["r"].desired
    assert flips >= 20  # ON at each of the 11 gaps, OFF again at the next wave


def test_default_on_persistence_turns_on_once_low_has_held_and_off_at_once() -> None:
    config = PolicyConfig(rule=Rule.THRESHOLD, high=4, low=1, dwell_s=0)
    assert (config.persist_s, config.on_persist_s) == (0.0, 3.0)
    drive_one(
        config,
        [
            (0.0, 9, OFF, FLIP),  # OFF at once
            (0.5, 0, OFF, HOLD),  # low for a moment ...
            (1.0, 9, OFF, HOLD),  # ... forgotten
            (1.5, 0, OFF, HOLD),  # low from here
            (4.0, 0, OFF, HOLD),  # 2.5 s
            (4.5, 0, ON, FLIP),  # 3 s of low
            (5.0, 9, OFF, FLIP),  # OFF at once again
        ],
    )


def test_on_persistence_is_at_least_persist_s() -> None:
    config = PolicyConfig(rule=Rule.THRESHOLD, high=4, low=1, dwell_s=0, persist_s=2.0, on_persist_s=0.5)
    drive_one(
        config,
        [
            (0.0, 9, ON, HOLD),
            (2.0, 9, OFF, FLIP),
            (2.5, 0, OFF, HOLD),
            (4.0, 0, OFF, HOLD),
            (4.5, 0, ON, FLIP),
        ],
    )


def test_a_gap_longer_than_on_persist_s_is_learned_and_the_next_one_outlasted() -> None:
    # waves 4 s apart: a dip runs from the first idle tick to the next load the rule turns OFF for
    config = PolicyConfig(rule=Rule.THRESHOLD, high=4, low=1, dwell_s=0)
    drive_one(
        config,
        [
            (0.0, 9, OFF, FLIP),
            (1.0, 1, OFF, HOLD),  # a wave's tail (low, not idle): the ON wish starts, no dip yet
            (1.5, 0, OFF, HOLD),  # idle: the dip starts
            (3.5, 0, OFF, HOLD),  # 2.5 s of low since 1.0
            (4.0, 0, ON, FLIP),  # 3 s: nothing learned yet, so ON
            (5.5, 9, OFF, FLIP),  # the next wave: a dip of 4 s (1.5 -> 5.5), window 8 s
            (6.0, 0, OFF, HOLD),  # the next gap
            (9.5, 0, OFF, HOLD),  # 3.5 s: the 3 s would have flipped here
            (10.0, 9, OFF, HOLD),  # the wave comes back first: still OFF, no flip
            (10.5, 0, OFF, HOLD),
            (18.0, 0, OFF, HOLD),  # 7.5 s
            (18.5, 0, ON, FLIP),  # a real low phase: ON once it has lasted twice the longest gap
        ],
    )


def test_learned_gaps_are_bounded_and_forgotten() -> None:
    config = PolicyConfig(rule=Rule.THRESHOLD, high=4, low=1, dwell_s=0, on_persist_max_s=6.0)
    rows = [(0.0, 9, OFF, FLIP), (0.5, 0, OFF, HOLD), (5.0, 9, OFF, HOLD)]  # a 4.5-s dip: window 6 s (cap)
    rows += [(5.5, 0, OFF, HOLD), (11.0, 0, OFF, HOLD), (11.5, 0, ON, FLIP)]  # ON after 6 s, not 9
    rows += [(12.0, 9, OFF, FLIP), (12.5, 0, OFF, HOLD), (20.0, 9, OFF, HOLD)]  # 7.5 s: a low phase, not kept
    # a minute after the 4.5-s dip it is forgotten: ON after on_persist_s again
    rows += [(71.0, 9, OFF, HOLD), (71.5, 0, OFF, HOLD), (74.5, 0, ON, FLIP)]
    drive_one(config, rows)


def test_light_traffic_before_a_wave_is_not_learned_as_a_gap() -> None:
    """Open-loop light load comes and goes (idle, a few requests, idle again): only its last idle stretch
    before the load the rule turns OFF for can be a gap, so the ON wait after it stays on_persist_s."""
    config = PolicyConfig(rule=Rule.THRESHOLD, high=4, low=1, dwell_s=0)
    drive_one(
        config,
        [
            (0.0, 9, OFF, FLIP),
            (0.5, 0, OFF, HOLD),  # idle
            (1.0, 2, OFF, HOLD),  # a request or two ...
            (1.5, 3, OFF, HOLD),  # ... and more: light traffic, no gap under way
            (2.0, 0, OFF, HOLD),  # idle again
            (2.5, 2, OFF, HOLD),
            (3.0, 0, OFF, HOLD),  # the last idle stretch starts here
            (3.5, 9, OFF, HOLD),  # the wave: a gap of 0.5 s (3.0 s counted from 0.5 would wait 6 s)
            (4.0, 0, OFF, HOLD),
            (6.5, 0, OFF, HOLD),
            (7.0, 0, ON, FLIP),  # on_persist_s after the load fell
        ],
    )


def test_a_gap_whose_next_wave_takes_a_tick_to_arrive_is_learned() -> None:
    config = PolicyConfig(rule=Rule.THRESHOLD, high=4, low=1, dwell_s=0)
    drive_one(
        config,
        [
            (0.0, 9, OFF, FLIP),
            (0.5, 0, OFF, HOLD),  # idle: the gap starts
            (2.5, 0, OFF, HOLD),
            (3.0, 2, OFF, HOLD),  # the next wave's first requests
            (3.5, 9, OFF, HOLD),  # and the rest: a gap of 3 s, window 6 s
            (4.0, 0, OFF, HOLD),
            (7.0, 0, OFF, HOLD),  # 3 s: not yet
            (10.0, 0, ON, FLIP),
        ],
    )


def test_a_wish_to_turn_on_outlasts_a_tick_inside_the_goodput_margin() -> None:
    # Default priors, accept 3 (as above): ON predicted 13% better at batch 18, 8% at 20, 8% worse at 30.
    config = PolicyConfig(rule=Rule.GOODPUT, goodput_margin=0.10, dwell_s=0)
    drive_one(
        config,
        [
            (0, 64, OFF, FLIP),
            (1, 1, OFF, HOLD),  # the wish to turn ON starts
            (2, 20, OFF, HOLD),  # a burst: ON still 8% better, inside the margin: the wish holds
            (3, 1, OFF, HOLD),
            (4, 1, ON, FLIP),  # 3 s after it started
            (5, 64, OFF, FLIP),
            (6, 1, OFF, HOLD),
            (7, 30, OFF, HOLD),  # OFF predicted better (inside the margin too): the wish starts over
            (8, 1, OFF, HOLD),
            (10, 1, OFF, HOLD),
            (11, 1, ON, FLIP),
        ],
    )


def test_with_on_persist_s_zero_nothing_is_learned() -> None:
    config = PolicyConfig(rule=Rule.THRESHOLD, high=4, low=1, dwell_s=0, on_persist_s=0)
    drive_one(config, [(0.0, 9, OFF, FLIP), (0.5, 0, ON, FLIP), (4.5, 9, OFF, FLIP), (5.0, 0, ON, FLIP)])


def test_longest_on_wait_is_the_learned_wait_at_its_cap() -> None:
    # the capped scenario above turned ON 6 s after the load fell: that is the longest wait
    assert PolicyConfig(on_persist_max_s=6.0).longest_on_wait_s == 6.0
    assert PolicyConfig(on_persist_s=12.0, on_persist_max_s=6.0).longest_on_wait_s == 12.0
    assert PolicyConfig(on_persist_s=0, persist_s=2.0, on_persist_max_s=6.0).longest_on_wait_s == 2.0
