"""A local Ray for tests that need real actors but no Serve app: its workers import this checkout's
modules (PYTHONPATH set to the repository root before Ray starts)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def local_ray(namespace: str | None = None, *, metrics_report_s: float | None = None) -> Iterator[None]:
    """`metrics_report_s`: how often Ray hands recorded metrics to its agent (Ray's default: 10 s)."""
    system = {} if metrics_report_s is None else {"metrics_report_interval_ms": int(metrics_report_s * 1000)}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            namespace=namespace,
            log_to_driver=False,
            _system_config=system or None,
        )
        try:
            yield
        finally:
            ray.shutdown()
