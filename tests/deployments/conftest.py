"""One real CPU app shared by every HTTP test of this package that asks for `app` (starting one
takes 1-2 minutes): Ray Serve, HAProxy and Ray's ingress request router, 2 CPU replicas of the real patched engine with
the tiny trained EAGLE-3 pair, the policy actor. Package scope: it lives from its first user to the
end of tests/deployments; modules that run after its first user must not start Ray themselves.
Tests that override modes leave every replica at "auto" when they end. Tests that kill or stop
parts of an app start their own (tests/faults/)."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deployments.defaults import cpu_demo_config
from deployments.local import LocalApp, run_local

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "test-control-token"
MODEL = "specflip-tiny"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def haproxy_config() -> str:
    """The HAProxy config Serve wrote for the running local app (one node: `<dir>/<node id>/haproxy.cfg`
    under the folder `deployments.local` picked for this process; an app started earlier in the
    session left its own node's file there too: the newest is the running app's)."""
    folder = Path(os.environ["RAY_SERVE_HAPROXY_CONFIG_FILE_LOC"]).parent
    path = max(folder.glob("*/haproxy.cfg"), key=lambda p: p.stat().st_mtime)
    return path.read_text()


@pytest.fixture(scope="package")
def app(model_pair: Any) -> Iterator[LocalApp]:
    # a CPU-sized band: OFF at 4 requests in flight on a replica, back ON at <= 1, quick ticks
    config = cpu_demo_config(
        (model_pair.target, model_pair.draft),
        policy={"high": 4, "low": 1, "dwell_s": 1.0, "tick_s": 0.25},
        replicas={"tick_s": 0.25},
        serve={"control_token": TOKEN, "cors_allow_origins": ["https://app.example"]},
    )
    with run_local(
        config, host="127.0.0.1", port=free_port(), num_cpus=4, worker_pythonpath=str(ROOT)
    ) as local:
        yield local
