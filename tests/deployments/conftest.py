"""The real app (Ray Serve, 2 CPU replicas of the patched engine, the policy actor), started once
for every test module of this package that asks for `app` (test_serve_*.py; start ~1-2 min).

Package scope: it lives from its first user to the end of tests/deployments. The modules after
test_serve_*.py in this package must not start Ray themselves. Tests that override modes leave
every replica at "auto" when they end.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deployments.defaults import cpu_demo_config
from deployments.local import LocalApp, run_local

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "test-control-token"


@pytest.fixture(scope="package")
def app(model_pair: Any) -> Iterator[LocalApp]:
    # a CPU-sized band: OFF at 4 requests in flight on a replica, back ON at <= 1, quick ticks
    config = cpu_demo_config(
        (model_pair.target, model_pair.draft),
        policy={"high": 4, "low": 1, "dwell_s": 1.0, "tick_s": 0.25},
        replicas={"tick_s": 0.25},
        serve={"control_token": TOKEN},
    )
    with run_local(
        config, host="127.0.0.1", port=_free_port(), num_cpus=4, worker_pythonpath=str(ROOT)
    ) as local:
        yield local


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
