"""What the request router routed, counted: in Ray's ingress request router (LLMRouter, where
deployments.routing.router runs) the requests routed by class and the chosen replica's mode, by
reason and prefix-affinity hits, pushed to the policy actor (`/metrics`, `/specflip/status`). It
lives apart from the router because Serve pickles the router's module by value: state kept there
would be a copy per decision. (What each replica served is its own count, exported by Ray:
`deployments.http.metrics`.)
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, Metric

from policy.metrics import ROUTED_FAMILY
from policy.routing import RankReason, RequestClass

__all__ = [
    "CLASS_MODES",
    "JOURNAL",
    "ROUTED_FAMILY",
    "UNKNOWN_MODE",
    "Routed",
    "RoutingJournal",
    "routed_families",
]

UNKNOWN_MODE = "unknown"  # a replica that publishes no stats yet
CLASS_MODES = [(c, m) for c in ("interactive", "batch") for m in ("on", "off")]  # series exist from 0


@dataclass(frozen=True, slots=True)
class Routed:
    """Where one request went."""

    replica_id: str  # Serve's replica tag (what /specflip/status and overrides use)
    mode: str  # "on" | "off" | "unknown": the replica's mode in its stats when routed
    request_class: RequestClass
    reason: RankReason
    prefix_hit: bool | None = None  # the replica had served this prompt's prefix (None: no text/affinity)


class RoutingJournal:
    """Routing decisions, counted; thread-safe (Serve may route on its own event
    loop thread while the metrics push reads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: Counter[tuple[str, str]] = Counter()  # (class, mode) -> requests routed
        self.reasons: Counter[str] = Counter()
        self.prefix: Counter[str] = Counter()  # "hit" / "miss" of prefix affinity

    def record(self, routed: Routed) -> None:
        with self._lock:
            self.counts[(routed.request_class.value, routed.mode)] += 1
            self.reasons[routed.reason.name.lower()] += 1
            if routed.prefix_hit is not None:
                self.prefix["hit" if routed.prefix_hit else "miss"] += 1

    def counts_copy(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self.counts)

    def reasons_copy(self) -> dict[str, int]:
        with self._lock:
            return dict(self.reasons)

    def prefix_copy(self) -> dict[str, int]:
        with self._lock:
            return {"hit": self.prefix["hit"], "miss": self.prefix["miss"]}


JOURNAL = RoutingJournal()


def routed_families() -> list[Metric]:
    """What the request router of this process decided (Ray's LLMRouter process, where
    deployments.routing.router runs): by class and the chosen replica's mode, by reason, prefix hits."""
    routed = CounterMetricFamily(
        ROUTED_FAMILY,
        "Requests the request router sent, by request class and the replica's mode in its routing stats",
        labels=["class", "mode"],
    )
    for (cls, mode), n in sorted((dict.fromkeys(CLASS_MODES, 0) | JOURNAL.counts_copy()).items()):
        routed.add_metric([cls, mode], n)
    reasons = CounterMetricFamily(
        "specflip_routed_reasons", "Routing decisions by why the replica's mode was chosen", labels=["reason"]
    )
    for reason, n in sorted(JOURNAL.reasons_copy().items()):
        reasons.add_metric([reason], n)
    prefix = CounterMetricFamily(
        "specflip_routed_prefix",
        "Requests with prompt text the request router sent to a replica that had (hit) or had not "
        "(miss) been sent the prompt's prefix before",
        labels=["result"],
    )
    for result, n in JOURNAL.prefix_copy().items():
        prefix.add_metric([result], n)
    return [routed, reasons, prefix]
