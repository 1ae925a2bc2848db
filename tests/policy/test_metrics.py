"""The actor's Prometheus metrics, parsed back from the text format (no Ray needed)."""

from __future__ import annotations

from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from policy.fleet import FleetView
from policy.metrics import PREFIX, PolicyMetrics
from policy.types import Override, PolicyConfig

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
