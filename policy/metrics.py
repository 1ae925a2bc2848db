"""Prometheus metrics of the policy actor, on its own CollectorRegistry (never the global one).

Per-replica gauges are produced at scrape time from the actor's status (a custom
collector), so they cost nothing per tick and an expired replica's series simply stop.
Modes are gauges with 1 = ON, 0 = OFF (the usual Prometheus encoding of a two-state value).
The `specflip_engine_*` families are each replica's engine switch state as it reported it
(`patched_worker.state.SpeculationState`, as the replica reported it); the actor only passes them on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

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


_G, _C = GaugeMetricFamily, CounterMetricFamily
_ON = {SpecMode.ON: 1.0, SpecMode.OFF: 0.0}
# a sample's value, None for no sample, or values by the family's further labels
_Value = float | None | dict[tuple[str, ...], float]
_Row = tuple[
    str, Callable[..., GaugeMetricFamily | CounterMetricFamily], str, tuple[str, ...], Callable[..., _Value]
]

# families with a series per replica, after their `replica` label: (name without PREFIX, type, help,
# further labels, the value of a replica's status)
_FLEET: tuple[_Row, ...] = (
    ("desired_mode", _G, "Desired speculation mode (1 on, 0 off)", (), lambda r: _ON[r.desired]),
    ("actual_mode", _G, "Reported speculation mode (1 on, 0 off)", (), lambda r: _ON[r.actual]),
    ("load", _G, "Load the rule sees (per load_metric)", (), lambda r: r.load),
    ("running", _G, "Requests in the running batch", (), lambda r: r.running),
    ("waiting", _G, "Requests queued in the engine", (), lambda r: r.waiting),
    ("accept_length", _G, "Reported accept length EMA", (), lambda r: r.accept_length),
    ("overridden", _G, "1 while an operator override holds", (),
     lambda r: float(r.override is not Override.AUTO)),
    ("stale", _G, "1 while the last report is stale", (), lambda r: float(r.stale)),
    ("report_age_seconds", _G, "Seconds since the last report", (), lambda r: r.last_report_age_s),
    ("flips", _C, "Desired-mode flips of the replica", (), lambda r: r.flips),
    ("source", _G, "1 for the policy source the replica reported following (stale: report too old)",
     ("source",), lambda r: {(_source(r),): 1.0}),
)  # fmt: skip
# the same for the engine's own state (after ENGINE_PREFIX), of the replicas that reported one:
# the value of a replica's status and its engine state
_ENGINE: tuple[_Row, ...] = (
    ("off_cuda_graphs", _G, "1 if OFF steps replay plain decode CUDA graphs, 0 if they run eager (reason "
     "says why)", ("reason",), lambda r, e: {(e.off_cuda_graphs_note,): float(e.off_cuda_graphs)}),
    ("off_cuda_graphs_bytes", _G, "Device memory of the OFF graphs", (),
     lambda r, e: e.off_cuda_graphs_bytes),
    ("strategy", _G, "1 for the draft strategy in force while OFF, with the configured one",
     ("strategy", "configured"),
     lambda r, e: {(e.strategy.value, (e.strategy_configured or e.strategy).value): 1.0}),
    ("strategy_fallback", _G, "1 while the strategy in force differs from the configured one", (),
     lambda r, e: float(bool(e.strategy_fallback))),
    ("toggles", _C, "Speculation flips the engine applied", (), lambda r, e: e.toggles),
    ("resyncs", _C, "Decode-mode draft resyncs launched", (), lambda r, e: e.resyncs),
    ("resyncs_timed", _C, "Resyncs whose duration is known", (), lambda r, e: e.resyncs_timed),
    ("resync_seconds", _C, "Summed duration of the timed resyncs", (), lambda r, e: e.resync_ms_total / 1e3),
    ("last_resync_seconds", _G, "Duration of the last timed resync", (),
     lambda r, e: None if e.last_resync_ms is None else e.last_resync_ms / 1e3),
    ("decode_steps", _C, "Decode steps by mode", ("mode",),
     lambda r, e: {("on",): e.on_steps, ("off",): e.off_steps}),
    ("generated_tokens", _C, "Tokens decode steps committed, both modes (prefill's first token not)", (),
     lambda r, e: e.generated_tokens),
    ("control_timeouts", _C, "Replica control calls to the engine that timed out", (),
     lambda r, e: r.control_timeouts),
    ("slow_steps", _C, "Engine steps whose host call took 0.25 s or more", (), lambda r, e: e.slow_steps),
)  # fmt: skip


def _source(r: ReplicaStatus) -> str:
    return STALE_SOURCE if r.stale else "unknown" if r.policy_source is None else r.policy_source.value


def _per_replica(name: str, row: _Row, values: Iterable[tuple[str, _Value]]) -> Metric:
    """One family of `row`'s, named `name`, with the samples of (replica id, value) pairs."""
    _, kind, help_, labels, _ = row
    family = kind(name, help_, labels=["replica", *labels])
    for replica_id, value in values:
        for extra, v in value.items() if isinstance(value, dict) else [((), value)]:
            if v is not None:
                family.add_metric([replica_id, *extra], v)
    return family


class _FleetCollector(Collector):
    def __init__(self, status: Callable[[], FleetStatus]) -> None:
        self._status = status

    def collect(self) -> Iterator[Metric]:
        status = self._status()
        for row in _FLEET:
            yield _per_replica(PREFIX + row[0], row, ((r.replica_id, row[4](r)) for r in status.replicas))
        engines = [(r, r.engine) for r in status.replicas if r.engine is not None]
        for row in _ENGINE:
            yield _per_replica(
                ENGINE_PREFIX + row[0], row, ((r.replica_id, row[4](r, e)) for r, e in engines)
            )
        yield _G(PREFIX + "replicas", "Replicas known to the policy", value=len(status.replicas))
        yield _G(PREFIX + "restarted", "1 if this actor process is a restart", value=float(status.restarted))


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
