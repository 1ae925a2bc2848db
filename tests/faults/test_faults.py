"""Faults under load, on an app of its own (2 CPU replicas), the way Ray Serve's controller-recovery
tests do it: concurrent streaming clients run while the policy actor, one replica's process and
the Serve controller are killed in turn; each test prints sent / succeeded / failed per phase.
Only requests in flight on a killed replica may fail; the policy forgets a dead replica within
its TTL; the replacement runs the mode the policy wants. Last, a shutdown drains in-flight streams.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from deployments.config import POLICY_NAMESPACE
from deployments.defaults import cpu_demo_config
from deployments.local import LocalApp, run_local, wait_until
from tests.deployments.conftest import MODEL, TOKEN, free_port
from tests.faults.load import StreamingLoad
from tests.reporting import report

pytestmark = pytest.mark.serve
ROOT = Path(__file__).resolve().parents[2]
TTL_S = 10.0
ACTOR = "specflip-policy"


@pytest.fixture(scope="module")
def app(model_pair: Any) -> Iterator[LocalApp]:
    config = cpu_demo_config(
        (model_pair.target, model_pair.draft),
        policy={"high": 6, "low": 1, "dwell_s": 1.0, "tick_s": 0.25, "stale_after_s": 3.0, "ttl_s": TTL_S},
        replicas={"tick_s": 0.25},
        serve={"control_token": TOKEN, "graceful_shutdown_s": 60},
    )
    # logical CPUs with room for a third replica: Serve may place a replacement before the killed
    # replica's placement group is gone (a CI run waited 240 s for one; cause not isolated)
    with run_local(
        config, host="127.0.0.1", port=free_port(), num_cpus=6, worker_pythonpath=str(ROOT)
    ) as local:
        yield local


def _report(name: str, load: StreamingLoad, marks: list[tuple[str, float]]) -> dict[str, dict[str, int]]:
    phases = {
        label: load.phase(start, end) for (label, start), (_, end) in zip(marks, marks[1:], strict=False)
    }
    report(f"{name}: " + "; ".join(f"{k} {v}" for k, v in phases.items()))
    return phases


def _run(
    app: LocalApp, fault: Any, recovered: Any, settle_s: float = 4.0
) -> tuple[StreamingLoad, list[tuple[str, float]]]:
    with StreamingLoad(app.base, MODEL) as load:
        marks = [("before", time.monotonic())]
        time.sleep(settle_s)
        marks.append(("during", time.monotonic()))
        fault()
        recovered()
        marks.append(("after", time.monotonic()))
        time.sleep(settle_s)
        marks.append(("end", time.monotonic()))
    return load, marks


def test_killing_the_policy_actor_under_load_loses_no_request_and_ray_restarts_the_same_actor(
    app: LocalApp,
) -> None:
    import ray

    before = app.client.status()["policy"]

    def kill() -> None:
        # the actor lives in Serve's namespace, beside the replicas (deployments.config.POLICY_NAMESPACE)
        (where,) = [
            a["namespace"] for a in ray.util.list_named_actors(all_namespaces=True) if a["name"] == ACTOR
        ]
        assert where == POLICY_NAMESPACE
        ray.kill(ray.get_actor(ACTOR, namespace=where), no_restart=False)

    def recovered() -> None:
        def back() -> bool:
            r = app.client.get("/specflip/status")
            if r.status_code != 200:
                return False
            doc = r.json()
            return doc["policy"]["restarted"] and len([x for x in doc["replicas"] if not x["stale"]]) == 2

        wait_until(back, 60, why="restarted policy actor with both replicas re-registered")

    load, marks = _run(app, kill, recovered)
    phases = _report("policy actor kill", load, marks)
    assert all(p["failed"] == 0 and p["sent"] > 0 for p in phases.values()), phases
    after = app.client.status()["policy"]
    assert after["restarted"] is True and after["restarts"] == (before["restarts"] or 0) + 1
    # every replica kept its handle: a metrics call after the restart reaches the same (restarted)
    # actor; the replica answering reads the count first (1), others as of their last call (0 or 1)
    text = app.client.get("/metrics").text
    restarts = [
        s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "specflip_ingress_policy_restarts"
    ]
    assert 1.0 in restarts and set(restarts) <= {0.0, 1.0}, restarts


def test_killing_the_serve_controller_under_load_loses_no_request(app: LocalApp) -> None:
    import ray

    def kill() -> None:
        ray.kill(ray.get_actor("SERVE_CONTROLLER_ACTOR", namespace="serve"), no_restart=False)

    def recovered() -> None:
        from ray import serve

        wait_until(
            lambda: serve.status().applications["specflip"].status == "RUNNING",
            90,
            every_s=1,
            why="controller back",
        )

    load, marks = _run(app, kill, recovered)
    phases = _report("serve controller kill", load, marks)
    assert all(p["failed"] == 0 and p["sent"] > 0 for p in phases.values()), phases
