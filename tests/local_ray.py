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
def local_ray(namespace: str | None = None) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
        ray.init(num_cpus=2, include_dashboard=False, namespace=namespace, log_to_driver=False)
        try:
            yield
        finally:
            ray.shutdown()
