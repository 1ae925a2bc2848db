"""decide() tick by tick: each table row is one tick (now, what the replica reports, what
the policy must want afterwards). Replicas apply their desired mode before the next tick."""

from __future__ import annotations

from dataclasses import replace

import pytest

from policy.rules import decide
from policy.state import PolicyState, with_override
from policy.types import Observation, Override, PolicyConfig, Reason, Rule, SpecMode

from .helpers import drive_one, obs

ON, OFF = SpecMode.ON, SpecMode.OFF
HOLD, FLIP, DWELL = Reason.RULE_HOLD, Reason.RULE_FLIP, Reason.DWELL
FLIPPING_RULES = [Rule.THRESHOLD, Rule.GOODPUT]  # the rules that propose flips (HOLD never does)


def test_threshold_hysteresis_no_flip_inside_the_band() -> None:
    config = PolicyConfig(rule=Rule.THRESHOLD, high=32, low=12, on_persist_s=0, dwell_s=0)
    drive_one(
        config,
        [
            (0, 5, ON, HOLD),  # already ON: low load changes nothing
            (1, 20, ON, HOLD),
            (2, 31, ON, HOLD),  # just under high
            (3, 32, OFF, FLIP),  # load >= high
            (4, 31, OFF, HOLD),  # inside the band: no flip back
            (5, 13, OFF, HOLD),  # just over low
            (6, 12, ON, FLIP),  # load <= low
            (7, 31, ON, HOLD),  # inside the band again
            (8, 100, OFF, FLIP),
        ],
    )


def test_hold_rule_never_flips_at_any_load() -> None:
    config = PolicyConfig(rule=Rule.HOLD, dwell_s=0)
    drive_one(config, [(0, 0, ON, HOLD), (1, 500, ON, HOLD), (2, 10_000, ON, HOLD)])
    drive_one(config, [(0, 0, OFF, HOLD), (1, 500, OFF, HOLD)], start=OFF)


def test_threshold_dwell_blocks_flips_until_it_elapses() -> None:
    config = PolicyConfig(rule=Rule.THRESHOLD, high=32, low=12, on_persist_s=0, dwell_s=10)
    drive_one(
        config,
        [
            (0, 40, OFF, FLIP),  # never flipped: no dwell yet
            (1, 0, OFF, DWELL),
            (9.99, 0, OFF, DWELL),
            (10, 0, ON, FLIP),  # exactly dwell_s later
            (11, 50, ON, DWELL),
            (15, 20, ON, HOLD),  # in the band the rule wants nothing, dwell or not
            (19.9, 50, ON, DWELL),
            (20, 50, OFF, FLIP),
        ],
    )


def test_goodput_hysteresis_comes_from_the_margin() -> None:
    # Default priors, accept 3: ON/OFF tok/s ratio is 1.13 at batch 18, 1.08 at 20, 0.92 at 30,
    # 0.89 at 32; with a 10% margin ON->OFF needs batch >= 31 and OFF->ON batch <= 19.
    config = PolicyConfig(rule=Rule.GOODPUT, goodput_margin=0.10, on_persist_s=0, dwell_s=0)
    drive_one(
        config,
        [
            (0, 1, ON, HOLD),
            (1, 24, ON, HOLD),
            (2, 30, ON, HOLD),  # OFF predicted 9% better: inside the margin
            (3, 32, OFF, FLIP),  # 12% better
            (4, 24, OFF, HOLD),
            (5, 20, OFF, HOLD),  # ON predicted 8% better: inside the margin
            (6, 18, ON, FLIP),  # 13% better
            (7, 128, OFF, FLIP),
        ],
    )


def test_goodput_dwell_applies_too() -> None:
    config = PolicyConfig(rule=Rule.GOODPUT, on_persist_s=0, dwell_s=5)
    drive_one(config, [(0, 64, OFF, FLIP), (1, 1, OFF, DWELL), (4.9, 1, OFF, DWELL), (5, 1, ON, FLIP)])


