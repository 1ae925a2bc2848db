"""FleetView (the actor's memory, no Ray) tick by tick: registration, answers from the last
tick, TTL expiry, overrides, status."""

from __future__ import annotations

import pytest

from policy.fleet import FleetView
from policy.types import Override, PolicyConfig, Reason, SpecMode, UnknownReplicaError

from .helpers import obs

ON, OFF = SpecMode.ON, SpecMode.OFF
CONFIG = PolicyConfig(high=32, low=12, dwell_s=0, on_persist_s=0, stale_after_s=5, ttl_s=30)


def test_first_report_registers_and_keeps_the_mode_until_a_tick_decides() -> None:
    fleet = FleetView(CONFIG)
    d = fleet.report(obs("a", 100, at=-999.0), now=0.0)  # the replica's own clock is ignored
    assert (d.desired, d.reason, d.tick, d.overridden) == (ON, Reason.NEW.value, 0, False)
    result = fleet.tick(now=0.5)
    assert [(a.replica_id, a.enabled) for a in result.actions] == [("a", False)]
    assert fleet.status(now=0.5).replicas[0].last_report_age_s == 0.5  # re-stamped on receipt
    d = fleet.report(obs("a", 100, at=0), now=1.0)
    assert (d.desired, d.tick) == (OFF, 1) and "load 100 >= high 32" in d.reason


def test_the_flip_reason_is_repeated_until_the_replica_applies_it() -> None:
    fleet = FleetView(CONFIG)
    fleet.report(obs("a", 100, at=0), now=0)
    fleet.tick(now=0)
    fleet.tick(now=1)  # the rule now just holds OFF
    assert "high" in fleet.report(obs("a", 100, at=0, mode=ON), now=1.5).reason  # not applied yet
    fleet.tick(now=2)
    assert fleet.report(obs("a", 100, at=0, mode=OFF), now=2.5).reason == Reason.RULE_HOLD.value


def test_replicas_expire_after_the_ttl_with_their_override() -> None:
    fleet = FleetView(CONFIG)
    fleet.report(obs("quiet", 0, at=0), now=0)
    fleet.set_override("quiet", Override.FORCE_OFF)
    rows = [(10, ("quiet", "busy")), (30, ("quiet", "busy")), (30.01, ("busy",))]  # ttl 30 s after the report
    for now, present in rows:
        fleet.report(obs("busy", 0, at=0), now=now)
        result = fleet.tick(now=now)
        assert tuple(r.replica_id for r in fleet.status(now).replicas) == present, f"t={now}"
    assert result.expired == ("quiet",)
    assert fleet.status(now=31).ticks.expired_total == 1
    with pytest.raises(UnknownReplicaError, match="unknown replica 'quiet'.*registers by reporting"):
        fleet.set_override("quiet", Override.FORCE_ON)
    d = fleet.report(obs("quiet", 0, at=0), now=32)  # back: a new registration, override gone
    fleet.tick(now=32)
    assert fleet.report(obs("quiet", 0, at=0), now=33).overridden is False and d.reason == Reason.NEW.value


def test_override_takes_effect_at_the_next_tick_and_auto_clears_it() -> None:
    fleet = FleetView(CONFIG)
    fleet.report(obs("a", 0, at=0), now=0)
    fleet.tick(now=0)
    fleet.set_override("a", Override.FORCE_OFF)
    assert fleet.report(obs("a", 0, at=0), now=0.5).desired is ON  # not before the tick
    fleet.tick(now=1)
    d = fleet.report(obs("a", 0, at=0), now=1.5)
    assert (d.desired, d.overridden) == (OFF, True) and "override" in d.reason
    assert fleet.status(now=1.5).replicas[0].override is Override.FORCE_OFF
    fleet.set_override("a", Override.AUTO)
    fleet.tick(now=2)
    d = fleet.report(obs("a", 0, at=0, mode=OFF), now=2.5)
    assert (d.desired, d.overridden) == (ON, False)  # load 0 <= low: the rule is back


def test_a_view_that_does_not_know_the_replica_takes_back_the_override_it_carries() -> None:
    fleet = FleetView(CONFIG)
    fleet.report(obs("a", 0, at=0), now=0)
    fleet.set_override("a", Override.FORCE_OFF)
    fleet.tick(now=1)
    answer = fleet.report(obs("a", 0, at=0, mode=OFF), now=1.5)
    assert answer.override is Override.FORCE_OFF  # what the client will carry

    restarted = FleetView(CONFIG, restarted=True)  # the actor's memory is gone
    d = restarted.report(obs("a", 0, at=0, mode=OFF, override=answer.override), now=2)
    assert (d.overridden, d.override) == (True, Override.FORCE_OFF)
    restarted.tick(now=3)
    d = restarted.report(obs("a", 0, at=0, mode=OFF, override=Override.FORCE_OFF), now=3.5)
    assert (d.desired, d.overridden) == (OFF, True)  # load 0 would turn it ON without the override
    assert restarted.status(now=3.5).replicas[0].override is Override.FORCE_OFF

    # a known replica still carrying an override the operator has since cleared does not restore it
    restarted.set_override("a", Override.AUTO)
    restarted.tick(now=4)
    d = restarted.report(obs("a", 0, at=0, mode=OFF, override=Override.FORCE_OFF), now=4.5)
    assert (d.desired, d.overridden, d.override) == (ON, False, Override.AUTO)


def test_status_reports_every_replica_and_the_tick_stats() -> None:
    fleet = FleetView(CONFIG, started_at=100.0)
    fleet.report(obs("a", 40, at=0, waiting=4), now=100)
    fleet.report(obs("b", 0, at=0, patched=False, accept=None), now=100)
    for now in (101, 102, 103):
        fleet.tick(now=now)
    status = fleet.status(now=106)
    a, b = status.replicas
    assert (a.desired, a.actual, a.load, a.running, a.waiting, a.flips, a.stale) == (
        OFF,
        ON,
        44,
        40,
        4,
        1,
        True,
    )
    assert (b.patched, b.accept_length, b.reason) == (False, None, Reason.UNPATCHED.value)
    assert status.ticks.ticks == 3 and status.ticks.flips_total == 1 and status.ticks.last_tick_age_s == 3
    assert status.ticks.median_decision_s is not None and status.uptime_s == 6 and status.config is CONFIG
