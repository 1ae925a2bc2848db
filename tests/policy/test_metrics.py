"""The actor's Prometheus metrics, parsed back from the text format (no Ray needed)."""

from __future__ import annotations

from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from patched_worker.state import Strategy
from policy.fleet import FleetView
from policy.metrics import ENGINE_PREFIX, PREFIX, PolicyMetrics
from policy.types import DecisionSource, Override, PolicyConfig
from tests.engine_state import speculation_state

from .helpers import obs


def _samples(text: str) -> dict[tuple[str, str], float]:
    return {
        (s.name, s.labels.get("replica", "")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_per_replica_series_follow_the_fleet_and_stop_when_a_replica_expires() -> None:
    fleet = FleetView(PolicyConfig(dwell_s=0, ttl_s=30), started_at=0.0)
    clock = [0.0]
    metrics = PolicyMetrics(lambda: fleet.status(clock[0]))
    fleet.report(obs("hot", 100, at=0, waiting=7), now=0)
    fleet.report(obs("cold", 1, at=0, accept=2.5), now=0)
    fleet.set_override("cold", Override.FORCE_ON)
    result = fleet.tick(now=0)
    metrics.observe_tick(result.decision_s, len(result.expired))
    s = _samples(metrics.text())
    assert s[(PREFIX + "desired_mode", "hot")] == 0.0 and s[(PREFIX + "actual_mode", "hot")] == 1.0
    assert s[(PREFIX + "load", "hot")] == 107 and s[(PREFIX + "waiting", "hot")] == 7
    assert s[(PREFIX + "flips_total", "hot")] == 1 and s[(PREFIX + "overridden", "cold")] == 1.0
    assert s[(PREFIX + "accept_length", "cold")] == 2.5
    assert s[(PREFIX + "decision_seconds_count", "")] == 1 and s[(PREFIX + "ticks_total", "")] == 1
    assert s[(PREFIX + "replicas", "")] == 2

    clock[0] = 40.0
    fleet.report(obs("cold", 1, at=0), now=40)
    result = fleet.tick(now=40)  # "hot" has been silent for 40 s > ttl
    metrics.observe_tick(result.decision_s, len(result.expired))
    s = _samples(metrics.text())
    assert (PREFIX + "load", "hot") not in s and s[(PREFIX + "expired_replicas_total", "")] == 1


def test_each_actor_has_its_own_registry_not_the_global_one() -> None:
    fleet = FleetView(PolicyConfig())
    a, b = PolicyMetrics(lambda: fleet.status(0)), PolicyMetrics(lambda: fleet.status(0))
    assert a.registry is not b.registry and a.registry is not REGISTRY
    assert all(not name.startswith(PREFIX) for name in REGISTRY._names_to_collectors)  # type: ignore[attr-defined]


def _labelled(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


def test_engine_state_and_policy_source_are_what_each_replica_reported() -> None:
    from dataclasses import replace

    fleet = FleetView(PolicyConfig(stale_after_s=5, ttl_s=30), started_at=0.0)
    clock = [0.0]
    metrics = PolicyMetrics(lambda: fleet.status(clock[0]))
    eager = speculation_state(
        strategy=Strategy.FULL_EXTEND, toggles=3, on_steps=7, off_steps=4, resyncs=2, running=1,
        strategy_configured=Strategy.WARM_KV, strategy_fallback="draft layout", off_cuda_graphs_note="capture failed",
        resyncs_timed=1, resync_ms_total=5.0, last_resync_ms=5.0, slow_steps=2,
    )  # fmt: skip
    reported = replace(
        obs("a", 1, at=0), policy_source=DecisionSource.OVERRIDE, engine=eager, control_timeouts=2
    )
    fleet.report(reported, now=0)
    fleet.report(replace(obs("b", 1, at=0), policy_source=DecisionSource.LOCAL_FALLBACK), now=0)
    text = metrics.text()
    assert _labelled(text, ENGINE_PREFIX + "off_cuda_graphs") == {
        (("reason", "capture failed"), ("replica", "a")): 0.0
    }
    assert _labelled(text, ENGINE_PREFIX + "strategy") == {
        (("configured", "warm_kv"), ("replica", "a"), ("strategy", "full_extend")): 1.0
    }
    s = _samples(text)
    assert (
        s[(ENGINE_PREFIX + "strategy_fallback", "a")] == 1.0
        and s[(ENGINE_PREFIX + "toggles_total", "a")] == 3
    )
    assert (
        s[(ENGINE_PREFIX + "resyncs_total", "a")] == 2
        and s[(ENGINE_PREFIX + "resync_seconds_total", "a")] == 0.005
    )
    assert s[(ENGINE_PREFIX + "control_timeouts_total", "a")] == 2
    assert s[(ENGINE_PREFIX + "slow_steps_total", "a")] == 2
    assert (ENGINE_PREFIX + "off_cuda_graphs_bytes", "a") not in s  # no graphs: no size
    assert (ENGINE_PREFIX + "toggles_total", "b") not in s  # b reported no engine state (unpatched)
    steps = _labelled(text, ENGINE_PREFIX + "decode_steps_total")
    assert steps == {(("mode", "on"), ("replica", "a")): 7, (("mode", "off"), ("replica", "a")): 4}
    assert _labelled(text, PREFIX + "source") == {
        (("replica", "a"), ("source", "override")): 1.0,
        (("replica", "b"), ("source", "local_fallback")): 1.0,
    }
    clock[0] = 6.0  # both reports are stale now: the source the actor knows is too old to show
    assert set(_labelled(metrics.text(), PREFIX + "source")) == {
        (("replica", "a"), ("source", "stale")),
        (("replica", "b"), ("source", "stale")),
    }
