"""Reading Ray's metrics export in tests: the per-node metrics agent serves every Ray process's
`ray.util.metrics` / `ray.serve.metrics` series (the replicas' HTTP edge among them) as Prometheus
text on the node's metrics export port, each name with Ray's `ray_` prefix. Ray hands recorded
values to the agent every `metrics_report_interval_ms` (10 s unless set), so readers poll."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable

import ray

from tests.prom import total

__all__ = ["RAY_REPORT_S", "export_text", "total", "wait_for_export"]

RAY_REPORT_S = 10.0  # Ray's default metrics_report_interval_ms, as the app runs


def export_text(timeout_s: float = 10.0) -> str:
    """The Prometheus text of this (single-node) Ray cluster's metrics agent."""
    node = next(n for n in ray.nodes() if n["Alive"])
    url = f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics"
    with urllib.request.urlopen(url, timeout=timeout_s) as r:  # noqa: S310 - the local node's agent
        return str(r.read().decode())


def wait_for_export(ready: Callable[[str], bool], timeout_s: float = 60.0, why: str = "") -> str:
    """Scrape until `ready(text)`; the last text. Fails after `timeout_s` naming `why`."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            text = export_text()
        except OSError:  # the agent not up yet
            text = ""
        if ready(text):
            return text
        if time.monotonic() > deadline:
            raise AssertionError(f"Ray's metrics export: {why or 'condition'} not met in {timeout_s:g} s")
        time.sleep(0.5)
