"""docs/metrics.md is what dashboards are built against: it must list exactly the emitted families."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from deployments.http.metrics import HttpMetrics
from deployments.routing.journal import JOURNAL, Routed, routed_families
from patched_worker.state import Strategy
from policy.metrics import PolicyMetrics
from policy.routing import RankReason, RequestClass
from policy.types import (
    DecisionSource,
    FleetStatus,
    Override,
    PolicyConfig,
    ReplicaStatus,
    SpecMode,
    TickStats,
)
from tests.engine_state import speculation_state

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def _documented() -> dict[str, tuple[str, str]]:
    rows = re.findall(r"^\| `(specflip_[a-z_]+)` \| (\w+) \| ([^|]+) \|", DOC.read_text(), flags=re.M)
    return {name: (kind, labels.strip()) for name, kind, labels in rows}


def _emitted() -> dict[str, tuple[str, str]]:
    edge = HttpMetrics()
    edge.requests.labels("/v1/completions", "200").inc()
    for h in (edge.duration, edge.ttft, edge.tpot):
        h.labels("/v1/completions").observe(0.1)
    edge.output_tokens.labels("/v1/completions").inc(3)
    engine = speculation_state(
        enabled=False, requested=False, toggles=2, accept_length_ema=None, on_steps=10, off_steps=5, resyncs=1,
        running=4, waiting=1, strategy_configured=Strategy.WARM_KV, off_cuda_graphs=True,
        off_cuda_graphs_bytes=1 << 20, resyncs_timed=1, resync_ms_total=4.0, last_resync_ms=4.0,
    )  # fmt: skip
    replica = ReplicaStatus(
        "r1",
        SpecMode.ON,
        SpecMode.OFF,
        5.0,
        4,
        1,
        2.8,
        2,
        0.1,
        Override.AUTO,
        True,
        False,
        "x",
        DecisionSource.ACTOR,
        engine,
    )
    fleet = FleetStatus((replica,), PolicyConfig(), TickStats(1, 0.1, 1e-4, 1e-4, 2, 0), False, 3.0)
    policy = PolicyMetrics(lambda: fleet)
    policy.observe_tick(1e-4, 0)
    # what /metrics serves: the actor's registry with every replica's edge families and the request
    # router's counts, as they push them
    policy.edge.push("r1", list(edge.registry.collect()))
    JOURNAL.record(Routed("r1", "on", RequestClass.INTERACTIVE, RankReason.PREFERRED, prefix_hit=True))
    policy.edge.push("router:1", routed_families())
    found: dict[str, tuple[str, str]] = {}
    for family in text_string_to_metric_families(policy.text()):
        if family.name.endswith("_created"):
            continue
        name = family.name + ("_total" if family.type == "counter" else "")
        labels = sorted({k for s in family.samples for k in s.labels if k != "le"})
        found[name] = (family.type, ", ".join(labels) or "-")
    return found


def test_the_metrics_doc_lists_exactly_the_emitted_families_types_and_labels() -> None:
    assert _documented() == _emitted()


def test_the_http_edge_emits_no_created_series() -> None:
    assert "_created" not in HttpMetrics().text()
