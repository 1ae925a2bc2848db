"""Prometheus metrics of the policy actor, on its own CollectorRegistry (never the global one).

Per-replica gauges are produced at scrape time from the actor's status (a custom
collector), so they cost nothing per tick and an expired replica's series simply stop.
Modes are gauges with 1 = ON, 0 = OFF (the usual Prometheus encoding of a two-state value).
The `specflip_engine_*` families are each replica's engine switch state as it reported it
(`patched_worker.state.SpeculationState`, as the replica reported it); the actor only passes them on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from policy.types import STALE_SOURCE, FleetStatus, Override, ReplicaStatus, SpecMode

__all__ = [
    "ENGINE_PREFIX",
    "PREFIX",
    "PREFIX_FAMILY",
    "REASONS_FAMILY",
    "ROUTED_FAMILY",
    "PolicyMetrics",
    "PushedFamilies",
]

PREFIX = "specflip_policy_"
ENGINE_PREFIX = "specflip_engine_"
# the request router's pushed families /specflip/status sums (deployments.routing.journal)
ROUTED_FAMILY = "specflip_routed_requests"  # routing decisions by class and the chosen replica's mode
REASONS_FAMILY = "specflip_routed_reasons"
PREFIX_FAMILY = "specflip_routed_prefix"

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
        source = GaugeMetricFamily(
            PREFIX + "source",
            "1 for the policy source the replica reported following (stale: report too old)",
            labels=["replica", "source"],
        )
        for r in status.replicas:
            reported = "unknown" if r.policy_source is None else r.policy_source.value
            source.add_metric([r.replica_id, STALE_SOURCE if r.stale else reported], 1.0)
        yield from (desired, actual, load, running, waiting, accept, overridden, stale, age, flips, source)
        yield from _engine_families(status.replicas)
        yield GaugeMetricFamily(
            PREFIX + "replicas", "Replicas known to the policy", value=len(status.replicas)
        )
        yield GaugeMetricFamily(
            PREFIX + "restarted", "1 if this actor process is a restart", value=float(status.restarted)
        )


def _engine_families(replicas: tuple[ReplicaStatus, ...]) -> Iterator[Metric]:
    p, r_ = ENGINE_PREFIX, ["replica"]
    graphs = GaugeMetricFamily(
        p + "off_cuda_graphs",
        "1 if OFF steps replay plain decode CUDA graphs, 0 if they run eager (reason says why)",
        labels=["replica", "reason"],
    )
    graph_bytes = GaugeMetricFamily(p + "off_cuda_graphs_bytes", "Device memory of the OFF graphs", labels=r_)
    strategy = GaugeMetricFamily(
        p + "strategy",
        "1 for the draft strategy in force while OFF, with the configured one",
        labels=["replica", "strategy", "configured"],
    )
    fallback = GaugeMetricFamily(
        p + "strategy_fallback", "1 while the strategy in force differs from the configured one", labels=r_
    )
    toggles = CounterMetricFamily(p + "toggles", "Speculation flips the engine applied", labels=r_)
    resyncs = CounterMetricFamily(p + "resyncs", "Decode-mode draft resyncs launched", labels=r_)
    timed = CounterMetricFamily(p + "resyncs_timed", "Resyncs whose duration is known", labels=r_)
    resync_s = CounterMetricFamily(p + "resync_seconds", "Summed duration of the timed resyncs", labels=r_)
    last_resync = GaugeMetricFamily(p + "last_resync_seconds", "Duration of the last timed resync", labels=r_)
    steps = CounterMetricFamily(p + "decode_steps", "Decode steps by mode", labels=["replica", "mode"])
    tokens = CounterMetricFamily(
        p + "generated_tokens",
        "Tokens decode steps committed, both modes (prefill's first token not)",
        labels=r_,
    )
    timeouts = CounterMetricFamily(
        p + "control_timeouts", "Replica control calls to the engine that timed out", labels=r_
    )
    for r in replicas:
        e, key = r.engine, [r.replica_id]
        if e is None:
            continue
        graphs.add_metric([r.replica_id, e.off_cuda_graphs_note], 1.0 if e.off_cuda_graphs else 0.0)
        if e.off_cuda_graphs_bytes is not None:
            graph_bytes.add_metric(key, e.off_cuda_graphs_bytes)
        strategy.add_metric(
            [r.replica_id, e.strategy.value, (e.strategy_configured or e.strategy).value], 1.0
        )
        fallback.add_metric(key, 1.0 if e.strategy_fallback else 0.0)
        toggles.add_metric(key, e.toggles)
        resyncs.add_metric(key, e.resyncs)
        timed.add_metric(key, e.resyncs_timed)
        resync_s.add_metric(key, e.resync_ms_total / 1e3)
        if e.last_resync_ms is not None:
            last_resync.add_metric(key, e.last_resync_ms / 1e3)
        steps.add_metric([r.replica_id, "on"], e.on_steps)
        steps.add_metric([r.replica_id, "off"], e.off_steps)
        tokens.add_metric(key, e.generated_tokens)
        timeouts.add_metric(key, r.control_timeouts)
    yield from (graphs, graph_bytes, strategy, fallback, toggles, resyncs, timed, resync_s, last_resync)
    yield from (steps, tokens, timeouts)


class PushedFamilies(Collector):
    """The routing counts the request router pushes (Ray's LLMRouter process, `router:<pid>`): its
    families as prometheus_client collected them, rendered as one family per name with the
    process as a `replica` label (counters monotonic per process). The replicas' own HTTP
    metrics never come here: Ray's metrics agent exports them (deployments.http.metrics)."""

    def __init__(self) -> None:
        self._by_replica: dict[str, list[Metric]] = {}

    def push(self, source: str, families: list[Metric]) -> None:
        self._by_replica[source] = families

    def totals(self, name: str, *labels: str) -> dict[tuple[str, ...], float]:
        """Sum over pushing processes of the family `name`'s samples, by the values of `labels`."""
        out: dict[tuple[str, ...], float] = {}
        for families in self._by_replica.values():
            for family in families:
                if family.name != name:
                    continue
                for sample in family.samples:
                    if sample.name.endswith("_created"):
                        continue
                    key = tuple(sample.labels.get(label, "") for label in labels)
                    out[key] = out.get(key, 0.0) + sample.value
        return out

    def collect(self) -> Iterator[Metric]:
        merged: dict[str, Metric] = {}
        for rid, families in sorted(self._by_replica.items()):
            for family in families:
                out = merged.get(family.name)
                if out is None:
                    out = merged[family.name] = Metric(
                        family.name, family.documentation, family.type, family.unit
                    )
                for sample in family.samples:
                    out.samples.append(sample._replace(labels={"replica": rid, **sample.labels}))
        yield from merged.values()


class PolicyMetrics:
    """The actor's metrics; `text()` is the Prometheus exposition format."""

    def __init__(self, status: Callable[[], FleetStatus]) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_FleetCollector(status))
        self.router = PushedFamilies()
        self.registry.register(self.router)
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