def test_goodput_fit_learns_a_replica_whose_speculation_is_slower_than_the_prior() -> None:
    """At batch 8 the prior predicts ON 1.46x faster. A replica whose ON steps take what the
    prior says stays ON; one whose ON steps take 3x as long is turned OFF by its own reports
    (a control replica that reports no tok/s stays ON). Once OFF, the ON belief fades back
    to the prior with every OFF report, so it is retried after a while, not never."""
    config = PolicyConfig(rule=Rule.GOODPUT, dwell_s=0, fit_decay=0.8)
    prior_step = config.on_step_base_s + config.on_step_per_req_s * 8
    as_prior, slow = 8 * 3.0 / prior_step, 8 * 3.0 / (3 * prior_step)  # 8 requests x 3 tokens per step
    off_tok_s = 8 / (config.off_step_base_s + config.off_step_per_req_s * 8)

    states = {"blind": PolicyState(), "as_prior": PolicyState(), "slow": PolicyState()}
    tok = {"blind": None, "as_prior": as_prior, "slow": slow}
    for tick in range(3):
        for name in states:
            _, states[name] = decide([obs(name, 8, at=tick, tok_s=tok[name])], states[name], config, tick)
    assert states["blind"].replicas["blind"].desired is ON
    assert states["as_prior"].replicas["as_prior"].desired is ON
    assert states["slow"].replicas["slow"].desired is OFF

    # now OFF, reporting plain-decode tok/s: the 3x-slow ON belief decays towards the prior
    state, back_on_at = states["slow"], None
    for tick in range(3, 40):
        actions, state = decide([obs("slow", 8, at=tick, mode=OFF, tok_s=off_tok_s)], state, config, tick)
        if actions:
            back_on_at = tick
            break
    assert back_on_at is not None and back_on_at > 5, back_on_at


def test_goodput_uses_the_reported_accept_length_else_the_last_one_else_the_default() -> None:
    # Batch 10: the default accept 2.5 predicts ON 14% better than OFF; accept 1.2 predicts it worse.
    config = PolicyConfig(rule=Rule.GOODPUT, on_persist_s=0, dwell_s=0, default_accept_length=2.5)
    state = PolicyState()
    rows = [  # (now, mode, reported accept, desired after the tick)
        (0, OFF, None, ON),  # nothing known: the default
        (1, ON, 1.2, OFF),  # a poor draft reported
        (2, OFF, None, OFF),  # remembered (ON would be 10 x 1.2 tokens per step)
    ]
    for now, mode, accept, want in rows:
        _, state = decide([obs("r", 10, at=now, mode=mode, accept=accept)], state, config, now)
        assert state.replicas["r"].desired is want, f"t={now}"
    _, fresh = decide([obs("q", 10, at=0, mode=OFF, accept=1.2)], PolicyState(), config, 0)
    assert fresh.replicas["q"].desired is OFF  # an OFF engine's last EMA beats the default


@pytest.mark.parametrize("rule", FLIPPING_RULES)
def test_fleet_limit_at_most_k_flips_per_tick_biggest_gap_first(rule: Rule) -> None:
    config = PolicyConfig(rule=rule, max_flips_per_tick=2, dwell_s=0)
    loads = {"a": 40, "b": 90, "c": 60, "d": 35, "e": 80}
    modes = dict.fromkeys(loads, ON)
    state = PolicyState()
    expected_per_tick = [{"b", "e"}, {"c", "a"}, {"d"}]  # by how far past the threshold / margin
    for tick, expected in enumerate(expected_per_tick):
        batch = [obs(r, load, at=tick, mode=modes[r]) for r, load in loads.items()]
        actions, state = decide(batch, state, config, tick)
        assert {a.replica_id for a in actions} == expected, f"tick {tick}"
        for a in actions:
            modes[a.replica_id] = ON if a.enabled else OFF
        deferred = {r for r, s in state.replicas.items() if s.reason is Reason.FLEET_LIMIT}
        assert deferred == {r for r, m in modes.items() if m is ON}, f"tick {tick}"


