"""k8s/grafana-dashboard.json is an importable Grafana dashboard whose queries use real specflip metrics.

"Real" means listed in docs/metrics.md, the contract (tests/deployments/test_metrics_doc.py holds
the app to it): a panel querying a misspelled or renamed metric fails here.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.k8s.manifests import K8S, REPO

DASHBOARD = K8S / "grafana-dashboard.json"
METRICS_DOC = REPO / "docs" / "metrics.md"

# What the dashboard must show: per-replica mode, queue depth, accept length, flips, throughput,
# TTFT and TPOT.
REQUIRED = {
    "specflip_policy_actual_mode",
    "specflip_policy_load",
    "specflip_policy_accept_length",
    "specflip_policy_flips_total",
    "ray_specflip_output_tokens_total",
    "ray_specflip_ttft_seconds",
    "ray_specflip_tpot_seconds",
}
_METRIC = re.compile(r"\b(?:ray_)?specflip_[a-z0-9_]+")
_SUFFIX = re.compile(r"_(bucket|sum|count)$")


def _dashboard() -> dict[str, Any]:
    with open(DASHBOARD) as f:
        return json.load(f)


def _panels(d: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for p in d["panels"]:
        out.append(p)
        out += p.get("panels", [])  # panels nested in collapsed rows
    return out


def _exprs(d: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in _panels(d) for t in p.get("targets", [])]
    for var in d["templating"]["list"]:
        q = var.get("query")
        exprs.append(q["query"] if isinstance(q, dict) else str(q or ""))
    return exprs


def dashboard_metrics() -> set[str]:
    """Metric base names the dashboard queries."""
    return {_SUFFIX.sub("", m) for e in _exprs(_dashboard()) for m in _METRIC.findall(e)}


def known_metrics() -> set[str]:
    """Metric base names docs/metrics.md lists (histograms and counters by their base name;
    Prometheus adds _bucket/_sum/_count and keeps _total)."""
    return {_SUFFIX.sub("", m) for m in _METRIC.findall(METRICS_DOC.read_text())}


def test_dashboard_is_importable_json() -> None:
    d = _dashboard()
    assert d["uid"] and d["title"] and isinstance(d["schemaVersion"], int)
    panels = _panels(d)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for p in panels:
        assert {"x", "y", "w", "h"} <= p["gridPos"].keys(), p["title"]
        assert p["gridPos"]["x"] + p["gridPos"]["w"] <= 24, p["title"]
        if p["type"] != "row":
            assert p["targets"] and all(t["expr"].strip() for t in p["targets"]), p["title"]
            assert p["datasource"]["uid"] == "${datasource}", "panels follow the datasource picker"
    names = {v["name"] for v in d["templating"]["list"]}
    assert {"datasource", "replica"} <= names


def test_dashboard_queries_only_known_metrics() -> None:
    unknown = dashboard_metrics() - known_metrics()
    assert not unknown, f"dashboard queries metrics not in docs/metrics.md: {sorted(unknown)}"


def test_dashboard_shows_mode_load_acceptance_flips_throughput_and_latency() -> None:
    missing = REQUIRED - dashboard_metrics()
    assert not missing, missing


@pytest.mark.parametrize(
    "metric",
    [
        "specflip_policy_actual_mode",
        "specflip_policy_load",
        "specflip_policy_accept_length",
        "specflip_policy_flips_total",
    ],
)
def test_per_replica_panels_filter_by_the_replica_variable(metric: str) -> None:
    exprs = [e for e in _exprs(_dashboard()) if metric in e and "sum(" not in e and "label_values" not in e]
    assert exprs, f"no per-replica panel for {metric}"
    assert all('replica=~"$replica"' in e for e in exprs), exprs


def test_latency_panels_are_histogram_quantiles() -> None:
    for metric in ("ray_specflip_ttft_seconds", "ray_specflip_tpot_seconds"):
        exprs = [e for e in _exprs(_dashboard()) if metric in e]
        assert exprs and all(f"{metric}_bucket" in e and "histogram_quantile" in e for e in exprs), exprs


def test_known_metric_check_detects_a_typo() -> None:
    """The check above is not vacuous: one misspelled name is reported."""
    d = _dashboard()
    d["panels"][1]["targets"][0]["expr"] = "sum(specflip_policy_actual_mod)"
    found = {_SUFFIX.sub("", m) for e in _exprs(d) for m in _METRIC.findall(e)}
    assert found - known_metrics() == {"specflip_policy_actual_mod"}
