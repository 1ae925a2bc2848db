"""docs/metrics.md is what dashboards are built against: it must list exactly the emitted families
(the policy actor's, as its registry renders them; the replicas' HTTP edge, as Ray's metrics agent
exports what deployments.http.metrics declares: tests/deployments/test_metrics.py and the real app's
test read them back from that export)."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from deployments.http.metrics import FAMILIES, RAY_PREFIX
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
    rows = re.findall(
        r"^\| `((?:ray_)?specflip_[a-z_]+)` \| (\w+) \| ([^|]+) \|", DOC.read_text(), flags=re.M
    )
    return {name: (kind, labels.strip()) for name, kind, labels in rows}


_SERVE_TAGS = ("application", "deployment", "replica")  # ray.serve.metrics adds them in a replica


def _exported_by_ray() -> dict[str, tuple[str, str]]:
    return {
        RAY_PREFIX + f.name + ("_total" if f.kind == "counter" else ""): (
            f.kind,
            ", ".join(sorted((*f.tags, *_SERVE_TAGS))),
        )
        for f in FAMILIES.values()
    }


def _emitted() -> dict[str, tuple[str, str]]:
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
    # what /metrics serves: the actor's registry with the request router's counts, as it pushes them
    JOURNAL.record(Routed("r1", "on", RequestClass.INTERACTIVE, RankReason.PREFERRED, prefix_hit=True))
    policy.router.push("router:1", routed_families())
    found = _exported_by_ray()
    for family in text_string_to_metric_families(policy.text()):
        if family.name.endswith("_created"):
            continue
        name = family.name + ("_total" if family.type == "counter" else "")
        labels = sorted({k for s in family.samples for k in s.labels if k != "le"})
        found[name] = (family.type, ", ".join(labels) or "-")
    return found


def test_the_metrics_doc_lists_exactly_the_emitted_families_types_and_labels() -> None:
    assert _documented() == _emitted()