def test_fleet_limit_puts_off_flips_first() -> None:
    """With one flip per tick, relieving an overloaded replica beats speeding up an idle one."""
    config = PolicyConfig(high=32, low=12, max_flips_per_tick=1, on_persist_s=0, dwell_s=0)
    modes = {"x": ON, "y": OFF, "z": OFF}
    loads = {"x": 33, "y": 0, "z": 0}  # x is 1 past high; y and z are 12 under low
    state = PolicyState()
    for tick, expected in enumerate(["x", "y", "z"]):
        actions, state = decide(
            [obs(r, loads[r], at=tick, mode=modes[r]) for r in modes], state, config, tick
        )
        assert [a.replica_id for a in actions] == [expected], f"tick {tick}"
        modes[expected] = ON if actions[0].enabled else OFF


def test_overrides_do_not_count_against_the_fleet_limit() -> None:
    config = PolicyConfig(max_flips_per_tick=1, dwell_s=0)
    state = with_override(with_override(PolicyState(), "a", Override.FORCE_OFF), "b", Override.FORCE_OFF)
    batch = [obs(r, 100, at=0) for r in ("a", "b", "c", "d")]
    actions, state = decide(batch, state, config, 0)
    assert {a.replica_id for a in actions} == {"a", "b", "c"}  # two overrides + one rule flip
    assert state.replicas["d"].reason is Reason.FLEET_LIMIT


def test_min_on_replicas_keeps_the_least_loaded_on() -> None:
    config = PolicyConfig(min_on_replicas=1, dwell_s=0)
    batch = [obs("a", 50, at=0), obs("b", 40, at=0), obs("c", 35, at=0)]
    actions, state = decide(batch, PolicyState(), config, 0)
    assert {a.replica_id for a in actions} == {"a", "b"}
    assert (state.replicas["c"].desired, state.replicas["c"].reason) == (ON, Reason.MIN_ON)
    batch = [obs("a", 50, at=1, mode=OFF), obs("b", 40, at=1, mode=OFF), obs("c", 35, at=1)]
    actions, state = decide(batch, state, config, 1)
    assert actions == () and state.replicas["c"].reason is Reason.MIN_ON


def test_min_on_replicas_turns_on_the_least_loaded_when_short() -> None:
    """All OFF inside the band (the rule wants nothing): the least-loaded one is turned ON.
    A stale ON replica does not count towards the minimum."""
    config = PolicyConfig(min_on_replicas=1, dwell_s=0, stale_after_s=5)
    batch = [
        obs("stale-on", 0, at=-10, mode=ON),
        obs("d", 20, at=0, mode=OFF),
        obs("e", 15, at=0, mode=OFF),
    ]
    actions, state = decide(batch, PolicyState(), config, 0)
    assert [(a.replica_id, a.enabled) for a in actions] == [("e", True)]
    assert state.replicas["e"].reason is Reason.MIN_ON_FLIP
    assert state.replicas["d"].reason is HOLD


@pytest.mark.parametrize("rule", FLIPPING_RULES)
def test_override_wins_until_cleared_then_dwell_counts_from_the_override_flip(rule: Rule) -> None:
    config = PolicyConfig(rule=rule, high=32, low=12, dwell_s=10)
    state, mode = PolicyState(), ON
    rows: list[tuple[float, Override | None, int, SpecMode, Reason]] = [
        (0, None, 50, OFF, FLIP),
        (1, Override.FORCE_ON, 50, ON, Reason.OVERRIDE),  # inside dwell, above high: override wins
        (2, None, 100, ON, Reason.OVERRIDE),  # still overridden
        (3, Override.AUTO, 100, ON, DWELL),  # cleared; dwell counts from the override flip at t=1
        (11, None, 100, OFF, FLIP),
    ]
    for now, override, load, want, why in rows:
        if override is not None:
            state = with_override(state, "r", override)
        actions, state = decide([obs("r", load, at=now, mode=mode)], state, config, now)
        got = state.replicas["r"]
        assert (got.desired, got.reason) == (want, why), f"t={now}"
        assert len(actions) == (1 if want is not mode else 0), f"t={now}"
        mode = got.desired


