"""Reading the app's Prometheus text in tests: series carry a `replica` label (every replica pushes
its own to the policy actor), so a count over the fleet is a sum over the samples that match."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def total(text: str, sample: str, **labels: str) -> float:
    """Sum of the samples named `sample` (e.g. `specflip_requests_total`) whose labels include `labels`."""
    out = 0.0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
                out += s.value
    return out
