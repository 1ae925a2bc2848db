"""Prometheus metrics of the policy actor, on its own CollectorRegistry (never the global one).

Per-replica gauges are produced at scrape time from the actor's status (a custom
collector), so they cost nothing per tick and an expired replica's series simply stop.
Modes are gauges with 1 = ON, 0 = OFF (the usual Prometheus encoding of a two-state value).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from policy.types import FleetStatus, Override, SpecMode

__all__ = ["PREFIX", "PolicyMetrics"]

PREFIX = "specflip_policy_"

# decide() takes ~1 ms per 1000 replicas; buckets from 50 us to 1 s
_DECISION_BUCKETS = (5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 1.0)


class _FleetCollector(Collector):
    def __init__(self, status: Callable[[], FleetStatus]) -> None:
        self._status = status

    def collect(self) -> Iterator[Metric]:
        status = self._status()
        labels = ["replica"]
        desired = GaugeMetricFamily(
            PREFIX + "desired_mode", "Desired speculation mode (1 on, 0 off)", labels=labels
        )
        actual = GaugeMetricFamily(
            PREFIX + "actual_mode", "Reported speculation mode (1 on, 0 off)", labels=labels
        )
        load = GaugeMetricFamily(PREFIX + "load", "Load the rule sees (per load_metric)", labels=labels)
        running = GaugeMetricFamily(PREFIX + "running", "Requests in the running batch", labels=labels)
        waiting = GaugeMetricFamily(PREFIX + "waiting", "Requests queued in the engine", labels=labels)
        accept = GaugeMetricFamily(PREFIX + "accept_length", "Reported accept length EMA", labels=labels)
        overridden = GaugeMetricFamily(
            PREFIX + "overridden", "1 while an operator override holds", labels=labels
        )
        stale = GaugeMetricFamily(PREFIX + "stale", "1 while the last report is stale", labels=labels)
        age = GaugeMetricFamily(PREFIX + "report_age_seconds", "Seconds since the last report", labels=labels)
        flips = CounterMetricFamily(PREFIX + "flips", "Desired-mode flips of the replica", labels=labels)
        for r in status.replicas:
            key = [r.replica_id]
            desired.add_metric(key, 1.0 if r.desired is SpecMode.ON else 0.0)
            actual.add_metric(key, 1.0 if r.actual is SpecMode.ON else 0.0)
            load.add_metric(key, r.load)
            running.add_metric(key, r.running)
            waiting.add_metric(key, r.waiting)
            if r.accept_length is not None:
                accept.add_metric(key, r.accept_length)
            overridden.add_metric(key, 0.0 if r.override is Override.AUTO else 1.0)
            stale.add_metric(key, 1.0 if r.stale else 0.0)
            age.add_metric(key, r.last_report_age_s)
            flips.add_metric(key, r.flips)
        yield from (desired, actual, load, running, waiting, accept, overridden, stale, age, flips)
        yield GaugeMetricFamily(
            PREFIX + "replicas", "Replicas known to the policy", value=len(status.replicas)
        )
        yield GaugeMetricFamily(
            PREFIX + "restarted", "1 if this actor process is a restart", value=float(status.restarted)
        )


class PolicyMetrics:
    """The actor's metrics; `text()` is the Prometheus exposition format."""

    def __init__(self, status: Callable[[], FleetStatus]) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_FleetCollector(status))
        self.decision_seconds = Histogram(
            PREFIX + "decision_seconds",
            "Wall time of one decide() over the whole fleet",
            buckets=_DECISION_BUCKETS,
            registry=self.registry,
        )
        self.ticks = Counter(PREFIX + "ticks", "Policy ticks run", registry=self.registry)
        self.expired = Counter(
            PREFIX + "expired_replicas", "Replicas forgotten after their TTL", registry=self.registry
        )

    def observe_tick(self, decision_s: float, expired: int) -> None:
        self.decision_seconds.observe(decision_s)
        self.ticks.inc()
        if expired:
            self.expired.inc(expired)

    def text(self) -> str:
        return generate_latest(self.registry).decode()