@pytest.mark.parametrize("rule", FLIPPING_RULES)
def test_stale_reports_are_never_acted_on(rule: Rule) -> None:
    config = PolicyConfig(rule=rule, stale_after_s=5, dwell_s=0)
    state = PolicyState()
    rows = [
        (10, 4.0, ON, Reason.STALE),
        (11, 5.5, ON, Reason.STALE),
        (12, 7.0, OFF, FLIP),
    ]  # (now, reported_at)
    for now, at, want, why in rows:
        actions, state = decide([obs("r", 100, at=at)], state, config, now)
        assert (state.replicas["r"].desired, state.replicas["r"].reason) == (want, why), f"t={now}"
    # an override still applies to a stale replica: it gets it when it reports again
    state = with_override(state, "r", Override.FORCE_ON)
    actions, state = decide([obs("r", 100, at=0, mode=OFF)], state, config, 20)
    assert [a.enabled for a in actions] == [True]


@pytest.mark.parametrize("rule", FLIPPING_RULES)
def test_unpatched_replicas_are_never_flipped_even_by_override(rule: Rule) -> None:
    config = PolicyConfig(rule=rule, dwell_s=0)
    state = with_override(PolicyState(), "u", Override.FORCE_OFF)
    for now, load, mode in [(0, 100, ON), (1, 0, ON), (2, 100, OFF), (3, 0, OFF)]:
        actions, state = decide([obs("u", load, at=now, mode=mode, patched=False)], state, config, now)
        assert actions == ()
        assert (state.replicas["u"].desired, state.replicas["u"].reason) == (mode, Reason.UNPATCHED)


def test_replicas_missing_from_the_observations_are_forgotten_with_their_overrides() -> None:
    config = PolicyConfig(dwell_s=0)
    _, state = decide([obs("a", 0, at=0), obs("b", 0, at=0)], PolicyState(), config, 0)
    state = with_override(state, "b", Override.FORCE_OFF)
    actions, state = decide([obs("a", 0, at=1)], state, config, 1)
    assert actions == () and set(state.replicas) == {"a"} and dict(state.overrides) == {}


def test_mode_age_rebuilds_dwell_for_a_replica_the_policy_has_not_seen() -> None:
    """After an actor restart a replica reports how long it has been in its mode: dwell resumes."""
    config = PolicyConfig(dwell_s=10)
    rows = [(100, DWELL), (107.9, DWELL), (108, FLIP)]  # in its mode for 2 s at t=100
    state = PolicyState()
    for now, why in rows:
        age = 2 + (now - 100)
        _, state = decide([obs("r", 100, at=now, mode_age_s=age)], state, config, now)
        assert state.replicas["r"].reason is why, f"t={now}"


def test_decide_is_deterministic_and_leaves_its_inputs_alone() -> None:
    config = PolicyConfig(rule=Rule.GOODPUT, max_flips_per_tick=3, min_on_replicas=2, dwell_s=0)
    batch = [obs(f"r{i}", (i * 37) % 80, at=0, tok_s=1000.0 + i) for i in range(20)]
    state = with_override(PolicyState(), "r3", Override.FORCE_ON)
    first = decide(batch, state, config, 0.0)
    second = decide(batch, state, config, 0.0)
    assert first[0] == second[0] and first[1].replicas == second[1].replicas
    assert state.replicas == {} and dict(state.overrides) == {"r3": Override.FORCE_ON}
    with pytest.raises(TypeError):
        state.overrides["x"] = Override.FORCE_ON  # type: ignore[index]


def test_last_report_of_a_replica_wins_within_one_tick() -> None:
    config = PolicyConfig(dwell_s=0)
    batch: list[Observation] = [obs("r", 100, at=0), replace(obs("r", 100, at=0), running=1)]
    actions, _ = decide(batch, PolicyState(), config, 0)
    assert actions == ()


# the H200 run of 2026-12-03: a closed-loop client at c=256 with fixed lengths runs in waves of ~5 s;
# between two waves the replica's load reads ~1 for one tick, and with ON acting at once the goodput
# rule flipped ON at every gap (8 flips in 17 s). One row per 0.5-s tick: waves of batch 236, a one-tick gap.
